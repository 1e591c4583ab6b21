"""Small, learnable event datasets written in the on-disk formats tonic's real classes read.

- N-MNIST: `NMNIST/{Train,Test}/<digit>/<n>.bin`, 5 bytes per event: x, y,
  p << 7 | t[22:16], t[15:8], t[7:0] (t in microseconds); 34x34 sensor.
- DVS Gesture: `DVSGesture/ibmGesture{Train,Test}/user<NN>_<lighting>/<class>.npy`, an (N, 4)
  array of x, y, p, t with t in milliseconds; 128x128 sensor.
- CIFAR10-DVS: `CIFAR10DVS/<class name>/<class name>_<n>.aedat4` (AEDAT 4, written with
  `dv-processing`, read by tonic through the `aedat` package); 128x128 sensor.

Each recording is a dense blob of events at a class-specific place on a ring, drifting a little
and jittered per sample: learnable from position alone, and dense enough that tonic's
Denoise(10 ms) keeps most of it. Writers are deterministic, write only what is missing, and
return the `save_to` folder to hand to the tonic class.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from lib import atomic
from lib.data.events import CIFAR10DVS_CLASSES, DVSGESTURE_LIGHTING


def blob_events(rng: np.random.Generator, label: int, n_classes: int, size: int,
                duration_us: int, n_events: int) -> dict[str, np.ndarray]:
    """Events (x, y, t in us sorted, p in {0, 1}) of one class-`label` blob on a size^2 sensor."""
    angle = 2 * math.pi * label / n_classes
    centre = size / 2 + 0.3 * size * np.array([math.cos(angle), math.sin(angle)])
    centre = centre + rng.uniform(-0.03, 0.03, 2) * size  # per-sample jitter
    t = np.sort(rng.integers(0, duration_us, n_events))
    drift = 0.05 * size * np.array([math.sin(angle), -math.cos(angle)])  # along the ring
    path = centre + np.outer(t / duration_us - 0.5, drift)
    sigma = max(1.5, 0.02 * size)  # tight enough for Denoise's 1-pixel, 10 ms neighbourhood
    xy = np.rint(path + rng.normal(0.0, sigma, (n_events, 2)))
    xy = np.clip(xy, 0, size - 1).astype(np.int64)
    p = (rng.random(n_events) < 0.3 + 0.4 * (label % 2)).astype(np.int64)  # class-dependent
    return {"x": xy[:, 0], "y": xy[:, 1], "t": t.astype(np.int64), "p": p}


def nmnist_bytes(ev: dict[str, np.ndarray]) -> bytes:
    """The N-MNIST 40-bit event encoding (t < 2^23 us)."""
    t = ev["t"]
    if t.max(initial=0) >= 2**23:
        raise ValueError("N-MNIST timestamps must be below 2^23 us (8.4 s) in one record.")
    raw = np.stack([ev["x"], ev["y"], (ev["p"] << 7) | ((t >> 16) & 0x7F), (t >> 8) & 0xFF,
                    t & 0xFF], axis=1)
    return raw.astype(np.uint8).tobytes()


def write_nmnist_sample(root: Path, n_train: int = 4, n_test: int = 2, seed: int = 0,
                        n_events: int = 1500) -> Path:
    """`n_train` / `n_test` recordings per digit, 300 ms and `n_events` each; returns `root`."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    for folder, n in (("Train", n_train), ("Test", n_test)):
        for digit in range(10):
            for i in range(n):
                path = root / "NMNIST" / folder / str(digit) / f"{i:05d}.bin"
                ev = blob_events(rng, digit, 10, 34, 300_000, n_events)
                if not path.exists():
                    _write_bytes(path, nmnist_bytes(ev))
    return root


def write_dvsgesture_sample(root: Path, n_train_users: int = 3, n_test_users: int = 1,
                            seed: int = 0) -> Path:
    """One 1.5 s recording of each of the 11 gestures per user folder; returns `root`."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    users = {"ibmGestureTrain": range(1, n_train_users + 1),
             "ibmGestureTest": range(24, 24 + n_test_users)}  # the real test users are 24-29
    for split, user_ids in users.items():
        for user in user_ids:
            folder = root / "DVSGesture" / split / f"user{user:02d}_" \
                f"{DVSGESTURE_LIGHTING[user % len(DVSGESTURE_LIGHTING)]}"
            for gesture in range(11):
                ev = blob_events(rng, gesture, 11, 128, 1_500_000, 5000)
                path = folder / f"{gesture}.npy"
                if not path.exists():
                    # columns x, y, p, t with t in ms, as in tonic's preprocessed release
                    buf = io.BytesIO()
                    np.save(buf, np.stack([ev["x"], ev["y"], ev["p"], ev["t"] // 1000], 1))
                    _write_bytes(path, buf.getvalue())
    return root


def write_cifar10dvs_sample(root: Path, n_per_class: int = 6, seed: int = 0) -> Path:
    """`n_per_class` 1 s recordings per class as AEDAT 4 files; returns `root`.

    Needs `dv-processing` (a test/dev dependency: `pip install dv-processing`).
    """
    try:
        import dv_processing as dv
    except ImportError as exc:
        raise ModuleNotFoundError(
            "writing the CIFAR10-DVS sample (.aedat4) needs dv-processing; run "
            "`pip install dv-processing`, or use DATASET='nmnist' / 'dvsgesture'."
        ) from exc
    root = Path(root)
    rng = np.random.default_rng(seed)
    for label, name in enumerate(CIFAR10DVS_CLASSES):
        for i in range(n_per_class):
            ev = blob_events(rng, label, 10, 128, 1_000_000, 5000)
            path = root / "CIFAR10DVS" / name / f"{name}_{i}.aedat4"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_aedat4(dv, path, ev)
    return root


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
