"""Platform profiles (what each rendered notebook targets) and runtime detection.

A profile says what a platform *should* have; `lib.device` decides what the machine really
has. Paths here are where data and outputs live on that runtime, so a Colab run writes to
Drive and survives a disconnect.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lib.errors import ConfigError

# Default batch sizes per workload, tuned to the accelerator's memory (T4/P100 16 GB,
# v5e-1 16 GB HBM, a Mac's unified memory shared with the OS).
_BATCH = {
    "colab_t4": {"fashion_mnist": 256, "mamba_spike": 16, "mshnet": 8},
    "colab_tpu": {"fashion_mnist": 512, "mamba_spike": 32, "mshnet": 16},
    "kaggle_p100": {"fashion_mnist": 256, "mamba_spike": 16, "mshnet": 8},
    "local_mps": {"fashion_mnist": 128, "mamba_spike": 8, "mshnet": 4},
}
# Multi-device platforms share the single-device tables per device.
_BATCH["kaggle_t4x2"] = dict(_BATCH["colab_t4"])
_BATCH["kaggle_tpu"] = dict(_BATCH["colab_tpu"])
# The other clouds (lib/clouds.py): Studio Lab and SageMaker's default GPU are T4s (16 GB);
# Paperspace's free GPUs have 8 GB (M4000, P4000, RTX4000): half the T4 batches.
_BATCH["studiolab_t4"] = dict(_BATCH["colab_t4"])
_BATCH["sagemaker_gpu"] = dict(_BATCH["colab_t4"])
_BATCH["paperspace_gpu"] = {"fashion_mnist": 128, "mamba_spike": 8, "mshnet": 4}

DEVICE_CHOICES = ("auto", "cuda", "xla", "mps", "cpu")  # DEVICE: "auto" or a device kind
DRIVE_MOUNT_ENV = "TA_COLAB_DRIVE"  # where Drive is mounted; tests point it at a temp dir


@dataclass(frozen=True)
class Platform:
    """What a platform notebook targets: runtime, accelerator, defaults and badges."""

    name: str
    title: str
    runtime: str  # "colab" | "kaggle" | "local" | lib.clouds.RUNTIMES
    accelerator: str  # "cuda" | "xla" | "mps"
    gpu: str  # marketing name shown to users, e.g. "Tesla T4"
    session_hours: float | None  # hard session limit, for the ETA warning
    num_workers: int
    devices: int = 1
    batch_sizes: dict[str, int] = field(default_factory=dict)
    status: str = ""  # said beside the badge, e.g. that the hardware is retired

    def batch_size(self, workload: str) -> int:
        """Default batch size (per device) of `workload` on this platform."""
        if workload not in self.batch_sizes:
            raise ValueError(
                f"no default batch size for workload {workload!r} on {self.name}; "
                f"known workloads: {sorted(self.batch_sizes)}. Set BATCH_SIZE explicitly."
            )
        return self.batch_sizes[workload]


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in [
        Platform("colab_t4", "Colab T4", "colab", "cuda", "Tesla T4", 12.0, 2,
                 batch_sizes=_BATCH["colab_t4"]),
        Platform("colab_tpu", "Colab TPU", "colab", "xla", "TPU v5e-1", 12.0, 2,
                 batch_sizes=_BATCH["colab_tpu"]),
        # Kaggle has retired its P100s: a notebook asking for one runs on a T4 (lib.device
        # says so); the notebook stays for the sm_60 preflight and for older pushes.
        Platform("kaggle_p100", "Kaggle P100", "kaggle", "cuda", "Tesla P100", 12.0, 2,
                 batch_sizes=_BATCH["kaggle_p100"],
                 status="retired on Kaggle: runs on a T4"),
        Platform("local_mps", "Local Mac (MPS)", "local", "mps", "Apple Silicon", None, 0,
                 batch_sizes=_BATCH["local_mps"]),
        # Multi-device: one process per device, BATCH_SIZE per device.
        Platform("kaggle_t4x2", "Kaggle T4 x2", "kaggle", "cuda", "2 x Tesla T4", 12.0, 2,
                 devices=2, batch_sizes=_BATCH["kaggle_t4x2"]),
        Platform("kaggle_tpu", "Kaggle TPU v5e-8", "kaggle", "xla", "TPU v5e-8", 9.0, 2,
                 devices=8, batch_sizes=_BATCH["kaggle_tpu"]),
        # The other clouds (lib/clouds.py; facts and sources in its docstring). Studio Lab:
        # 4-hour GPU sessions (AWS docs, studio-lab-overview.md). SageMaker: billed, no limit
        # (an admin's idle shutdown only); ml.g4dn.xlarge (T4) is its default GPU type.
        # Paperspace: free machines shut down after 6 h (its docs; a 2026 price list says 12).
        Platform("studiolab_t4", "SageMaker Studio Lab", "studiolab", "cuda", "Tesla T4", 4.0,
                 2, batch_sizes=_BATCH["studiolab_t4"]),
        Platform("sagemaker_gpu", "SageMaker Studio / notebook instance", "sagemaker", "cuda",
                 "Tesla T4", None, 2, batch_sizes=_BATCH["sagemaker_gpu"]),
        Platform("paperspace_gpu", "Paperspace Notebooks", "paperspace", "cuda", "Quadro P4000",
                 6.0, 2, batch_sizes=_BATCH["paperspace_gpu"],
                 status="free GPUs of 8 GB vary"),
    ]
}


# The optimizer study compares optimizers whose learning rates are tuned for a global batch
# of 128 (the CIFAR ResNet recipe): every platform trains with 128 in all (split over its
# devices), so a result from a T4 and one from a TPU are the same experiment.
STUDY_GLOBAL_BATCH = 128
for _p in PLATFORMS.values():
    _p.batch_sizes["optimizer_study"] = STUDY_GLOBAL_BATCH // _p.devices


def get_platform(name: str) -> Platform:
    """The profile called `name`, or one clear error listing the valid names."""
    if name not in PLATFORMS:
        raise ConfigError(
            f"unknown PLATFORM {name!r}; expected one of {sorted(PLATFORMS)}. "
            "Use the notebook rendered for your platform under notebooks/<platform>/, "
            "or set PLATFORM to one of these names."
        )
    return PLATFORMS[name]


def detect_runtime(environ: dict | None = None, modules: dict | None = None) -> str:
    """Which hosted runtime this process is in: "colab", "kaggle", one of `lib.clouds`
    ("studiolab", "sagemaker", "paperspace") or "local"."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if "google.colab" in modules or "COLAB_RELEASE_TAG" in environ:
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in environ:
        return "kaggle"
    from lib import clouds  # Studio Lab, SageMaker, Paperspace

    return clouds.detect(environ) or "local"


def drive_root() -> Path:
    """Where Google Drive is (to be) mounted on Colab."""
    return Path(os.environ.get(DRIVE_MOUNT_ENV, "/content/drive"))


def default_dirs(workload: str, runtime: str) -> tuple[Path, Path]:
    """(data_dir, out_dir) for `workload` on `runtime` when the notebook leaves them None.

    Colab keeps both on Drive so a disconnect loses nothing; Kaggle reads attached datasets
    from /kaggle/input (read-only) but downloads into /kaggle/working; locally ./data, ./runs.
    """
    if runtime == "colab":
        base = drive_root() / "MyDrive" / "train-anywhere"
        return base / "data", base / "runs" / workload
    if runtime == "kaggle":
        return Path("/kaggle/working/data"), Path("/kaggle/working/runs") / workload
    from lib import clouds

    if runtime in clouds.RUNTIMES:  # all on the service's persistent storage
        roles = clouds.storage(runtime)
        return roles.scratch / "data", roles.durable / workload
    return Path("data"), Path("runs") / workload
