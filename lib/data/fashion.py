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

from lib.base import atomic
from lib.base.errors import DataError, DataNotFound
from lib.data import samples

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


def _silhouettes() -> np.ndarray:
    """(10, 28, 28) float masks, one crude garment shape per class. Like the real data, some
    classes share most of their shape (T-shirt / pullover / coat / shirt; sandal / sneaker /
    ankle boot), so a model must learn details to tell them apart."""
    m = np.zeros((10, 28, 28), dtype=np.float32)
    for k in (0, 2, 4, 6):  # tops: a torso
        m[k, 6:24, 9:19] = 1
    m[0, 6:11, 4:24] = 1  # T-shirt: short sleeves
    for k in (2, 4, 6):  # long sleeves
        m[k, 6:22, 5:9] = m[k, 6:22, 19:23] = 1
    m[4, 6:26, 13:15] = 0.35  # coat: longer, an opening down the middle
    m[4, 24:26, 9:19] = 1
    m[6, 4:7, 11:17] = 1  # shirt: a collar
    m[1, 3:25, 8:13] = m[1, 3:25, 15:20] = m[1, 3:7, 8:20] = 1  # trousers: two legs
    for y in range(4, 25):  # dress: widening downwards
        half = 3 + (y - 4) // 3
        m[3, y, 14 - half : 14 + half] = 1
    m[5, 15:20, 3:25] = 1  # sandal: a low shape with straps cut out
    m[5, 16:19, 6:22:3] = 0.2
    m[7, 13:20, 3:25] = 1  # sneaker: low and solid
    m[7, 11:13, 14:25] = 1
    m[8, 10:25, 5:23] = 1  # bag: a box with a handle
    m[8, 5:10, 10:12] = m[8, 5:10, 16:18] = m[8, 5:7, 10:18] = 1
    m[9, 6:21, 15:23] = m[9, 15:21, 4:23] = 1  # ankle boot: an L
    return m


def _sample_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each image: its class's silhouette, shifted up to 3 px, with a random brightness and
    texture, mixed with another class's silhouette (up to 45%), plus pixel noise. Learnable
    (shapes differ), not trivial (shared shapes, mixtures, noise): accuracy rises over
    epochs and stays below 1."""
    shapes = _silhouettes()
    n = len(labels)
    other = (labels + rng.integers(1, 10, size=n)) % 10
    mix = rng.uniform(0.0, 0.45, size=(n, 1, 1))
    images = (1 - mix) * shapes[labels] + mix * shapes[other]
    for i in range(n):
        dy, dx = rng.integers(-3, 4, size=2)
        images[i] = np.roll(images[i], (dy, dx), axis=(0, 1))
    bright = rng.uniform(110, 230, size=(n, 1, 1))
    texture = rng.uniform(0.7, 1.0, size=images.shape)
    noise = rng.normal(0, 45, size=images.shape)
    return np.clip(images * texture * bright + noise + 20, 0, 255).astype(np.uint8)


def write_sample(root: Path, n_train: int = 640, n_test: int = 320, seed: int = 0) -> Path:
    """Write (if absent) a small Fashion-MNIST in the real layout under `root`; return root."""
    raw = Path(root) / "FashionMNIST" / "raw"
    # The marker names the generator's version: a sample from an older one is rewritten.
    if samples.is_current(raw, "fashion", _FILES):
        return Path(root)
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        write_idx(raw / f"{split}-images-idx3-ubyte", _sample_images(labels, rng))
        write_idx(raw / f"{split}-labels-idx1-ubyte", labels)
    samples.mark(raw, "fashion")
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
