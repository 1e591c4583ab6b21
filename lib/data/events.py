"""Event-camera datasets (N-MNIST, DVS Gesture, CIFAR10-DVS) through tonic, framed and cached.

tonic's `NMNIST`, `DVSGesture` and `CIFAR10DVS` are the only loaders; they download on a real
platform. Each recording goes Denoise(10 ms) -> optional spatial Downsample -> ToFrame, either
`n_time_bins` frames spread over the recording (the official code's framing) or true
`dt_us`-wide bins (variable T; `fixed_T` pads/crops to a static length, which XLA needs).
Frames are framed once by `warm_cache` and kept packed in a few large files (`lib.data.packed`:
shards of ~128 MB read through a memory map), not one file per recording: on a FUSE mount
such as Colab's Drive every open is a round trip. They are stored sparse (the non-zero counts
and where they are, packed in one array: N-MNIST frames are ~0.2% non-zero).

Frames leave the dataset as uint8 counts per pixel per bin and become float on the device (the
model casts them): a quarter of float32's bytes to fill, batch and copy to the accelerator.

Offline, `sample=True` writes a small learnable sample in the real formats
(`lib.data.events_sample`) to DATA_DIR/sample, and the real classes read it with their
download check bypassed the way tonic's own tests do; real data never takes that bypass.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import tonic
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset, random_split

from lib.base.errors import DataError, DataNotFound
from lib.data import events_sample, packed, samples, space
from lib.data.catalog import EVENT_NAMES as NAMES
from lib.data.catalog import OFFICIAL_TIME_BINS
from lib.data.classes import CIFAR10DVS_CLASSES, DVSGESTURE_LIGHTING  # noqa: F401
from lib.data.event_cache import (
    FromPack,
    cache_bytes_estimate,  # noqa: F401 (re-exported from its old home)
    prepared,
    warm_cache,  # noqa: F401
)

TONIC_CLASSES = {"nmnist": tonic.datasets.NMNIST, "dvsgesture": tonic.datasets.DVSGesture,
                 "cifar10dvs": tonic.datasets.CIFAR10DVS}


# tonic's own "extracted" threshold per dataset (its `_check_exists`: nmnist.py, dvsgesture.py,
# cifar10dvs.py), which also demands the downloaded archive beside the folder; attached
# datasets (Kaggle) come extracted, without it.
EXTRACTED = {"nmnist": (10000, ".bin"), "dvsgesture": (100, ".npy"),
             "cifar10dvs": (1000, ".aedat4")}


def _checked(name: str, sample: bool) -> type:
    """tonic's class for `name` (same __name__: tonic names its folder after it) with its
    "archive present and at least N files" check replaced: the sample's few files pass, and
    otherwise an extracted folder counts without its archive (a read-only Kaggle dataset)."""
    kind = "SAMPLE_CLASSES" if sample else "FOLDER_CLASSES"
    check = (lambda self: True) if sample else (  # EXTRACTED read when checked
        lambda self: self._folder_contains_at_least_n_files_of_type(*EXTRACTED[name]))
    return type(TONIC_CLASSES[name].__name__, (TONIC_CLASSES[name],),
                {"_check_exists": check, "__module__": __name__, "__qualname__": f"{kind}.{name}"})


# Built once, here, and found by name: a DataLoader worker that starts from a forkserver (on
# XLA, lib.data.common.worker_context) unpickles its dataset, and a class made in a call is not
# there to find.
SAMPLE_CLASSES = SimpleNamespace(**{name: _checked(name, True) for name in TONIC_CLASSES})
FOLDER_CLASSES = SimpleNamespace(**{name: _checked(name, False) for name in TONIC_CLASSES})


def _write_sample(name: str, folder: Path) -> Path:
    """The offline sample of `name` in its real format."""
    return getattr(events_sample, f"write_{name}_sample")(folder)


# A frame holds the events of one pixel and polarity in one time bin: uint8 keeps up to 255.
MAX_COUNT = 255


def check_name(name: str) -> str:
    key = str(name).lower().replace("-", "").replace("_", "")
    if key not in NAMES:
        raise DataError(f"DATASET={name!r} is not one of {list(NAMES)}; set DATASET to one "
                         "of them.")
    return key


def frame_hw(name: str, downsample: int = 1) -> tuple[int, int]:
    """(H, W) of the frames after Downsample by an integer factor (coordinates are floored)."""
    w, h, _ = TONIC_CLASSES[check_name(name)].sensor_size
    return -(-h // downsample), -(-w // downsample)


def _check_framing(n_time_bins, dt_us, fixed_t, downsample, static_shapes) -> None:
    if (n_time_bins is None) == (dt_us is None):
        raise DataError(f"N_TIME_BINS={n_time_bins!r}, DT_US={dt_us!r}: set exactly one of "
                         "them (e.g. N_TIME_BINS = 300, DT_US = None).")
    for label, value in (("N_TIME_BINS", n_time_bins), ("DT_US", dt_us), ("FIXED_T", fixed_t)):
        if value is not None and (int(value) != value or value < 1):
            raise DataError(f"{label}={value!r} must be a positive integer or None.")
    if int(downsample) != downsample or downsample < 1:
        raise DataError(f"DOWNSAMPLE={downsample!r} must be an integer >= 1 (1 = full size).")
    if static_shapes and dt_us is not None and fixed_t is None:
        raise DataError(f"DT_US={dt_us} gives a different number of frames per recording, "
                         "which recompiles on XLA; set FIXED_T (e.g. FIXED_T = 100) or use "
                         "N_TIME_BINS.")


def event_transform(name: str, *, n_time_bins: int | None = None, dt_us: int | None = None,
                    downsample: int = 1, denoise_us: int | None = 10_000):
    """tonic transform: events -> sparse int16 frames (T, 2, H, W) (`SparseFrames`); H, W as
    in `frame_hw`."""
    w, h, p = TONIC_CLASSES[check_name(name)].sensor_size
    steps = [] if not denoise_us else [tonic.transforms.Denoise(filter_time=denoise_us)]
    if downsample > 1:
        steps.append(tonic.transforms.Downsample(spatial_factor=1.0 / downsample))
    fh, fw = frame_hw(name, downsample)
    # include_incomplete keeps the last, shorter dt bin rather than dropping its events
    steps.append(tonic.transforms.ToFrame(sensor_size=(fw, fh, p), n_time_bins=n_time_bins,
                                          time_window=dt_us, include_incomplete=dt_us is not None))
    steps.append(SparseFrames())
    return tonic.transforms.Compose(steps)


class SparseFrames:
    """Dense count frames -> one int64 array: [ndim, *shape, index << 16 | count for every
    non-zero count]. One array is one HDF5 dataset to read back (each costs ~0.2 ms)."""

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        frames = np.asarray(frames)
        flat = frames.reshape(-1)
        index = np.flatnonzero(flat)
        counts = flat[index].astype(np.int64)
        if counts.size and (counts.min() < 0 or counts.max() > 0xFFFF):
            raise DataError(f"event counts per bin must be in [0, 65535]; got {counts.min()} "
                             f"to {counts.max()}")
        head = np.array([frames.ndim, *frames.shape], dtype=np.int64)
        return np.concatenate([head, (index.astype(np.int64) << 16) | counts])


_clip_noted = [False]  # the note is printed once per process, not once per recording


def _saturate(counts: np.ndarray) -> np.ndarray:
    """Counts as uint8; any above MAX_COUNT become MAX_COUNT, with a note (one line, once per
    process: a notebook shows it as text, not as a Python warning on stderr) saying so."""
    if counts.size and counts.max() > MAX_COUNT:
        if not _clip_noted[0]:
            _clip_noted[0] = True
            print(f"note: a pixel has {int(counts.max())} events in one time bin; frames hold "
                  f"at most {MAX_COUNT} per pixel per bin (uint8), so such counts are clipped "
                  f"to {MAX_COUNT}. They come from hot pixels or long bins: use more "
                  "N_TIME_BINS or a smaller DT_US to keep every event.")
        counts = np.minimum(counts, MAX_COUNT)
    return counts.astype(np.uint8)


def dense_frames(frames) -> torch.Tensor:
    """uint8 (T, 2, H, W) counts from `SparseFrames` output (or from dense frames)."""
    frames = np.asarray(frames)
    if frames.ndim != 1:
        return torch.from_numpy(_saturate(frames))
    ndim = int(frames[0])
    shape, packed = [int(v) for v in frames[1:1 + ndim]], frames[1 + ndim:]
    # numpy, not torch: one thread, and calloc'd zeros (torch's fill would start a thread team
    # per sample in a loader without workers)
    x = np.zeros(int(np.prod(shape)), dtype=np.uint8)
    x[packed >> 16] = _saturate(packed & 0xFFFF)
    return torch.from_numpy(x.reshape(shape))


class FramesToTensor:
    """Cached frames (sparse or dense, T x 2 x H x W) -> uint8 tensor of counts,
    padded/cropped to fixed_T."""

    def __init__(self, fixed_t: int | None = None):
        self.fixed_t = fixed_t

    def __call__(self, frames) -> torch.Tensor:
        x = dense_frames(frames)
        if self.fixed_t is None or x.shape[0] == self.fixed_t:
            return x
        if x.shape[0] > self.fixed_t:
            return x[: self.fixed_t].clone()
        pad = x.new_zeros((self.fixed_t - x.shape[0], *x.shape[1:]))
        return torch.cat([x, pad])


def pad_collate(batch):
    """Batch of (frames, label) with different T -> (frames zero-padded to the longest T,
    labels). tonic's PadTensors would pad with float32 zeros and so turn uint8 frames float."""
    frames, labels = zip(*batch, strict=True)
    return pad_sequence(list(frames), batch_first=True), torch.tensor(labels)


class PackedEvents(Dataset):
    """The framed recordings of a tonic dataset, read from a packed folder (`lib.data.packed`).

    `warm_cache` frames every recording once into a few large shards; a read is then a slice
    of a memory map (one open per shard per process, not one per recording). A recording not
    yet packed is framed from its events on each read (correct, slow) and never written here:
    only `warm_cache`, in one process, writes the shards.
    """

    def __init__(self, dataset, cache_path: Path, fixed_t: int | None = None):
        self.dataset, self.cache_path = dataset, str(cache_path)
        self.transform = FramesToTensor(fixed_t)
        self.reader = packed.PackReader(Path(cache_path))

    def __len__(self) -> int:
        return len(self.dataset)

    def frames(self, index: int) -> tuple[np.ndarray, int]:
        """(sparse frames, label) of recording `index`, packed or framed now."""
        got = self.reader.get(index)
        if got is None:
            data, target = self.dataset[index]
            got = np.asarray(data), int(target)
        return got

    def __getitem__(self, index: int):
        data, target = self.frames(index)
        return self.transform(data), int(target)


def _sort_by_path(ds) -> None:
    """Order samples by file path: tonic lists files in directory order, which differs between
    file systems, and indices decide the CIFAR10-DVS split and the cache file names."""
    order = sorted(range(len(ds.data)), key=lambda i: str(ds.data[i]))
    for attr in ("data", "targets", "users", "lighting"):
        if hasattr(ds, attr) and len(getattr(ds, attr)) == len(order):
            values = getattr(ds, attr)
            setattr(ds, attr, [values[i] for i in order])


def _require_aedat() -> None:
    """tonic reads .aedat4 through the `aedat` package, which tonic itself does not install."""
    try:
        import aedat  # noqa: F401
    except ImportError as exc:
        raise ModuleNotFoundError("reading CIFAR10-DVS (.aedat4) needs the `aedat` package; "
                                  "run `pip install aedat` and restart the kernel.") from exc


# What a download needs, archive and unpacked files together, where published: DVS Gesture's
# README ("3 GB for the tar file, 5 GB for the extracted data"); CIFAR10-DVS's 10,000 .aedat4
# are about 7 GB (issue 24) and its archive compresses events little, so twice that.
# N-MNIST's sizes are not published beside it: no estimate, no check.
DOWNLOAD_BYTES = {"dvsgesture": 8 * 10**9, "cifar10dvs": 14 * 10**9}


def _recordings(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.suffix in (".bin", ".npy", ".aedat4"))


def _found(name: str, root: Path) -> str:
    """What DATA_DIR holds instead: this dataset, incomplete, or another dataset's folder.

    (A failed download leaves this dataset's folder behind, empty.)"""
    folder = root / TONIC_CLASSES[name].__name__
    if folder.is_dir() and (n := _recordings(folder)):
        return (f"; {folder.name}/ there holds only {n} recordings (an interrupted download or "
                "copy: delete the folder to download again)")
    for other, cls in TONIC_CLASSES.items():
        if other != name and (root / cls.__name__).is_dir() and _recordings(root / cls.__name__):
            return f"; it holds {cls.__name__}/ instead (set DATASET = {other!r} to train on that)"
    return ""


def _missing_message(name: str, root: Path, error: Exception) -> str:
    return (
        f"{name} is not in DATA_DIR {str(root)!r} (expected {root / TONIC_CLASSES[name].__name__}"
        f"/ as tonic extracts it{_found(name, root)}) and downloading it failed "
        f"({type(error).__name__}: {str(error)[:120]}). Fix: enable internet access, put the "
        "extracted dataset there, point DATA_DIR at the folder that holds it, or set "
        "SAMPLE_DATA = True."
    ).replace("\n", " ")


def load_events(name: str, root: Path, train: bool | None, transform=None, *,
                sample: bool = False):
    """The tonic dataset at `root` (train/test; None for CIFAR10-DVS), files in path order."""
    name, root = check_name(name), Path(root)
    if root.exists() and not root.is_dir():
        raise DataError(f"DATA_DIR {str(root)!r} is a file; set DATA_DIR to a folder.")
    if name == "cifar10dvs":
        _require_aedat()
    kwargs = {} if name == "cifar10dvs" else {"train": bool(train)}
    cls = getattr(SAMPLE_CLASSES if sample else FOLDER_CLASSES, name)
    if not sample and name in DOWNLOAD_BYTES and not (root / cls.__name__).is_dir():
        space.require(root, DOWNLOAD_BYTES[name], f"downloading and unpacking {cls.__name__}")
    try:
        ds = cls(str(root), transform=transform, **kwargs)
    except (OSError, RuntimeError) as exc:  # the download failed or its md5 did not match
        raise DataNotFound(_missing_message(name, root, exc)) from None
    if len(ds) == 0:
        raise DataNotFound(_missing_message(name, root, ValueError("no recordings")))
    _sort_by_path(ds)
    return ds


def _cached(ds, cache_dir: Path, tag: str, fixed_t: int | None) -> PackedEvents:
    """Packed frames in a folder whose name says everything that changes them."""
    folder = cache_dir / f"{tag}_pack{packed.FORMAT_VERSION}_n{len(ds)}"
    return PackedEvents(ds, folder, fixed_t)


def build_datasets(name: str, data_dir: Path, *, sample: bool = False,
                         n_time_bins: int | None = None, dt_us: int | None = None,
                         fixed_t: int | None = None, downsample: int = 1,
                         denoise_us: int | None = 10_000, cache_dir: Path | None = None,
                         seed: int = 42, test_fraction: float = 0.1,
                         static_shapes: bool = False, kept: Path | None = None, log=print):
    """(train, test, info): datasets of (uint8 frames of counts (T, 2, H, W), int label).

    With neither `n_time_bins` nor `dt_us`, the official number of bins is used. CIFAR10-DVS
    has no official split: a seeded `random_split` keeps 1 - test_fraction for training
    (seed 42 and 0.1 as in the official code). `info` holds name, root, classes, num_classes,
    frame_hw, T (None when variable: batch with `collate_fn(info)`), framing and sizes.
    When DATA_DIR holds no download yet and the frames are all packed, on scratch or kept at
    `kept` (`Storage.prepared`: copied to scratch first), the raw recordings are not needed:
    a new Colab session neither downloads nor frames again.
    """
    name = check_name(name)
    if n_time_bins is None and dt_us is None:
        n_time_bins = OFFICIAL_TIME_BINS[name]
    _check_framing(n_time_bins, dt_us, fixed_t, downsample, static_shapes)
    if not 0 < test_fraction < 1:
        raise DataError(f"test_fraction={test_fraction!r} must be between 0 and 1.")
    root = _write_sample(name, Path(data_dir) / "sample") if sample else Path(data_dir)
    cache_dir = Path(cache_dir) if cache_dir else Path(data_dir) / "cache"
    tf = event_transform(name, n_time_bins=n_time_bins, dt_us=dt_us, downsample=downsample,
                         denoise_us=denoise_us)
    framing = f"bins{n_time_bins}" if dt_us is None else f"dt{dt_us}"
    # the sample's generator version: frames of an older sample are never read for a new one
    source = f"_sample-v{samples.VERSIONS['events']}" if sample else ""
    tag = f"{name}{source}_{framing}_ds{downsample}_dn{denoise_us or 0}"
    prefixes = [f"{tag}_all"] if name == "cifar10dvs" else [f"{tag}_train", f"{tag}_test"]
    found = [] if sample or (root / TONIC_CLASSES[name].__name__).is_dir() else [
        prepared(cache_dir, kept, prefix, log) for prefix in prefixes]
    if found and all(found):  # nothing downloaded, every frame packed: read the packs only
        sets = [PackedEvents(FromPack(folder), folder, fixed_t) for folder in found]
    else:
        splits = [None] if name == "cifar10dvs" else [True, False]
        sets = [_cached(load_events(name, root, split, tf, sample=sample), cache_dir, prefix,
                        fixed_t) for split, prefix in zip(splits, prefixes, strict=True)]
    if name == "cifar10dvs":
        (cached,) = sets
        n_train = int((1 - test_fraction) * len(cached))
        split = torch.Generator().manual_seed(seed)
        train, test = random_split(cached, [n_train, len(cached) - n_train], generator=split)
        classes = list(CIFAR10DVS_CLASSES)
    else:
        train, test = sets
        classes = [str(c) for c in TONIC_CLASSES[name].classes]
    t = fixed_t if fixed_t is not None else n_time_bins
    info = {"name": name, "root": str(root), "classes": classes, "num_classes": len(classes),
            "frame_hw": frame_hw(name, downsample), "T": t, "n_time_bins": n_time_bins,
            "dt_us": dt_us, "fixed_t": fixed_t, "downsample": downsample,
            "denoise_us": denoise_us, "train_size": len(train), "test_size": len(test),
            "cache_dir": str(cache_dir)}
    return train, test, info


def collate_fn(info: dict):
    """None (default stacking) when every sample has T frames, else zero-padding to the
    longest recording in the batch."""
    return None if info["T"] is not None else pad_collate


def frame_picture(frames: torch.Tensor, start: int = 0, stop: int | None = None) -> np.ndarray:
    """(T, 2, H, W) counts -> (H, W, 3) RGB in [0, 1]: ON events red, OFF blue, summed over
    frames[start:stop] and scaled by the 99th percentile so a few hot pixels don't wash it out."""
    counts = frames[start:stop].sum(dim=0).float()  # (2, H, W)
    scale = torch.quantile(counts.flatten(), 0.99).clamp(min=1.0)
    on, off = (counts / scale).clamp(0, 1)
    return torch.stack([on, torch.zeros_like(on), off], dim=-1).numpy()
