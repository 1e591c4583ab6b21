"""A small, learnable CIFAR-10/100 written in the original pickle layout.

Layouts (what torchvision reads): `cifar-10-batches-py/{data_batch_1..5, test_batch,
batches.meta}`, each batch a pickle of {data: (n, 3072) uint8 in CHW order, labels,
filenames, batch_label}; `cifar-100-python/{train, test, meta}` with fine_labels and
coarse_labels. Each class is a smooth, left-right symmetric colour pattern (the standard
crop-and-flip augmentation keeps it recognisable); each image mixes it with another class's,
shifts it and varies its contrast and colour, plus pixel noise (`_images`).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lib.base import atomic
from lib.data import samples
from lib.data.classes import (
    CIFAR10_CLASSES,
    CIFAR100_CLASSES,
    CIFAR100_COARSE,
    CIFAR100_SUPERCLASSES,
)


def _prototypes(num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """(K, 3, 32, 32) patterns in [-1, 1]: a 4x4 colour grid, mirrored, upsampled smoothly."""
    grid = rng.uniform(-1, 1, size=(num_classes, 3, 4, 4)).astype(np.float32)
    grid[..., 2:] = grid[..., 1::-1]  # left-right symmetric: a flip keeps the class pattern
    up = F.interpolate(torch.from_numpy(grid), size=(32, 32), mode="bilinear",
                       align_corners=True)
    return up.numpy()


def _images(labels: np.ndarray, protos: np.ndarray, rng: np.random.Generator,
            noise: float) -> np.ndarray:
    """(n, 3072) uint8 CHW rows. Each: its class's pattern mixed with another class's (up to
    45%), shifted up to 6 px, with a random contrast and colour cast, plus Gaussian pixel
    noise (std `noise`). Learnable (the patterns differ), not trivial (mixtures, shifts):
    accuracy rises over epochs and stays below 1."""
    n = len(labels)
    other = (labels + rng.integers(1, len(protos), size=n)) % len(protos)
    mix = rng.uniform(0.0, 0.45, size=(n, 1, 1, 1))
    patterns = (1 - mix) * protos[labels] + mix * protos[other]
    for i in range(n):
        patterns[i] = np.roll(patterns[i], tuple(rng.integers(-6, 7, size=2)), axis=(1, 2))
    contrast = rng.uniform(40, 100, size=(n, 1, 1, 1))
    cast = rng.normal(0, 20, size=(n, 3, 1, 1))
    pixels = 128 + cast + contrast * patterns + rng.normal(0, noise, size=patterns.shape)
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8).reshape(n, 3072)


def _dump(path: Path, obj: dict) -> None:
    """Pickle atomically: parallel papermill runs may write the same sample at once."""
    atomic.write_bytes(path, pickle.dumps(obj, protocol=2))  # the originals are Python 2 pickles


def _balanced_labels(num_classes: int, per_class: int, rng: np.random.Generator) -> np.ndarray:
    labels = np.repeat(np.arange(num_classes), per_class)
    rng.shuffle(labels)
    return labels


def _split(labels, protos, rng, noise, prefix: str) -> dict:
    return {"data": _images(labels, protos, rng, noise), "labels": labels.tolist(),
            "filenames": [f"{prefix}_{i:05d}.png" for i in range(len(labels))]}


def _write_cifar10(folder: Path, train_per_class: int, test_per_class: int,
                   rng: np.random.Generator, noise: float) -> None:
    protos = _prototypes(10, rng)
    train = _split(_balanced_labels(10, train_per_class, rng), protos, rng, noise, "train")
    for b, rows in enumerate(np.array_split(np.arange(len(train["labels"])), 5), start=1):
        part = {k: [v[i] for i in rows] if isinstance(v, list) else v[rows]
                for k, v in train.items()}
        _dump(folder / f"data_batch_{b}", {**part, "batch_label": f"training batch {b} of 5"})
    test = _split(_balanced_labels(10, test_per_class, rng), protos, rng, noise, "test")
    _dump(folder / "test_batch", {**test, "batch_label": "testing batch 1 of 1"})
    _dump(folder / "batches.meta", {"label_names": list(CIFAR10_CLASSES),
                                    "num_cases_per_batch": len(train["labels"]) // 5,
                                    "num_vis": 3072})


def _write_cifar100(folder: Path, train_per_class: int, test_per_class: int,
                    rng: np.random.Generator, noise: float) -> None:
    protos = _prototypes(100, rng)
    coarse_of = {c: CIFAR100_COARSE.index(g) for g, cs in CIFAR100_SUPERCLASSES.items()
                 for c in cs}
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        d = _split(_balanced_labels(100, per_class, rng), protos, rng, noise, split)
        labels = d.pop("labels")
        coarse = [coarse_of[CIFAR100_CLASSES[y]] for y in labels]
        _dump(folder / split, {**d, "fine_labels": labels, "coarse_labels": coarse,
                               "batch_label": f"{split}ing batch 1 of 1"})
    _dump(folder / "meta", {"fine_label_names": list(CIFAR100_CLASSES),
                            "coarse_label_names": list(CIFAR100_COARSE)})


_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", ("data_batch_1", "data_batch_2", "data_batch_3",
                                        "data_batch_4", "data_batch_5", "test_batch",
                                        "batches.meta")),
    "cifar100": ("cifar-100-python", ("train", "test", "meta")),
}


def write_cifar_sample(root: Path, name: str = "cifar10", train_per_class: int | None = None,
                       test_per_class: int | None = None, seed: int = 0,
                       noise: float = 40.0) -> Path:
    """Write (if absent) a small `name` dataset in the real layout under `root`; return root.

    Defaults: CIFAR-10 100 train / 20 test images per class (1000 / 200), CIFAR-100
    10 / 2 per class (1000 / 200). Deterministic in `seed`.
    """
    if name not in _LAYOUT:
        raise ValueError(f"sample dataset {name!r} is not one of {list(_LAYOUT)}.")
    folder_name, files = _LAYOUT[name]
    folder = Path(root) / folder_name
    if samples.is_current(folder, "cifar", files):  # a sample of an older generator is rewritten
        return Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 10 if name == "cifar10" else 100])
    write = _write_cifar10 if name == "cifar10" else _write_cifar100
    default_train, default_test = (100, 20) if name == "cifar10" else (10, 2)
    write(folder, train_per_class or default_train, test_per_class or default_test, rng, noise)
    samples.mark(folder, "cifar")
    return Path(root)
