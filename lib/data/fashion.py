"""Fashion-MNIST through torchvision, and a small learnable sample in the real IDX layout.

torchvision's `FashionMNIST(root)` reads `root/FashionMNIST/raw/{train,t10k}-{images-idx3,
labels-idx1}-ubyte` and only checks that they exist, so the sample written here is read by
the very same class as the real dataset.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch
from torchvision import datasets, transforms

from lib import atomic
from lib.errors import DataError, DataNotFound

CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics
_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
          "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX: big-endian magic (0, 0, 0x08 = uint8, ndim), ndim uint32 dims, raw bytes."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    # whole or not at all: the sample counts as written once all four files exist
    atomic.write_bytes(path, header + struct.pack(f">{array.ndim}I", *array.shape)
                       + array.tobytes())


def _sample_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """28x28 noise with a class-specific bright block: easy to learn, not trivial."""
    images = rng.integers(0, 90, size=(len(labels), 28, 28)).astype(np.uint8)
    for i, label in enumerate(labels):
        r, c = divmod(int(label), 5)  # 2 x 5 grid of block positions
        dy, dx = rng.integers(-1, 2, size=2)
        y, x = 3 + 12 * r + dy, 1 + 5 * c + dx
        images[i, y : y + 9, x : x + 5] = rng.integers(170, 256, size=(9, 5))
    return images


def write_sample(root: Path, n_train: int = 640, n_test: int = 320, seed: int = 0) -> Path:
    """Write (if absent) a small Fashion-MNIST in the real layout under `root`; return root."""
    raw = Path(root) / "FashionMNIST" / "raw"
    if all((raw / name).exists() for name in _FILES):
        return Path(root)
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        write_idx(raw / f"{split}-images-idx3-ubyte", _sample_images(labels, rng))
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    return Path(root)


def _missing_message(root: Path, error: Exception) -> str:
    reason = (str(error).strip().splitlines() or [""])[0].rstrip(":")
    return (
        f"Fashion-MNIST is not in DATA_DIR {str(root)!r} (expected "
        f"{root / 'FashionMNIST' / 'raw'}/train-images-idx3-ubyte and its three siblings) and "
        f"downloading it failed ({type(error).__name__}: {reason[:120]}). Fix: enable "
        "internet access on this runtime, copy the four files there, point DATA_DIR at the "
        "folder that holds FashionMNIST/, or set SAMPLE_DATA = True for the offline sample."
    )


def load(root: Path, train: bool, download: bool = True):
    """The torchvision dataset (normalised tensors, integer labels)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise DataError(f"DATA_DIR {str(root)!r} is a file; set DATA_DIR to a folder.")
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))])
    try:
        return datasets.FashionMNIST(str(root), train=train, download=download, transform=tf)
    except (RuntimeError, OSError) as exc:  # not found, or the download failed
        raise DataNotFound(_missing_message(root, exc)) from None


def build_datasets(data_dir: Path, sample: bool):
    """(train, test, info); with `sample`, the sample is written to DATA_DIR/sample first."""
    root = write_sample(Path(data_dir) / "sample") if sample else Path(data_dir)
    train, test = load(root, True), load(root, False)
    return train, test, {"root": str(root), "classes": CLASSES, "num_classes": 10,
                         "train_size": len(train), "test_size": len(test)}


def example_grid(dataset, n: int = 16) -> tuple[torch.Tensor, list[str]]:
    """The first `n` images (denormalised, (n, 1, 28, 28)) and their class names."""
    xs, ys = zip(*(dataset[i] for i in range(min(n, len(dataset)))), strict=True)
    return torch.stack(xs) * STD + MEAN, [CLASSES[y] for y in ys]
