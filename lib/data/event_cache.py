"""The frame cache's life: framing every recording once into its packs (`warm_cache`), and
finding packs already made, on scratch or kept between sessions (`prepared`), so that a new
session reads them without the raw recordings (`FromPack`). The packs themselves:
`lib.data.packed`; the datasets over them: `lib.data.events.PackedEvents`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from lib.data import packed, space
from lib.data.common import worker_context


class FromPack:
    """Stands in for a tonic dataset whose every recording is packed: its length and labels
    come from the pack, and no raw recording is read (or downloaded) again."""

    def __init__(self, folder: Path):
        self.targets = packed.PackReader(folder).labels()

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        raise RuntimeError("every recording is packed: frames are read from the pack")


def _complete_packs(folder: Path, prefix: str) -> list[Path]:
    """The complete packs of `prefix` in `folder`, fewest records first."""
    if not folder.is_dir():
        return []
    found = [(m["records"], p) for p in folder.glob(f"{prefix}_pack{packed.FORMAT_VERSION}_n*")
             if (m := packed.read_manifest(p))]
    return [p for _, p in sorted(found)]


def prepared(cache_dir: Path, kept: Path | None, prefix: str, log) -> Path | None:
    """A complete pack of `prefix` (the most records, if several) in `cache_dir` (scratch),
    or copied there from `kept` (lib.data.packed.restore); None when there is none."""
    if here := _complete_packs(cache_dir, prefix):
        return here[-1]
    there = _complete_packs(Path(kept), prefix) if kept else []
    if not there:
        return None
    target = cache_dir / there[-1].name
    if line := packed.restore(target, there[-1]):
        log(line)
    return target if packed.read_manifest(target) else None


class _Framer(Dataset):
    """Item k: (sparse frames, label) of recording `indices[k]`, framed from its events."""

    def __init__(self, dataset, indices: range):
        self.dataset, self.indices = dataset, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int):
        data, target = self.dataset[self.indices[k]]
        return np.asarray(data), int(target)


def _as_is(item):
    return item


def _packed_sets(datasets) -> list:
    """The distinct PackedEvents under `datasets` (CIFAR10-DVS splits share one)."""
    found = {}
    for ds in datasets:
        while isinstance(ds, Subset):
            ds = ds.dataset
        found[id(ds)] = ds
    return list(found.values())


def cache_bytes_estimate(cached, probe: int = 8) -> int:
    """Bytes the packed frames will take, from the first `probe` recordings framed now."""
    n = min(probe, len(cached))
    if n == 0:
        return 0
    sizes = [np.asarray(cached.dataset[i][0]).nbytes for i in range(n)]
    return int(sum(sizes) / n * len(cached) * 1.1) + 2**20


def warm_cache(*datasets, workers: int = 0, progress: bool = True, kept: Path | None = None,
               log=print, start: str | None = None) -> int:
    """Frame every recording not yet packed, in order, into its shards; return how many were
    framed. `kept`: where prepared data is kept between sessions (`Storage.prepared`, Drive
    on Colab): a pack kept there is copied in first instead of framing, and a pack framed
    here is copied there for the next session (`lib.data.packed.restore` / `keep`).
    `workers` frame in DataLoader workers that start by `start` (`DeviceChoice.worker_start`,
    `lib.data.common.worker_context`).

    Run it in the notebook process before training: training processes then only read, so
    DDP/XLA ranks never write a shard at once. A kill mid-build keeps every complete shard
    (written under a temporary name, renamed when whole); the next call goes on after them.
    Before framing, the free space of the cache's disk is checked against an estimate.
    """
    from lib.base import progress as progress_bar

    framed = 0
    for cached in _packed_sets(datasets):
        folder = Path(cached.cache_path)
        there = Path(kept) / folder.name if kept else None
        if line := packed.restore(folder, there):
            log(line)
            cached.reader.refresh()
        if packed.read_manifest(folder) is not None:
            if line := packed.keep(folder, there):
                log(line)
            continue
        writer = packed.PackWriter(folder, len(cached))
        missing = range(writer.done, len(cached))
        if missing:
            need = cache_bytes_estimate(cached) * len(missing) // len(cached)
            space.require(folder, need, f"framing {len(missing)} recordings into {folder.name}")
        # Its own generator: iterating must not draw from the global RNG (model init follows).
        loader = DataLoader(_Framer(cached.dataset, missing), batch_size=None,
                            num_workers=workers, collate_fn=_as_is, generator=torch.Generator(),
                            multiprocessing_context=worker_context(start, workers,
                                                                   cached.dataset))
        bar = (progress_bar.bar(len(loader), f"framing {folder.name}", "rec")
               if progress and missing else progress_bar.NoBar())
        for data, target in loader:
            writer.add(data, target)
            bar.update(1)
        bar.close()
        writer.close()
        cached.reader.refresh()
        framed += len(missing)
        if line := packed.keep(folder, there):
            log(line)
    return framed
