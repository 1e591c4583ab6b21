"""CIFAR-10/100 through torchvision, with seeded training-label noise.

torchvision's `CIFAR10`/`CIFAR100` are the only loaders. They check an md5 per pickle, so
the offline sample (`lib.data.cifar_sample`, same pickle layout) is read through subclasses
whose checksums are None, exactly what torchvision's own tests do; that bypass is chosen
only when `sample=True`, and real data always goes through the checked classes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torchvision import datasets
from torchvision.transforms import v2

from lib.base.errors import DataError, DataNotFound
from lib.data.catalog import check_cifar_name as check_name
from lib.data.cifar_sample import write_cifar_sample
from lib.data.classes import (  # noqa: F401  (re-exported: the readers' names)
    CIFAR10_CLASSES,
    CIFAR100_CLASSES,
    CIFAR100_COARSE,
    CIFAR100_SUPERCLASSES,
)
from lib.data.label_noise import add_label_noise

# Per-channel mean and std of the training pixels (std over all pixels, not of image means).
STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
# CIFAR-10 class-pair noise of Patrini et al. (CVPR 2017): visually similar classes.
CIFAR10_PAIRS = {"truck": "automobile", "bird": "airplane", "deer": "horse", "cat": "dog",
                 "dog": "cat"}


class _SampleCIFAR10(datasets.CIFAR10):
    """CIFAR10 without md5 checks: for the sample files written by `write_cifar_sample`."""

    train_list = [[name, None] for name, _ in datasets.CIFAR10.train_list]
    test_list = [[name, None] for name, _ in datasets.CIFAR10.test_list]
    meta = {**datasets.CIFAR10.meta, "md5": None}


class _SampleCIFAR100(datasets.CIFAR100):
    train_list = [[name, None] for name, _ in datasets.CIFAR100.train_list]
    test_list = [[name, None] for name, _ in datasets.CIFAR100.test_list]
    meta = {**datasets.CIFAR100.meta, "md5": None}


def cifar_transforms(name: str, train: bool) -> v2.Compose:
    """PIL image -> normalised (3, 32, 32) float tensor; train adds crop (pad 4) and flip.

    The random ops draw from torch's global RNG, which the loader seeds per sample.
    """
    mean, std = STATS[check_name(name)]
    augment = [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()] if train else []
    return v2.Compose([v2.ToImage(), *augment, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(mean, std)])


def _missing_message(name: str, root: Path, error: Exception) -> str:
    folder = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}[name]
    return (
        f"{name} is not in DATA_DIR {str(root)!r} (expected {root / folder}/ with the "
        f"original pickles, checksums verified) and downloading it failed "
        f"({type(error).__name__}: {str(error)[:120]}). Fix: enable internet access on this "
        f"runtime, extract the official {folder} archive there, point DATA_DIR at the folder "
        "that holds it, or set SAMPLE_DATA = True for the offline sample."
    )


def load_cifar(name: str, root: Path, train: bool, *, sample: bool = False,
               download: bool = True):
    """The torchvision dataset at `root` (checksummed unless `sample`), with transforms."""
    name, root = check_name(name), Path(root)
    if root.exists() and not root.is_dir():
        raise DataError(f"DATA_DIR {str(root)!r} is a file; set DATA_DIR to a folder.")
    tf = cifar_transforms(name, train)
    if sample:  # the checksum bypass: only ever for files written by write_cifar_sample
        cls = _SampleCIFAR10 if name == "cifar10" else _SampleCIFAR100
        return cls(str(root), train=train, transform=tf)
    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    try:
        return cls(str(root), train=train, download=download, transform=tf)
    except (RuntimeError, OSError) as exc:  # missing/corrupted files, or the download failed
        raise DataNotFound(_missing_message(name, root, exc)) from None


def noise_pairs(name: str, classes) -> dict[int, int]:
    """Class-index pairs for asymmetric noise, looked up by class name.

    CIFAR-10: truck->automobile, bird->airplane, deer->horse, cat<->dog. CIFAR-100: each
    class -> the next class of its superclass (circular), the usual CIFAR-100 pair noise
    but over the real superclasses rather than blocks of five consecutive indices.
    """
    index = {c: i for i, c in enumerate(classes)}
    if check_name(name) == "cifar10":
        named = CIFAR10_PAIRS
    else:
        named = {}
        for group in CIFAR100_SUPERCLASSES.values():
            members = sorted(group, key=lambda c: index.get(c, -1))
            named.update(zip(members, members[1:] + members[:1], strict=True))
    missing = sorted(set(named) - set(index))
    if missing:
        raise DataError(f"the {name} class names {list(classes)[:5]}... lack {missing}; "
                         "asymmetric noise needs the official class names (meta file).")
    return {index[a]: index[b] for a, b in named.items()}


def apply_label_noise(dataset, name: str, rate: float, mode: str, seed: int) -> float:
    """Replace `dataset.targets` by noisy labels in place; keep `clean_targets`; return rate."""
    clean = list(getattr(dataset, "clean_targets", dataset.targets))
    pairs = noise_pairs(name, dataset.classes) if mode == "asymmetric" else None
    noisy, realised = add_label_noise(clean, rate, mode, len(dataset.classes), pairs, seed)
    dataset.clean_targets = clean
    dataset.targets = [int(v) for v in noisy]
    return realised


def build_datasets(name: str, data_dir: Path, sample: bool, label_noise: float = 0.0,
                         noise_mode: str = "symmetric", seed: int = 0, download: bool = True):
    """(train, test, info): noisy training labels, clean test labels.

    With `sample`, a small learnable CIFAR in the real layout is written (if absent) to
    DATA_DIR/sample first. The noise depends on (seed, label_noise, noise_mode) only, so
    every optimizer of one seed sees the same labels. `info` holds root, classes,
    num_classes, train_size, test_size, label_noise, noise_mode and realised_noise.
    """
    name = check_name(name)
    root = _write_sample(Path(data_dir) / "sample", name) if sample else Path(data_dir)
    train = load_cifar(name, root, True, sample=sample, download=download)
    test = load_cifar(name, root, False, sample=sample, download=download)
    realised = apply_label_noise(train, name, label_noise, noise_mode, seed)
    info = {"name": name, "root": str(root), "classes": tuple(train.classes),
            "num_classes": len(train.classes), "train_size": len(train),
            "test_size": len(test), "label_noise": float(label_noise),
            "noise_mode": noise_mode, "realised_noise": realised}
    return train, test, info


def example_grid(dataset, name: str, n: int = 16) -> tuple[torch.Tensor, list[str]]:
    """The first `n` images, denormalised to [0, 1] (n, 3, 32, 32), and their label names."""
    mean, std = (torch.tensor(s).view(3, 1, 1) for s in STATS[check_name(name)])
    xs, ys = zip(*(dataset[i] for i in range(min(n, len(dataset)))), strict=True)
    images = (torch.stack(xs) * std + mean).clamp(0, 1)
    return images, [dataset.classes[int(y)] for y in ys]



def _write_sample(folder, name):
    return write_cifar_sample(folder, name)
