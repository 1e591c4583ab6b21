"""The other clouds: SageMaker Studio Lab, SageMaker Studio / notebook instances, Paperspace,
Lightning AI Studios, Modal Notebooks, Colab Enterprise / Vertex AI Workbench, any JupyterHub.

How each is recognised at run time and where it keeps what (the storage roles of
`lib.runtime.platforms`: *scratch* for data and caches, *durable* for run folders), with the
services' own facts and their sources (the project's reference notes, more-clouds.md):

- Studio Lab: no documented variable; the user is `studio-lab-user` with
  HOME=/home/studio-lab-user, the 15 GB persistent project storage (AWS docs
  studio-lab-use-migrate.md, studio-lab-overview.md). Only the home survives a runtime's end.
- SageMaker Studio (JupyterLab spaces): `SAGEMAKER_APP_TYPE[_LOWERCASE]` (AWS's
  jupyter-scheduler keys on it) and /opt/ml/metadata/resource-metadata.json (AWS docs
  notebooks-run-and-manage-metadata.md). Only /home/sagemaker-user (the space's EBS volume)
  survives a stop. Notebook instances: the same metadata file, its ResourceArn
  `...:notebook-instance/<name>`; only /home/ec2-user/SageMaker survives (AWS docs
  howitworks-create-ws.md, nbi-metadata.md).
- Paperspace Notebooks: `PAPERSPACE_*` variables (ZenML reads PAPERSPACE_NOTEBOOK_REPO_ID;
  Graphcore PAPERSPACE_NOTEBOOK_ID, PAPERSPACE_CLUSTER_ID, PAPERSPACE_FQDN), or /notebooks and
  /storage both present. /notebooks and /storage persist, the container root does not; a
  folder named `checkpoints` inside /notebooks is reserved (docs.digitalocean.com/products/
  paperspace/notebooks/details/storage-architecture/), and every run folder has one, so run
  folders go to /storage and never under /notebooks.

- Lightning AI Studios: `LIGHTNING_CLOUD_SPACE_ID` (litdata's S3 client keys on it),
  `LIGHTNING_CLOUDSPACE_HOST` (lightning.app constants), `LIGHTNING_CLOUD_PROJECT_ID`; HOME
  /teamspace/studios/this_studio, user `zeus`. Everything under the home persists across
  sleep and machine switches (Lightning docs, "environment persistence"); no separate scratch
  is documented, so data and run folders both live there. No session cap is documented.
  Packages go into the base conda env `cloudspace`: "we don't allow creating additional
  environments or virtual environments"; installs there persist.
- Modal Notebooks: `MODAL_TASK_ID`, `MODAL_IMAGE_ID`, `MODAL_REGION` in every container (Modal
  docs, environment variables: modal.com/docs/guide/environment_variables; `modal.is_local()`
  is True inside notebook sandboxes, so it is not asked). The container is ephemeral: only an
  attached Volume, mounted at /mnt/<volume> ("Volumes appear as folders in the /mnt directory
  by default": modal.com/docs/guide/notebooks), persists, committed in the background every
  few seconds and at shutdown; a new container sees the last commit
  (modal.com/docs/guide/volumes, "Background commits"). The kernel stops after 10 idle minutes
  by default (the notebooks guide): the run checkpoints every CHECKPOINT_MINUTES, the most an
  idle stop loses. The default image is unpinned (modal-client `notebook_base_image.py`: torch
  from the cu126 index at build time): torch is read at run time.
- Colab Enterprise and Vertex AI Workbench: `VERTEX_PRODUCT` in VERTEX_PRODUCTS
  (python-aiplatform's initializer); Colab Enterprise also sets `COLAB_RELEASE_TAG`, so it is
  asked before Colab. Drive cannot be mounted there (Cloud Storage instead): results stay on
  the runtime's disk (Colab Enterprise: /content) or a Workbench instance's data disk (HOME,
  /home/jupyter).
- Any JupyterHub: `JUPYTERHUB_USER` / `JUPYTERHUB_API_URL` (jupyterhub `Spawner.get_env`),
  asked after every named service (several run on a hub). The home persists under the site's
  quota; on Kubernetes /dev/shm is often 64 MB (pangeo-docker-images#258), which
  `lib.runtime.device.shm_workers` honours.

Every service path is under TA_CLOUD_ROOT (default "/"): the stand-ins in tests point it at a
temporary folder, as TA_COLAB_DRIVE does for Drive.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from lib.base.errors import OutDirError

CLOUD_ROOT_ENV = "TA_CLOUD_ROOT"
RUNTIMES = ("studiolab", "sagemaker", "paperspace", "lightning", "modal", "vertex",
            "jupyterhub")
# The hard session limit of each runtime (None: none documented), for a notebook rendered for
# another runtime (a Colab notebook opened there): Lightning, Modal, Colab Enterprise /
# Workbench and a hub bill or idle-stop, they do not cap a session.
SESSION_HOURS = {"studiolab": 4.0, "sagemaker": None, "paperspace": 6.0, "lightning": None,
                 "modal": None, "vertex": None, "jupyterhub": None}
LIGHTNING_VARS = ("LIGHTNING_CLOUD_SPACE_ID", "LIGHTNING_CLOUDSPACE_HOST",
                  "LIGHTNING_CLOUD_PROJECT_ID")
LIGHTNING_HOME = "teamspace/studios/this_studio"
LIGHTNING_ENV = "cloudspace"  # the one conda env a Studio allows
MODAL_VARS = ("MODAL_TASK_ID", "MODAL_IMAGE_ID", "MODAL_REGION")
MODAL_IDLE_MINUTES = 10  # a Modal notebook's kernel stops after this many idle minutes
MODAL_VOLUME_ENV = "TA_MODAL_VOLUME"  # which /mnt/<volume> holds runs, when several are attached
EPHEMERAL_OK_ENV = "TA_EPHEMERAL_OK"  # "1": train a full run where nothing outlives the session
VERTEX_PRODUCTS = ("COLAB_ENTERPRISE", "WORKBENCH_INSTANCE", "WORKBENCH_CUSTOM_CONTAINER")
JUPYTERHUB_VARS = ("JUPYTERHUB_USER", "JUPYTERHUB_API_URL")
STUDIOLAB_HOME = "home/studio-lab-user"
SAGEMAKER_STUDIO_HOME = "home/sagemaker-user"
SAGEMAKER_INSTANCE_HOME = "home/ec2-user/SageMaker"
SAGEMAKER_METADATA = "opt/ml/metadata/resource-metadata.json"
PAPERSPACE_VARS = ("PAPERSPACE_NOTEBOOK_REPO_ID", "PAPERSPACE_NOTEBOOK_ID",
                   "PAPERSPACE_CLUSTER_ID", "PAPERSPACE_FQDN", "PAPERSPACE_METRIC_WORKLOAD_ID")
PAPERSPACE_RESERVED = "checkpoints"  # reserved inside /notebooks; our run folders have one
# Our folder in an AWS home. Not "train-anywhere": that is where Studio Lab's "Clone Entire
# Repo", JupyterLab's Git clone and the bootstrap's own clone put the repository.
WORK = "train-anywhere-work"


def cloud_root(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(CLOUD_ROOT_ENV, "/"))


def _home(environ) -> Path | None:
    home = environ.get("HOME")
    return Path(home) if home else None


def is_vertex(environ=None) -> bool:
    """Colab Enterprise or Vertex AI Workbench: asked before Colab, whose variable Colab
    Enterprise sets too."""
    environ = os.environ if environ is None else environ
    return environ.get("VERTEX_PRODUCT", "") in VERTEX_PRODUCTS


def detect(environ=None, exists=Path.exists) -> str | None:
    """One of RUNTIMES or None. The named services first, by their own variables (Lightning,
    Modal), then Studio Lab before SageMaker (AWS's own packages read SageMaker's variables
    there too), and a JupyterHub last: several of these run on a hub. `exists` is injectable
    for tests."""
    environ = os.environ if environ is None else environ
    root = cloud_root(environ)
    if is_vertex(environ):
        return "vertex"
    if any(v in environ for v in LIGHTNING_VARS):
        return "lightning"
    if any(v in environ for v in MODAL_VARS):
        return "modal"
    if _home(environ) == root / STUDIOLAB_HOME:
        return "studiolab"
    if ("SAGEMAKER_APP_TYPE" in environ or "SAGEMAKER_APP_TYPE_LOWERCASE" in environ
            or exists(root / SAGEMAKER_METADATA)):
        return "sagemaker"
    if any(v in environ for v in PAPERSPACE_VARS) or (
            exists(root / "notebooks") and exists(root / "storage")):
        return "paperspace"
    if any(v in environ for v in JUPYTERHUB_VARS):
        return "jupyterhub"
    return None


def modal_volume(environ=None) -> Path | None:
    """The Volume run folders go to: /mnt/<TA_MODAL_VOLUME>, else the first folder under
    /mnt (Modal Notebooks mount each attached Volume there); None when none is attached (or
    the one TA_MODAL_VOLUME names is not)."""
    environ = os.environ if environ is None else environ
    mnt = cloud_root(environ) / "mnt"
    if environ.get(MODAL_VOLUME_ENV):
        named = mnt / environ[MODAL_VOLUME_ENV]
        return named if named.is_dir() else None
    found = sorted(p for p in mnt.iterdir() if p.is_dir()) if mnt.is_dir() else []
    return found[0] if found else None


NO_VOLUME = ("no Modal Volume is attached under /mnt (or not the one TA_MODAL_VOLUME names), "
             "so results in this container "
             "are lost when it stops (after {idle} idle minutes): attach a Volume to this "
             "notebook (it mounts at /mnt/<volume>) and re-run this cell to keep them")


def advice(runtime: str, environ=None) -> str:
    """One line a runtime needs said before anything runs, or "": a Modal container with no
    Volume keeps nothing."""
    if runtime == "modal" and modal_volume(environ) is None:
        return NO_VOLUME.format(idle=MODAL_IDLE_MINUTES)
    return ""


def clock_note(runtime: str, checkpoint_minutes: float) -> str:
    """One line on what a runtime's idle stop costs a run, or "" (Modal: the kernel stops
    after 10 idle minutes; the run saves every CHECKPOINT_MINUTES, the most a stop loses)."""
    if runtime != "modal":
        return ""
    return (f"Modal stops an idle kernel after {MODAL_IDLE_MINUTES} minutes (by default): "
            f"this run saves every {checkpoint_minutes:g} min (CHECKPOINT_MINUTES), the most "
            "a stop loses; re-run in a new container with the same Volume to resume")


def sagemaker_kind(environ=None, exists=Path.exists, read=Path.read_text) -> str:
    """"instance" (a notebook instance) or "studio" (a Studio JupyterLab space)."""
    environ = os.environ if environ is None else environ
    root = cloud_root(environ)
    if _home(environ) == root / "home" / "ec2-user":
        return "instance"
    meta = root / SAGEMAKER_METADATA
    if exists(meta):
        try:
            arn = json.loads(read(meta)).get("ResourceArn", "")
        except (OSError, ValueError):
            arn = ""
        if ":notebook-instance/" in arn:
            return "instance"
    return "studio"


@dataclass(frozen=True)
class CloudStorage:
    """The storage roles of one of these runtimes (shaped as `lib.runtime.platforms` storage)."""

    scratch: Path  # data, downloads, caches: kept here too (re-downloading costs a session)
    durable: Path  # run folders
    keeps: str  # what survives the session
    carry_over: str  # how a run gets to the next session
    quota_gb: float | None = None  # the persistent storage's size, when the service says
    # The folder a quota of quota_gb counts, when the disk's own free space does not show it
    # (Studio Lab: the home, conda environments and pip installs included). None: the disk
    # reports its size itself (a SageMaker space's EBS volume, whatever size the admin set).
    quota_root: Path | None = None


@dataclass(frozen=True)
class Quota:
    """A service's storage quota that a path counts against (`quota`)."""

    root: Path  # everything under it counts
    limit: int  # bytes
    name: str  # e.g. "Studio Lab's 15 GB project storage"
    fix: str  # how to make room there


def storage(runtime: str, environ=None, exists=Path.exists) -> CloudStorage:
    """Where `runtime` keeps data and run folders; everything on the persistent storage."""
    environ = os.environ if environ is None else environ
    root = cloud_root(environ)
    again = "re-run the notebook: it resumes from the newest checkpoint in the run folder"
    # What stops a session there, said with the advice (ETA warning, clean stop).
    lab = ("Studio Lab ends GPU sessions after 4 h and caps GPU time per day: in the next GPU "
           "session, " + again)
    paid = "an idle shutdown set by your admin stops the kernel: " + again
    free = ("a free machine shuts down after 6 h: start it again (Start Machine) and " + again)
    if runtime == "studiolab":
        base = root / STUDIOLAB_HOME / WORK
        return CloudStorage(base, base / "runs", "in your Studio Lab project (15 GB, with "
                            "conda environments); kept between sessions", lab, 15.0,
                            root / STUDIOLAB_HOME)
    if runtime == "sagemaker":
        if sagemaker_kind(environ, exists) == "instance":
            base = root / SAGEMAKER_INSTANCE_HOME / WORK
            kept = "on the notebook instance's ML volume (5 GB by default); kept when it stops"
        else:
            base = root / SAGEMAKER_STUDIO_HOME / WORK
            kept = "on the space's EBS volume (5 GB by default); kept when the space stops"
        return CloudStorage(base, base / "runs", kept, paid, 5.0)
    if runtime == "paperspace":
        base = root / "storage" / "train-anywhere"
        return CloudStorage(base, base / "runs", "in /storage (persistent, shared by your "
                            "team); kept after the auto-shutdown", free)
    if runtime == "lightning":  # the home is durable and scratch alike
        base = root / LIGHTNING_HOME / WORK
        return CloudStorage(base, base / "runs", "in the Studio's home (/teamspace/studios/"
                            "this_studio); kept across sleep and machine switches",
                            "when the Studio wakes (or moves to another machine), " + again)
    if runtime == "modal":  # data on the container's disk; run folders on a Volume
        scratch = root / "tmp" / "train-anywhere"
        volume = modal_volume(environ)
        if volume is None:
            return CloudStorage(scratch, scratch / "runs", "in this container only: lost when "
                                "it stops (no Volume attached)", "attach a Volume (it mounts "
                                "at /mnt/<volume>); this run cannot be continued")
        return CloudStorage(scratch, volume / "train-anywhere" / "runs",
                            f"on the Modal Volume at {volume}; kept when the container stops",
                            f"the kernel stops after {MODAL_IDLE_MINUTES} idle minutes: in a "
                            "new container with the same Volume attached, " + again)
    if runtime == "vertex":  # Drive cannot be mounted here
        if environ.get("VERTEX_PRODUCT") == "COLAB_ENTERPRISE":
            base = root / "content" / "train-anywhere"
            kept = ("on the runtime's disk: lost when the runtime is deleted (no Drive on "
                    "Colab Enterprise: copy results to Cloud Storage to keep them)")
        else:  # a Workbench instance's data disk is its home, /home/jupyter
            base = (_home(environ) or root / "home" / "jupyter") / WORK
            kept = "on the instance's data disk (its home); kept when it stops"
        return CloudStorage(base, base / "runs", kept, "an idle shutdown stops the kernel: "
                            + again)
    if runtime == "jupyterhub":
        user = environ.get("JUPYTERHUB_USER", "jovyan")
        base = (_home(environ) or root / "home" / user) / WORK
        return CloudStorage(base, base / "runs", "in your home on the hub (the site's quota); "
                            "kept when your server stops", "when your server is started again, "
                            + again)
    raise ValueError(f"not one of these clouds: {runtime!r}; expected one of {RUNTIMES}")


def quota(path: Path, environ=None) -> Quota | None:
    """The quota `path` counts against on this service, if one applies there: Studio Lab's
    15 GB project storage holds the whole home, conda environments and pip installs included
    (AWS docs studio-lab-overview.md, studio-lab-use-manage.md; aws/studio-lab-examples#167)."""
    environ = os.environ if environ is None else environ
    runtime = detect(environ)
    if runtime is None:
        return None
    roles = storage(runtime, environ)
    if roles.quota_root is None or roles.quota_gb is None:
        return None
    path = Path(os.path.abspath(path))
    if path != roles.quota_root and roles.quota_root not in path.parents:
        return None
    return Quota(roles.quota_root, int(roles.quota_gb * 1e9),
                 f"Studio Lab's {roles.quota_gb:g} GB project storage",
                 "make room there (conda environments and pip installs count: `du -sh "
                 "~/.conda/envs/* ~/*` lists the largest, `conda env remove -n NAME` removes "
                 "an environment), or train on a smaller dataset")


def check_out_dir(out_dir: Path, runtime: str, environ=None, smoke: bool = False) -> None:
    """Refuse a run folder Paperspace would mangle (under /notebooks a folder named
    `checkpoints`, which every run folder has, is reserved), and a full (not SMOKE) run on Modal
    whose folder is on no Volume, where nothing of it would survive, unless TA_EPHEMERAL_OK=1."""
    environ = os.environ if environ is None else environ
    if runtime == "modal" and not smoke and environ.get(EPHEMERAL_OK_ENV) != "1":
        path = Path(os.path.abspath(out_dir))
        mnt = cloud_root(environ) / "mnt"
        parts = path.relative_to(mnt).parts if path.is_relative_to(mnt) else ()
        if not (parts and (mnt / parts[0]).is_dir()):  # an attached Volume is there already
            raise OutDirError(
                f"OUT_DIR {str(out_dir)!r} is in this Modal container, which nothing outlives: "
                "attach a Volume to this notebook (it mounts at /mnt/<volume>) and run again "
                "with OUT_DIR = None, or set OUT_DIR under /mnt/<volume>; to train here anyway, "
                f"set {EPHEMERAL_OK_ENV}=1 (os.environ[{EPHEMERAL_OK_ENV!r}] = \"1\" in a cell "
                "before this one).")
    if runtime != "paperspace":
        return
    notebooks = cloud_root(environ) / "notebooks"
    path = Path(os.path.abspath(out_dir))
    if path == notebooks or notebooks in path.parents:
        raise OutDirError(
            f"OUT_DIR {str(out_dir)!r} is under /notebooks, where Paperspace reserves folders "
            f"named {PAPERSPACE_RESERVED!r} (a run folder keeps its checkpoints in one); set "
            "OUT_DIR = None (/storage/train-anywhere/runs/<workload>) or a folder under "
            "/storage.")
