"""Stand-ins of Studio Lab, a SageMaker Studio space, Paperspace, a Lightning AI Studio, a Modal
notebook's container, Colab Enterprise / a Workbench instance and a JupyterHub server: each
service's environment variables, home and folders under a root that TA_CLOUD_ROOT points at
(what each service sets, with sources: lib/runtime/clouds.py). Used by
tests/test_notebooks_clouds.py,
tests/test_notebooks_more_clouds.py, tests/test_more_clouds.py and by the SageMaker
Distribution lane (tests/test_image_lanes.py)."""

from __future__ import annotations

import json
import shutil
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
    lightning.app LIGHTNING_CLOUDSPACE_HOST), the base conda env `cloudspace` active."""
    home = root / "teamspace/studios/this_studio"
    env = {"HOME": str(home), "USER": "zeus", "LIGHTNING_CLOUD_SPACE_ID": "01studio",
           "LIGHTNING_CLOUD_PROJECT_ID": "01project",
           "LIGHTNING_CLOUDSPACE_HOST": "01studio.cloudspaces.litng.ai",
           "CONDA_DEFAULT_ENV": "cloudspace"}
    return env, home, home / "train-anywhere-work"


MODAL_VOLUME = "runs-volume"


def modal(root: Path, volume: bool = True) -> tuple[dict, Path, Path]:
    """A Modal notebook's container: root user, HOME /root, the variables every container has
    (MODAL_TASK_ID, MODAL_IMAGE_ID, MODAL_REGION), and, when `volume`, an attached Volume at
    /mnt/<volume> (the only folder that outlives the container: `new_container`)."""
    (root / "root").mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    if volume:
        (root / "mnt" / MODAL_VOLUME).mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(root / "root"), "MODAL_TASK_ID": "ta-01", "MODAL_IMAGE_ID": "im-01",
           "MODAL_REGION": "us-east-1", "MODAL_CLOUD_PROVIDER": "CLOUD_PROVIDER_AWS"}
    return env, root / "root", root / "mnt" / MODAL_VOLUME / "train-anywhere"


def new_container(root: Path) -> None:
    """A Modal notebook's next container: everything but the attached Volumes (/mnt) is gone,
    the container's disk, home, /tmp and anything installed or cloned there."""
    for path in root.iterdir():
        if path.name != "mnt":
            shutil.rmtree(path) if path.is_dir() else path.unlink()


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
