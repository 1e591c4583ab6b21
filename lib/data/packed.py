"""Prepared data in a few large files: variable-length arrays in shards, read through a memory map.

A packed folder holds shards `shard-<start>-<stop>.npy` (records start..stop-1 of one dtype,
concatenated: one `.npy`, so `np.load(mmap_mode="r")` maps it) beside `shard-<start>-<stop>
.index.npy` (per record: its end offset in the shard and its label), and, once every record
is in, `MANIFEST.json` (format version, file names, sizes and SHA-256 sums).

Why this format (measured by `python -m bench.bench_opens`, BENCHMARKS.md "Data where it is
fast"): one file per recording costs an open per read, a round trip each on Drive; a
memory-mapped `.npy` costs a few opens per shard per process, and a read is a slice of the
page cache (3 us a N-MNIST record, against 6 us for a slice of one HDF5 file and 2.8 ms for
tonic's file per record). HDF5 also opens in C, out of sight of Python's audit hook that the
opens budget is counted with, and is a library of its own for a flat array; WebDataset's tar
shards are built for sequential streaming, not the seeded random order with mid-epoch resume
of `EpochSampler`; LitData and FFCV would be new dependencies for what NumPy does here.

Shards are written in order, each to a temporary name and renamed when complete, so a kill
mid-build loses at most the shard being written; `PackWriter` resumes after the last
complete shard. Shard boundaries fall where a shard passes `SHARD_BYTES`.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np

from lib.base import atomic, durable

FORMAT_VERSION = 1
SHARD_BYTES = 128 * 2**20  # tens to hundreds of MB a shard: few opens, a cheap lost shard
MANIFEST = "MANIFEST.json"
_SHARD = re.compile(r"shard-(\d{7})-(\d{7})\.npy$")


def shard_names(start: int, stop: int) -> tuple[str, str]:
    base = f"shard-{start:07d}-{stop:07d}"
    return f"{base}.npy", f"{base}.index.npy"


def complete_shards(folder: Path) -> list[tuple[int, int]]:
    """(start, stop) of every complete shard in `folder` (one directory listing), in order."""
    if not Path(folder).is_dir():
        return []
    found = [m for name in os.listdir(folder) if (m := _SHARD.match(name))]
    return sorted((int(m[1]), int(m[2])) for m in found)


def sha256(path: Path, chunk: int = 8 * 2**20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getbuffer()


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete folder of the current format, or None."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if manifest.get("format") == FORMAT_VERSION else None


class PackWriter:
    """Appends records (1-d arrays of one dtype) and labels to `folder`'s shards, in order.

    `done` is how many records complete shards already hold (resume from there); `add` the
    record with that index next. `close` writes the last shard and, when `n` records are in,
    the manifest.
    """

    def __init__(self, folder: Path, n: int, shard_bytes: int | None = None):
        self.folder, self.n = Path(folder), n
        self.shard_bytes = shard_bytes or SHARD_BYTES
        self.folder.mkdir(parents=True, exist_ok=True)
        shards = complete_shards(self.folder)
        self.done = shards[-1][1] if shards else 0
        self._records: list[np.ndarray] = []
        self._labels: list[int] = []
        self._bytes = 0

    def add(self, record: np.ndarray, label: int) -> None:
        record = np.ascontiguousarray(record).reshape(-1)
        self._records.append(record)
        self._labels.append(int(label))
        self._bytes += record.nbytes
        if self._bytes >= self.shard_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._records:
            return
        start, stop = self.done, self.done + len(self._records)
        data_name, index_name = shard_names(start, stop)
        ends = np.cumsum([r.size for r in self._records], dtype=np.int64)
        index = np.stack([ends, np.asarray(self._labels, dtype=np.int64)], axis=1)
        # the index first, the data last: a shard counts as complete once its data file exists
        atomic.write_bytes(self.folder / index_name, _npy(index))
        atomic.write_bytes(self.folder / data_name, _npy(np.concatenate(self._records)))
        self.done, self._records, self._labels, self._bytes = stop, [], [], 0

    def close(self) -> bool:
        """Write what is pending; True (and the manifest) when all `n` records are in."""
        self._flush()
        if self.done != self.n:
            return False
        files = {}
        for start, stop in complete_shards(self.folder):
            for name in shard_names(start, stop):
                path = self.folder / name
                files[name] = {"size": path.stat().st_size, "sha256": sha256(path)}
        manifest = {"format": FORMAT_VERSION, "records": self.n, "files": files}
        atomic.write_bytes(self.folder / MANIFEST, json.dumps(manifest, indent=1).encode())
        return True


class PackReader:
    """Record i of a packed folder as an array, through one memory map per shard.

    Shards are opened on first use in each process (two opens per shard: index and data),
    and stay open: a DataLoader's persistent workers open them once, not once per epoch.
    Records not yet packed read as None (the caller frames them itself).
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._shards: list[tuple[int, int]] | None = None
        self._maps: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __getstate__(self):  # maps do not travel to spawned workers; they reopen there
        return {"folder": self.folder, "_shards": None, "_maps": {}}

    def refresh(self) -> None:
        self._shards, self._maps = None, {}

    @property
    def shards(self) -> list[tuple[int, int]]:
        if self._shards is None:
            self._shards = complete_shards(self.folder)
        return self._shards

    def packed(self) -> int:
        """How many records, from 0, complete shards hold."""
        return self.shards[-1][1] if self.shards else 0

    def labels(self) -> list[int]:
        """Every packed record's label, from the shards' indexes (no record is read)."""
        return [int(label) for start, stop in self.shards
                for label in np.load(self.folder / shard_names(start, stop)[1])[:, 1]]

    def _open(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k not in self._maps:
            data_name, index_name = shard_names(*self.shards[k])
            index = np.load(self.folder / index_name)
            data = np.load(self.folder / data_name, mmap_mode="r")
            self._maps[k] = (index, data)
        return self._maps[k]

    def get(self, i: int) -> tuple[np.ndarray, int] | None:
        shards = self.shards
        k = bisect.bisect_right([s for s, _ in shards], i) - 1
        if k < 0 or i >= shards[k][1]:
            return None
        index, data = self._open(k)
        j = i - shards[k][0]
        begin = int(index[j - 1, 0]) if j else 0
        return np.array(data[begin:int(index[j, 0])]), int(index[j, 1])


def same_pack(a: Path, b: Path) -> bool:
    """True when both folders hold a complete pack with the same manifest and file sizes."""
    ma, mb = read_manifest(a), read_manifest(b)
    if ma is None or ma != mb:
        return False
    return all((Path(b) / name).is_file() and (Path(b) / name).stat().st_size == f["size"]
               for name, f in mb["files"].items())


def copy_pack(src: Path, dst: Path) -> bool:
    """Copy a complete packed folder `src` (e.g. on Drive, durable) to `dst` (e.g. the VM's
    local disk, scratch) unless `dst` already holds the same pack; True when it copied.

    Each file goes in one sequential read, checked against the manifest's size and SHA-256;
    the manifest is written last, so a copy cut short is never taken as complete. The same
    call publishes a pack from scratch to durable. Free space at `dst` is checked first.
    """
    from lib.data import space

    src, dst = Path(src), Path(dst)
    manifest = read_manifest(src)
    if manifest is None:
        raise FileNotFoundError(f"{src} holds no complete pack (no {MANIFEST} of format "
                                f"{FORMAT_VERSION})")
    if same_pack(src, dst):
        return False
    need = sum(f["size"] for f in manifest["files"].values())
    space.require(dst, need, f"copying the prepared data {src.name}")
    dst.mkdir(parents=True, exist_ok=True)
    (dst / MANIFEST).unlink(missing_ok=True)
    for name, f in manifest["files"].items():
        durable.copy_checked(src / name, dst / name, f["size"], f["sha256"])
    atomic.write_bytes(dst / MANIFEST, (src / MANIFEST).read_bytes())
    return True


def restore(folder: Path, kept: Path | None) -> str | None:
    """Before `folder` (scratch) is prepared: copy the complete pack kept at `kept` (durable,
    e.g. Drive) into it, checked. One line saying what happened; None when nothing is kept
    there or `folder` is complete already. A copy that fails says why, and the caller
    prepares the data again."""
    if kept is None or read_manifest(folder) is not None or read_manifest(kept) is None:
        return None
    try:
        copy_pack(kept, folder)
    except OSError as exc:
        return (f"the prepared data kept in {kept} was not usable ({exc}); preparing it again "
                f"in {folder}")
    return f"copied the prepared data kept in {kept} to {folder} (one pass, checked)"


def keep(folder: Path, kept: Path | None) -> str | None:
    """After `folder` (scratch) is prepared: keep a copy at `kept` (durable) for the next
    session, when it fits there (lib.data.space); one line saying what happened, None when
    there is nothing to do."""
    from lib.data import space

    manifest = read_manifest(folder)
    if kept is None or manifest is None or same_pack(folder, kept):
        return None
    need = sum(f["size"] for f in manifest["files"].values())
    free = space.free_bytes(kept)
    if need + space.MARGIN > free:
        return (f"the prepared data {folder.name} ({need / 1e9:.2f} GB) is not kept in "
                f"{kept.parent}, which has {free / 1e9:.2f} GB free: the next session prepares "
                "it again")
    try:
        copy_pack(folder, kept)
    except OSError as exc:
        return (f"the prepared data was not kept in {kept} ({exc}): the next session "
                "prepares it again")
    return f"kept the prepared data in {kept} for the next session"
