"""Training-label noise that depends on (labels, rate, seed) alone.

Both modes draw one uniform number per sample from a numpy Generator seeded by the run's
seed, and flip sample i when u_i < rate. So the noisy labels are the same for every
optimizer at a given seed, independent of torch's RNG, and the samples flipped at rate 0.2
are a subset of those flipped at rate 0.4 (same seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lib.base.errors import DataError
from lib.data.catalog import NOISE_MODES

_STREAM = 0x4C4E  # keeps the noise stream apart from any other use of the same seed


def _check(rate: float, seed: int) -> None:
    if not 0.0 <= rate <= 1.0:
        raise DataError(f"LABEL_NOISE={rate!r} is outside [0, 1]; set it to a fraction such "
                         "as 0.2 (20% of training labels corrupted) or 0.0 for clean labels.")
    if seed < 0:
        raise DataError(f"seed {seed} is negative; label noise needs a seed >= 0.")


def _draws(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample uniform u in [0, 1) and an offset in [0, 2^31) for picking a new class."""
    rng = np.random.default_rng([_STREAM, seed])
    return rng.random(n), rng.integers(0, 2**31, size=n)


def symmetric_noise(labels: Sequence[int], rate: float, num_classes: int,
                    seed: int) -> np.ndarray:
    """Each label, with probability `rate`, becomes a uniformly drawn *different* class.

    The expected flip rate is exactly `rate` (a flip never lands on the true class).
    """
    _check(rate, seed)
    y = np.asarray(labels, dtype=np.int64)
    u, offset = _draws(len(y), seed)
    shift = 1 + offset % (num_classes - 1)  # 1..K-1: never back to the true class
    return np.where(u < rate, (y + shift) % num_classes, y)


def pair_noise(labels: Sequence[int], rate: float, pairs: Mapping[int, int],
               seed: int) -> np.ndarray:
    """Asymmetric noise: a label c in `pairs`, with probability `rate`, becomes pairs[c].

    Classes absent from `pairs` are never changed, so the overall flip rate is `rate` times
    the fraction of samples whose class is a source of a pair.
    """
    _check(rate, seed)
    y = np.asarray(labels, dtype=np.int64)
    u, _ = _draws(len(y), seed)
    target = y.copy()
    for src, dst in pairs.items():
        target[y == src] = dst
    return np.where(u < rate, target, y)


def add_label_noise(labels: Sequence[int], rate: float, mode: str, num_classes: int,
                    pairs: Mapping[int, int] | None, seed: int) -> tuple[np.ndarray, float]:
    """(noisy labels, realised flip rate) for `mode` in NOISE_MODES."""
    if mode not in NOISE_MODES:
        raise DataError(f"NOISE_MODE={mode!r} is not one of {list(NOISE_MODES)}; set it to "
                         "'symmetric' (uniform flips) or 'asymmetric' (class pairs).")
    if mode == "symmetric":
        noisy = symmetric_noise(labels, rate, num_classes, seed)
    else:
        noisy = pair_noise(labels, rate, pairs or {}, seed)
    return noisy, realised_rate(labels, noisy)


def realised_rate(clean: Sequence[int], noisy: Sequence[int]) -> float:
    """Fraction of labels that differ between `clean` and `noisy`."""
    clean, noisy = np.asarray(clean), np.asarray(noisy)
    return float((clean != noisy).mean()) if len(clean) else 0.0
