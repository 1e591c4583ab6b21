"""Stand-ins of Studio Lab, a SageMaker Studio space, Paperspace, a Lightning AI Studio, a Modal
notebook's container, Colab Enterprise / a Workbench instance and a JupyterHub server: each
service's environment variables, home and folders under a root that TA_CLOUD_ROOT points at
(what each service sets, with sources: lib/runtime/clouds.py; Lightning's and Modal's cited
below, with how a Modal Volume commits). Used by tests/test_notebooks_clouds.py,
tests/test_notebooks_more_clouds.py, tests/test_more_clouds.py and by the SageMaker
Distribution lane (tests/test_image_lanes.py)."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from pathlib import Path


def studiolab(root: Path) -> tuple[dict, Path, Path]:
    """(environment, working folder, our folder) of a Studio Lab runtime."""
    home = root / "home/studio-lab-user"
    env = {"HOME": str(home), "USER": "studio-lab-user",
           "SAGEMAKER_INTERNAL_IMAGE_URI": "studiolab-image"}  # set there (a 2026 script)
    return env, home, home / "train-anywhere-work"


def sagemaker(root: Path) -> tuple[dict, Path, Path]:
    """A Studio JupyterLab space: its variables and the metadata file AWS documents."""
    home = root / "home/sagemaker-user"
    meta = root / "opt/ml/metadata/resource-metadata.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"DomainId": "d-1", "SpaceName": "s", "ResourceArn":
                                "arn:aws:sagemaker:us-east-1:1:space/d-1/s"}))
    env = {"HOME": str(home), "SAGEMAKER_APP_TYPE": "JupyterLab",
           "SAGEMAKER_APP_TYPE_LOWERCASE": "jupyterlab"}
    return env, home, home / "train-anywhere-work"


def sagemaker_instance(root: Path) -> tuple[dict, Path, Path]:
    """A notebook instance: Jupyter runs as ec2-user with its root at ~/SageMaker, the only
    folder kept over a stop, where repositories attached at creation are cloned; the metadata
    file's ResourceArn names the instance (AWS docs howitworks-create-ws.md, nbi-metadata.md).
    No SAGEMAKER_APP_TYPE: that is Studio's."""
    home = root / "home/ec2-user"
    meta = root / "opt/ml/metadata/resource-metadata.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"ResourceArn": "arn:aws:sagemaker:us-east-1:1:"
                                "notebook-instance/mine", "ResourceName": "mine"}))
    return {"HOME": str(home), "USER": "ec2-user"}, home / "SageMaker", (
        home / "SageMaker/train-anywhere-work")


def paperspace(root: Path) -> tuple[dict, Path, Path]:
    """A Paperspace notebook: root user, /notebooks (the file manager), /storage, /datasets."""
    for name in ("notebooks", "storage", "datasets", "root"):
        (root / name).mkdir()
    env = {"HOME": str(root / "root"), "PAPERSPACE_NOTEBOOK_ID": "nabc123",
           "PAPERSPACE_CLUSTER_ID": "clg07azjl", "PAPERSPACE_FQDN": "nabc123.clg07azjl.x"}
    return env, root / "notebooks", root / "storage" / "train-anywhere"


def lightning(root: Path) -> tuple[dict, Path, Path]:
    """A Lightning AI Studio: user `zeus`, HOME /teamspace/studios/this_studio (kept across
    sleep and machine switches), the Studio's variables (litdata reads LIGHTNING_CLOUD_SPACE_ID;
    lightning.app LIGHTNING_CLOUDSPACE_HOST), the base conda env `cloudspace` active, and the
    credentials a Studio also sets, which nothing here reads: "from within a Studio, these
    variables [LIGHTNING_USER_ID, LIGHTNING_API_KEY] are already available for you"
    (lightning-sdk's README, https://pypi.org/project/lightning-sdk/)."""
    home = root / "teamspace/studios/this_studio"
    env = {"HOME": str(home), "USER": "zeus", "LIGHTNING_CLOUD_SPACE_ID": "01studio",
           "LIGHTNING_CLOUD_PROJECT_ID": "01project",
           "LIGHTNING_CLOUDSPACE_HOST": "01studio.cloudspaces.litng.ai",
           "CONDA_DEFAULT_ENV": "cloudspace", "LIGHTNING_USER_ID": "01user",
           "LIGHTNING_API_KEY": "placeholder"}
    return env, home, home / "train-anywhere-work"


# A Modal notebook's container, as Modal documents it:
# - its variables: "present in every Modal container": MODAL_CLOUD_PROVIDER, MODAL_IMAGE_ID,
#   MODAL_REGION, MODAL_TASK_ID (https://modal.com/docs/guide/environment_variables; the
#   Function-only ones, MODAL_ENVIRONMENT and MODAL_IS_REMOTE, are not a notebook's: its
#   kernel runs in a Sandbox);
# - attached Volumes "will appear as folders in the /mnt directory by default"; "the
#   underlying container is ephemeral. Anything stored outside an attached Volume disappears
#   when the kernel shuts down (after your idle-timeout or when you hit Stop kernel)"; the
#   idle shutdown "defaults to 10 minutes" (https://modal.com/docs/guide/notebooks);
# - a Volume is not a shared disk: "At container creation time the latest state of an
#   attached Volume is mounted"; changes "need to be committed for those the changes to become
#   visible outside the current container", by `.commit()` or by background commits: "every
#   few seconds while your Function or Sandbox executes, the contents of attached Volumes will
#   be committed [...]. A final snapshot and commit is also automatically performed on
#   container shutdown" (https://modal.com/docs/guide/volumes, "Volume commits and reloads",
#   "Background commits"). So a container lost before that last commit leaves the Volume as
#   the last commit had it.
# The stand-in keeps each Volume's committed state on Modal's side (VOLUMES, beside the
# container's folders under the root, never read by the code under test) and mounts a copy of
# it at /mnt/<volume> when a container starts; `commit` is `.commit()` or a background commit
# landing, `background_commits` commits every few seconds while a session runs, and
# `new_container` ends a container (its final commit unless it was lost) and starts the next.
MODAL_VOLUME = "runs-volume"
MODAL_IDLE_MINUTES = 10  # the notebooks guide: idle shutdown "defaults to 10 minutes"
VOLUMES = ".modal-volumes"  # Modal's side: each Volume as last committed (not in a container)
_COMMITTING = threading.Lock()


def modal(root: Path, volume: bool = True) -> tuple[dict, Path, Path]:
    """A Modal notebook's container: root user, HOME /root, the variables every container has,
    and, when `volume`, a Volume attached at /mnt/<volume>, mounted as last committed."""
    (root / "root").mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    if volume:
        _mount(root, MODAL_VOLUME)
    env = {"HOME": str(root / "root"), "MODAL_TASK_ID": "ta-01", "MODAL_IMAGE_ID": "im-01",
           "MODAL_REGION": "us-east-1", "MODAL_CLOUD_PROVIDER": "CLOUD_PROVIDER_AWS"}
    return env, root / "root", root / "mnt" / MODAL_VOLUME / "train-anywhere"


def _mount(root: Path, name: str) -> None:
    """Attach Volume `name` (created empty if missing, as `Volume.from_name(...,
    create_if_missing=True)`) to the container: its committed state, copied to /mnt/<name>."""
    store, mount = root / VOLUMES / name, root / "mnt" / name
    store.mkdir(parents=True, exist_ok=True)
    if not mount.exists():
        shutil.copytree(store, mount, symlinks=True)


def attached(root: Path) -> list[str]:
    """The Volumes this container has mounted."""
    mnt = root / "mnt"
    return sorted(p.name for p in mnt.iterdir() if (root / VOLUMES / p.name).is_dir()) \
        if mnt.is_dir() else []


def commit(root: Path, name: str = MODAL_VOLUME) -> None:
    """`Volume.commit()`, or a background commit landing: the container's /mnt/<name> becomes
    the Volume's state, whole (the last writer wins, as on Modal)."""
    store, tmp = root / VOLUMES / name, root / VOLUMES / f".{name}.committing"
    with _COMMITTING:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(root / "mnt" / name, tmp, symlinks=True)
        shutil.rmtree(store)
        tmp.rename(store)


@contextlib.contextmanager
def background_commits(root: Path, every: float = 2.0):
    """Modal's background commits while a session runs: every attached Volume committed every
    `every` seconds (Modal: "every few seconds"). Yields the times (monotonic) at which each
    round that landed began; a round that meets a file the session is just moving (a
    checkpoint's rename) is dropped and the next one commits. Leaving stops them; the final
    commit is the container's shutdown (`new_container`)."""
    stop = threading.Event()
    landed: list[float] = []

    def run():
        while not stop.wait(every):
            began = time.monotonic()
            try:
                for name in attached(root):
                    commit(root, name)
            except (OSError, shutil.Error):
                continue
            landed.append(began)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield landed
    finally:
        stop.set()
        thread.join()


def new_container(root: Path, shutdown: bool = True) -> None:
    """The notebook's next container. The last one ended: shut down (the idle stop, Stop
    kernel: its final snapshot and commit ran) or, `shutdown=False`, lost before that (only
    what an earlier commit landed survives). Nothing of it is left, its disk, home, /tmp and
    anything installed or cloned there; the next one mounts each attached Volume as last
    committed."""
    names = attached(root)
    if shutdown:
        for name in names:
            commit(root, name)
    for path in root.iterdir():
        if path.name != VOLUMES:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name in names:
        _mount(root, name)


def colab_enterprise(root: Path) -> tuple[dict, Path, Path]:
    """A Colab Enterprise runtime: Colab's own variable and VERTEX_PRODUCT (python-aiplatform's
    initializer), /content as on Colab, no Drive."""
    (root / "content").mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(root / "root"), "COLAB_RELEASE_TAG": "release-colab-enterprise",
           "VERTEX_PRODUCT": "COLAB_ENTERPRISE"}
    return env, root / "content", root / "content" / "train-anywhere"


def jupyterhub(root: Path) -> tuple[dict, Path, Path]:
    """A single-user server spawned by a JupyterHub (jupyterhub Spawner.get_env): its
    variables and the user's home."""
    home = root / "home/jovyan"
    env = {"HOME": str(home), "JUPYTERHUB_USER": "student", "JUPYTERHUB_API_URL":
           "http://hub:8081/hub/api", "JUPYTERHUB_SERVER_NAME": ""}
    return env, home, home / "train-anywhere-work"


SERVICES = {"studiolab_t4": studiolab, "sagemaker_gpu": sagemaker, "paperspace_gpu": paperspace}
# The services of issue 38: their notebooks run in tests/test_notebooks_more_clouds.py.
MORE_SERVICES = {"lightning_studio": lightning, "modal": modal}


def fill(folder: Path, nbytes: int, name: str = ".conda/envs/default/lib/libtorch_cuda.so"):
    """What already takes a service's storage, e.g. a conda environment in the Studio Lab home:
    a sparse file of `nbytes` (its size counts, as a quota counts it; the disk barely)."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(nbytes)
    return path
