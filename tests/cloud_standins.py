"""Stand-ins of Studio Lab, a SageMaker Studio space and Paperspace: each service's
environment variables, home and folders under a root that TA_CLOUD_ROOT points at (what each
service sets, with sources: lib/clouds.py). Used by tests/test_notebooks_clouds.py and by the
SageMaker Distribution lane (tests/test_image_lanes.py)."""

from __future__ import annotations

import json
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


SERVICES = {"studiolab_t4": studiolab, "sagemaker_gpu": sagemaker, "paperspace_gpu": paperspace}


def fill(folder: Path, nbytes: int, name: str = ".conda/envs/default/lib/libtorch_cuda.so"):
    """What already takes a service's storage, e.g. a conda environment in the Studio Lab home:
    a sparse file of `nbytes` (its size counts, as a quota counts it; the disk barely)."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(nbytes)
    return path
