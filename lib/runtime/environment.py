"""What a session ran on, for its row of sessions.jsonl: versions, the accelerator, the image.

After a hosted image updates, results drift and nobody can tell why (d2l-ai/d2l-en#2546,
googlecolab/colabtools#3726): each session writes down the Python, torch / torchvision /
torch_xla, the CUDA and cuDNN torch was built for (`torch_cuda_build`: "13.0" on a CPU-only
machine too, whose wheel carries CUDA; `cuda_devices` counts the GPUs it found), the
accelerator's model and memory (`lib.runtime.device`, the one module that asks the hardware),
this project's version and commit (`-dirty` when tracked files had changes, as `git describe
--dirty` says), and the hosted image
where the service names it: Colab's COLAB_RELEASE_TAG, Kaggle's GIT_COMMIT and BUILD_DATE
(Kaggle/docker-python Dockerfile.tmpl), Modal's MODAL_IMAGE_ID, SageMaker's
SAGEMAKER_INTERNAL_IMAGE_URI. `drift` says in one line when a resumed run's torch minor version
or image changed since its previous session.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import lib

PACKAGES = ("torch", "torchvision", "torch_xla")
ROOT = Path(lib.__file__).resolve().parent.parent  # the project (a checkout or a clone)


def versions(version=importlib.metadata.version) -> dict:
    """Python and each of PACKAGES' version (None when it is not installed)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


# Row keys renamed since rows were first written: an old row is read with the new names.
RENAMED = {"cuda": "torch_cuda_build", "cudnn": "torch_cudnn_build"}


def cuda_stack() -> dict:
    """The CUDA and cuDNN torch was built with (None on a build without them: a property of
    the wheel, not of the machine) and how many CUDA devices this session sees (0 without a
    GPU). Read from torch only when the session already imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {"torch_cuda_build": None, "torch_cudnn_build": None, "cuda_devices": 0}
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"torch_cuda_build": torch.version.cuda, "torch_cudnn_build": cudnn,
            "cuda_devices": devices}


def readable(row: dict) -> dict:
    """A sessions.jsonl row with today's key names (rows written before a rename keep theirs
    on disk)."""
    return {(RENAMED[k] if k in RENAMED and RENAMED[k] not in row else k): v
            for k, v in row.items()}


def image(environ=os.environ) -> str | None:
    """The hosted image this session runs in, as its service names it; None where unknown."""
    if tag := environ.get("COLAB_RELEASE_TAG"):
        return f"colab {tag}"
    if environ.get("KAGGLE_KERNEL_RUN_TYPE") and environ.get("GIT_COMMIT"):
        built = f" built {environ['BUILD_DATE']}" if environ.get("BUILD_DATE") else ""
        return f"kaggle docker-python {environ['GIT_COMMIT'][:12]}{built}"
    for name in ("MODAL_IMAGE_ID", "SAGEMAKER_INTERNAL_IMAGE_URI"):
        if environ.get(name):
            return f"{name} {environ[name]}"
    return None


def commit(root: Path = ROOT) -> str | None:
    """The project's git commit (12 characters), with `-dirty` when tracked files differ from
    it (what ran is then not that commit; untracked files do not count, as for `git describe
    --dirty`); None outside a git checkout."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                 text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    head = git("rev-parse", "--short=12", "HEAD")
    if not head:
        return None
    return f"{head}-dirty" if git("status", "--porcelain", "--untracked-files=no") else head


def facts(device: str | None) -> dict:
    """Everything above for a session training on a `device` kind ("cuda", "cpu", ...)."""
    from lib.runtime.device import accelerator  # imports torch: the session has it already

    model, memory = accelerator(device or "cpu")
    return {**versions(), **cuda_stack(), "accelerator": model, "accelerator_memory_gb": memory,
            "project_version": lib.__version__, "project_commit": commit(), "image": image()}


def _minor(version: str | None) -> str | None:
    return ".".join(version.split("+")[0].split(".")[:2]) if version else None


def drift(previous: dict, now: dict) -> str | None:
    """One line when this session runs another torch minor version or another hosted image
    than the run's previous session did (None when both match or are not recorded)."""
    changed = []
    before, after = previous.get("torch"), now.get("torch")
    if before and after and _minor(before) != _minor(after):
        changed.append(f"torch {before} -> {after}")
    if previous.get("image") and now.get("image") and previous["image"] != now["image"]:
        changed.append(f"image {previous['image']} -> {now['image']}")
    if not changed:
        return None
    return (f"NOTE: this run's previous session ran on {previous.get('platform', '?')} with "
            f"another environment ({'; '.join(changed)}): if its numbers move from here, "
            "that is the first suspect (sessions.jsonl keeps each session's versions)")
