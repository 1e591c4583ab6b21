"""Small, learnable event datasets written in the on-disk formats tonic's real classes read.

- N-MNIST: `NMNIST/{Train,Test}/<digit>/<n>.bin`, 5 bytes per event: x, y,
  p << 7 | t[22:16], t[15:8], t[7:0] (t in microseconds); 34x34 sensor.
- DVS Gesture: `DVSGesture/ibmGesture{Train,Test}/user<NN>_<lighting>/<class>.npy`, an (N, 4)
  array of x, y, p, t with t in milliseconds; 128x128 sensor.
- CIFAR10-DVS: `CIFAR10DVS/<class name>/<class name>_<n>.aedat4` (AEDAT 4, written with
  `dv-processing`, read by tonic through the `aedat` package); 128x128 sensor.

Each recording is mostly a dense blob of events near a class-specific place on a ring, drifting
a little, mixed with a blob of another class and a distractor (`blob_events`):
learnable, not trivial, and dense enough that tonic's Denoise(10 ms) keeps most of it. Writers
are deterministic, write a dataset again unless it carries the current generator's marker
(`lib.data.samples`), and return the `save_to` folder to hand to the tonic class.
"""

from __future__ import annotations

import functools
import io
import math
from pathlib import Path

import numpy as np

from lib.base import atomic
from lib.data import samples
from lib.data.classes import CIFAR10DVS_CLASSES, DVSGESTURE_LIGHTING


def _blob(rng: np.random.Generator, position: float, n_classes: int, size: int,
          duration_us: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(xy (n, 2) int, t (n,) us) of a blob at `position` (in class steps) round the ring,
    drifting along it; radius, size and place jittered per recording."""
    angle = 2 * math.pi * position / n_classes
    direction = np.array([math.cos(angle), math.sin(angle)])
    centre = size / 2 + 0.3 * size * rng.uniform(0.85, 1.1) * direction
    centre = centre + rng.uniform(-0.02, 0.02, 2) * size
    t = rng.integers(0, duration_us, n)
    drift = 0.05 * size * np.array([math.sin(angle), -math.cos(angle)])  # along the ring
    path = centre + np.outer(t / duration_us - 0.5, drift)
    sigma = max(1.5, 0.016 * size) * rng.uniform(0.8, 1.1)  # dense enough for Denoise(10 ms)
    xy = np.clip(np.rint(path + rng.normal(0.0, sigma, (n, 2))), 0, size - 1)
    return xy.astype(np.int64), t


def blob_events(rng: np.random.Generator, label: int, n_classes: int, size: int,
                duration_us: int, n_events: int) -> dict[str, np.ndarray]:
    """`n_events` events (x, y, t in us sorted, p in {0, 1}) of one class-`label` recording
    on a size^2 sensor.

    40-70% of the events form a blob near the class's place on a ring (up to 0.4 of a class
    step away), the rest a blob of another class (now and then the stronger one) and a
    distractor anywhere on the ring; the polarity share says nothing about the class.
    Learnable (mostly the strongest blob), not trivial (neighbouring classes overlap, and the
    mixtures mislead a template match).
    """
    own = rng.uniform(0.4, 0.7)
    other = rng.uniform(0.3, 0.9) * (1 - own)
    counts = rng.multinomial(n_events, [own, other, 1 - own - other])
    positions = (label + rng.uniform(-0.4, 0.4),
                 (label + rng.integers(1, n_classes)) % n_classes + rng.uniform(-0.4, 0.4),
                 rng.uniform(0, n_classes))
    parts = [_blob(rng, pos, n_classes, size, duration_us, int(n))
             for pos, n in zip(positions, counts, strict=True)]
    xy = np.concatenate([xy for xy, _ in parts])
    t = np.concatenate([t for _, t in parts])
    order = np.argsort(t, kind="stable")
    p = (rng.random(len(t)) < rng.uniform(0.3, 0.7)).astype(np.int64)
    return {"x": xy[order, 0], "y": xy[order, 1], "t": t[order].astype(np.int64), "p": p}


def nmnist_bytes(ev: dict[str, np.ndarray]) -> bytes:
    """The N-MNIST 40-bit event encoding (t < 2^23 us)."""
    t = ev["t"]
    if t.max(initial=0) >= 2**23:
        raise ValueError("N-MNIST timestamps must be below 2^23 us (8.4 s) in one record.")
    raw = np.stack([ev["x"], ev["y"], (ev["p"] << 7) | ((t >> 16) & 0x7F), (t >> 8) & 0xFF,
                    t & 0xFF], axis=1)
    return raw.astype(np.uint8).tobytes()


def _versioned(folder_name: str):
    """Decorator of a writer `write(root, ...)`: it runs unless root/folder_name holds a
    complete sample of the current generator (`lib.data.samples`), then marks the folder; the
    wrapped writer returns `root`. A sample from an older generator is written over."""
    def wrap(write):
        @functools.wraps(write)
        def writer(root: Path, *args, **kwargs) -> Path:
            root = Path(root)
            if not samples.is_current(root / folder_name, "events"):
                write(root, *args, **kwargs)
                samples.mark(root / folder_name, "events")
            return root
        return writer
    return wrap


@_versioned("NMNIST")
def write_nmnist_sample(root: Path, n_train: int = 4, n_test: int = 2, seed: int = 0,
                        n_events: int = 1500):
    """`n_train` / `n_test` recordings per digit, 300 ms and `n_events` each; returns root."""
    rng = np.random.default_rng(seed)
    for folder, n in (("Train", n_train), ("Test", n_test)):
        for digit in range(10):
            for i in range(n):
                ev = blob_events(rng, digit, 10, 34, 300_000, n_events)
                _write_bytes(root / "NMNIST" / folder / str(digit) / f"{i:05d}.bin",
                             nmnist_bytes(ev))


@_versioned("DVSGesture")
def write_dvsgesture_sample(root: Path, n_train_users: int = 3, n_test_users: int = 1,
                            seed: int = 0):
    """One 1.5 s recording of each of the 11 gestures per user folder; returns root."""
    rng = np.random.default_rng(seed)
    users = {"ibmGestureTrain": range(1, n_train_users + 1),
             "ibmGestureTest": range(24, 24 + n_test_users)}  # the real test users are 24-29
    for split, user_ids in users.items():
        for user in user_ids:
            folder = root / "DVSGesture" / split / f"user{user:02d}_" \
                f"{DVSGESTURE_LIGHTING[user % len(DVSGESTURE_LIGHTING)]}"
            for gesture in range(11):
                ev = blob_events(rng, gesture, 11, 128, 1_500_000, 5000)
                # columns x, y, p, t with t in ms, as in tonic's preprocessed release
                buf = io.BytesIO()
                np.save(buf, np.stack([ev["x"], ev["y"], ev["p"], ev["t"] // 1000], 1))
                _write_bytes(folder / f"{gesture}.npy", buf.getvalue())


@_versioned("CIFAR10DVS")
def write_cifar10dvs_sample(root: Path, n_per_class: int = 6, seed: int = 0):
    """`n_per_class` 1 s recordings per class as AEDAT 4 files; returns root.

    Needs `dv-processing` (a test/dev dependency: `pip install dv-processing`).
    """
    try:
        import dv_processing as dv
    except ImportError as exc:
        raise ModuleNotFoundError(
            "writing the CIFAR10-DVS sample (.aedat4) needs dv-processing; run "
            "`pip install dv-processing`, or use DATASET='nmnist' / 'dvsgesture'."
        ) from exc
    rng = np.random.default_rng(seed)
    for label, name in enumerate(CIFAR10DVS_CLASSES):
        for i in range(n_per_class):
            ev = blob_events(rng, label, 10, 128, 1_000_000, 5000)
            path = root / "CIFAR10DVS" / name / f"{name}_{i}.aedat4"
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_aedat4(dv, path, ev)


def _write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary name, so a killed run never leaves a truncated sample behind."""
    atomic.write_bytes(path, data)


def _write_aedat4(dv, path: Path, ev: dict[str, np.ndarray]) -> None:
    store = dv.EventStore()
    for t, x, y, p in zip(ev["t"], ev["x"], ev["y"], ev["p"], strict=True):
        store.push_back(int(t), int(x), int(y), bool(p))
    # dv-processing aborts the process unless the name ends in .aedat4, and tonic would read
    # any .aedat4 under CIFAR10DVS/, so the temporary file lives beside that folder.
    tmp = path.parents[2] / ".cifar10dvs_partial" / path.name
    tmp.parent.mkdir(exist_ok=True)
    config = dv.io.MonoCameraWriter.EventOnlyConfig("DVS128_sample", (128, 128))
    writer = dv.io.MonoCameraWriter(str(tmp), config)
    writer.writeEvents(store)
    del writer  # closes the file
    tmp.replace(path)
