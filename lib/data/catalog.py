"""The datasets' names and the published facts a run's config checks, without their readers.

The readers (`lib.data.cifar`, `lib.data.events`, `lib.data.irstd`, `lib.data.label_noise`)
import torch, torchvision, tonic or numpy; a workload's config validates its parameters in
processes that load none of them (the command line, the notebook builder: the workload
contract, lib/workloads/__init__.py). So what a config checks lives here, and each reader
imports its own part.
"""

from __future__ import annotations

from lib.base.errors import DataError

CIFAR_NAMES = ("cifar10", "cifar100")
EVENT_NAMES = ("nmnist", "dvsgesture", "cifar10dvs")
# The official code's framing: window / 1 ms for N-MNIST (300) and DVS Gesture (500),
# 1 s / 10 ms for CIFAR10-DVS (100).
OFFICIAL_TIME_BINS = {"nmnist": 300, "dvsgesture": 500, "cifar10dvs": 100}
# MSHNet paper, Table 1 (mIoU and Pd in percent, Fa in units of 1e-6).
IRSTD_PAPER_RESULTS = {
    "IRSTD-1k": {"mIoU": 67.16, "Pd": 93.88, "Fa": 15.03},
    "NUDT-SIRST": {"mIoU": 80.55, "Pd": 97.99, "Fa": 11.77},
}
NOISE_MODES = ("symmetric", "asymmetric")  # training-label noise (lib.data.label_noise)


def check_cifar_name(name: str) -> str:
    key = str(name).lower().replace("-", "")
    if key not in CIFAR_NAMES:
        raise DataError(f"DATASET={name!r} is not one of {list(CIFAR_NAMES)}; set DATASET to "
                         "'cifar10' or 'cifar100'.")
    return key
