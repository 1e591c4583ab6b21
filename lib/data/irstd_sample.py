"""A small, learnable infrared small-target dataset written in the real IRSTD folder layouts.

Grey PNG images of a smooth textured background, clutter as bright as the targets (compact
blobs a little wider than any target, thin bright segments) and 1-3 small dim Gaussian targets
(sigma 1-2 px, at least 12 px apart), and PNG masks of the pixels where a target reaches half
its peak. A brightness threshold finds the clutter too; a network must learn the targets'
size and shape. Like some real IRSTD-1k masks, the masks are not strictly 0/255: the target
core is 255, its outer half-peak pixels 200 and a faint ring 60, so the loader's ``> 127``
binarisation is exercised on every sample. A sample without the current generator's marker
(`lib.data.samples`) is written again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from lib.data import samples

# layout name -> (image folder, mask folder, train split, test split), as published
LAYOUTS = {
    "official": ("images", "masks", "trainval.txt", "test.txt"),
    "irstd1k": ("IRSTD1k_Img", "IRSTD1k_Label", "trainval.txt", "test.txt"),
    "nudt": ("images", "masks", "50_50/train.txt", "50_50/test.txt"),
}


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Smooth texture (bicubic-upsampled coarse noise) plus sensor noise, grey levels ~40-110."""
    coarse = rng.normal(0.0, 1.0, (size // 16 + 2, size // 16 + 2)).astype(np.float32)
    smooth = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC))
    return 75 + 15 * smooth + rng.normal(0.0, 3.0, (size, size))


def _blob(size: int, cy: float, cx: float, sigma: float) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    return np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sigma**2))


def _ridge(rng: np.random.Generator, size: int) -> np.ndarray:
    """A thin bright segment at a random place and angle (an edge, a cable): as bright as a
    target across, but long."""
    cy, cx = rng.uniform(0, size, size=2)
    angle, length, width = rng.uniform(0, np.pi), rng.uniform(12, 40), rng.uniform(0.8, 1.4)
    yy, xx = np.mgrid[:size, :size]
    across = (yy - cy) * np.cos(angle) - (xx - cx) * np.sin(angle)
    along = (yy - cy) * np.sin(angle) + (xx - cx) * np.cos(angle)
    return np.exp(-(across**2) / (2 * width**2)) / (1 + np.exp(4 * (np.abs(along) - length / 2)))


def _centres(rng: np.random.Generator, size: int, n: int) -> list[tuple[float, float]]:
    """n target centres 8 px inside the border and at least 12 px apart."""
    centres: list[tuple[float, float]] = []
    while len(centres) < n:
        cy, cx = rng.integers(8, size - 8, size=2) + rng.uniform(-0.3, 0.3, size=2)
        if all((cy - y) ** 2 + (cx - x) ** 2 >= 144 for y, x in centres):
            centres.append((float(cy), float(cx)))
    return centres


def _clutter(rng: np.random.Generator, size: int) -> np.ndarray:
    """Bright things that are not targets, as bright as they are: compact blobs a little wider
    than any target, and thin segments. A threshold on brightness alone mistakes them."""
    clutter = np.zeros((size, size))
    for _ in range(rng.integers(2, 6)):
        cy, cx = rng.uniform(0, size, size=2)
        clutter += rng.uniform(20, 60) * _blob(size, cy, cx, rng.uniform(2.6, 5.0))
    for _ in range(rng.integers(1, 4)):
        clutter += rng.uniform(20, 55) * _ridge(rng, size)
    return clutter


def sample_pair(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One (image, mask) pair of uint8 (size, size) arrays; see the module docstring."""
    image = _background(rng, size) + _clutter(rng, size)
    peak = np.zeros((size, size))
    for cy, cx in _centres(rng, size, int(rng.integers(1, 4))):
        target = _blob(size, cy, cx, rng.uniform(1.0, 2.0))
        image += rng.uniform(60, 110) * target
        peak = np.maximum(peak, target)
    mask = np.select([peak > 0.7, peak > 0.5, peak > 0.3], [255, 200, 60], default=0)
    return np.clip(image, 0, 255).astype(np.uint8), mask.astype(np.uint8)


def write_irstd_sample(root: str | Path, n_train: int = 32, n_test: int = 16, size: int = 128,
                       layout: str = "official", seed: int = 0) -> Path:
    """Write (if absent) a sample dataset into ``root`` in ``layout`` (see LAYOUTS); return root."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; expected one of {sorted(LAYOUTS)}")
    root = Path(root)
    image_dir, mask_dir, train_split, test_split = LAYOUTS[layout]
    if samples.is_current(root, "irstd", (train_split, test_split)):  # else written again
        return root
    for folder in (image_dir, mask_dir, str(Path(train_split).parent)):
        (root / folder).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = [f"sample{i:04d}" for i in range(n_train + n_test)]
    for name in names:
        image, mask = sample_pair(rng, size)
        Image.fromarray(image).save(root / image_dir / f"{name}.png")
        Image.fromarray(mask).save(root / mask_dir / f"{name}.png")
    # split files and the marker last: together they mark a complete sample
    (root / train_split).write_text("\n".join(names[:n_train]) + "\n")
    (root / test_split).write_text("\n".join(names[n_train:]) + "\n")
    samples.mark(root, "irstd")
    return root
