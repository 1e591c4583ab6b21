"""The other clouds: SageMaker Studio Lab, SageMaker Studio / notebook instances, Paperspace.

How each is recognised at run time and where it keeps what (the storage roles of
`lib.platforms`: *scratch* for data and caches, *durable* for run folders), with the
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

Every service path is under TA_CLOUD_ROOT (default "/"): the stand-ins in tests point it at a
temporary folder, as TA_COLAB_DRIVE does for Drive.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from lib.errors import OutDirError

CLOUD_ROOT_ENV = "TA_CLOUD_ROOT"
RUNTIMES = ("studiolab", "sagemaker", "paperspace")
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


def detect(environ=None, exists=Path.exists) -> str | None:
    """"studiolab", "sagemaker", "paperspace" or None. Studio Lab first: AWS's own packages
    read SageMaker's variables there too. `exists` is injectable for tests."""
    environ = os.environ if environ is None else environ
    root = cloud_root(environ)
    if _home(environ) == root / STUDIOLAB_HOME:
        return "studiolab"
    if ("SAGEMAKER_APP_TYPE" in environ or "SAGEMAKER_APP_TYPE_LOWERCASE" in environ
            or exists(root / SAGEMAKER_METADATA)):
        return "sagemaker"
    if any(v in environ for v in PAPERSPACE_VARS) or (
            exists(root / "notebooks") and exists(root / "storage")):
        return "paperspace"
    return None


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
    """The storage roles of one of these runtimes (shaped as `lib.platforms` storage)."""

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


def check_out_dir(out_dir: Path, runtime: str, environ=None) -> None:
    """Refuse a run folder Paperspace would mangle: under /notebooks a folder named
    `checkpoints` (every run folder has one) is reserved."""
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
