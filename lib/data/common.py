"""Loaders whose results depend on the configuration alone, never on the hardware.

`EpochSampler` orders each epoch from (seed, epoch), can start mid-epoch (resume after a
kill) and shards across ranks. `SeededDataset` seeds every sample's random augmentation from
(seed, epoch, index), so the number of DataLoader workers (0 on a Mac, 2 on Colab) and a
resume in the middle of an epoch change nothing that is computed.
"""

from __future__ import annotations

import multiprocessing

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from lib.base.errors import DataError
from lib.runtime.device import DeviceChoice

_MIX = (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    return (seed * _MIX[0] + epoch * _MIX[1] + index * _MIX[2]) % (2**63 - 1)


class SeededDataset(Dataset):
    """Wraps a dataset; item `(epoch, i)` is `dataset[i]` under a per-sample torch seed."""

    def __init__(self, dataset, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        epoch, index = key
        # Only the CPU generator: torch.manual_seed would also queue seeds for every
        # accelerator (about 1 ms a sample in a DataLoader, bench/bench_loop.py measured it).
        g = torch.default_generator
        state = g.get_state()
        g.manual_seed(sample_seed(self.seed, epoch, index))
        try:
            return self.dataset[index]
        finally:
            g.set_state(state)


class EpochSampler(Sampler):
    """Yields `(epoch, index)` keys: a seeded permutation (or 0..n-1), this rank's share.

    Set the epoch (and where in it to start, in samples of this rank) with `set_epoch`.
    """

    def __init__(self, n: int, seed: int, shuffle: bool, rank: int = 0, world_size: int = 1):
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator().manual_seed(sample_seed(self.seed, self.epoch, -1))
        return torch.randperm(self.n, generator=g).tolist()

    def __iter__(self):
        mine = self._order()[self.rank :: self.world_size]
        return iter([(self.epoch, i) for i in mine[self.start :]])

    def __len__(self) -> int:
        # The whole epoch's share, even when starting mid-epoch: the loop counts batches
        # from `start` up to this length, so it must not shrink with the resume offset.
        return len(range(self.rank, self.n, self.world_size))


def make_loader(dataset, batch_size: int, choice: DeviceChoice, *, train: bool, seed: int,
                rank: int = 0, world_size: int = 1, collate_fn=None) -> DataLoader:
    """A DataLoader with the device's transfer settings and the project's sampling.

    Training drops the short last batch on every device (a new shape would recompile on XLA,
    and rule 4 says every device computes the same thing); evaluation keeps every sample.
    """
    if train and len(dataset) // world_size < batch_size:
        raise DataError(
            f"the training set has {len(dataset)} samples, fewer than one batch of {batch_size} "
            f"per device; set BATCH_SIZE to at most {max(1, len(dataset) // world_size)}."
        )
    sampler = EpochSampler(len(dataset), seed, shuffle=train, rank=rank, world_size=world_size)
    workers = choice.num_workers
    context = worker_context(choice.worker_start, workers, dataset)
    return DataLoader(
        SeededDataset(dataset, seed),
        batch_size=batch_size,
        sampler=sampler,
        drop_last=train,
        num_workers=workers,
        pin_memory=choice.pin_memory,
        persistent_workers=workers > 0,
        multiprocessing_context=context,
        collate_fn=collate_fn,
        # Its own generator: creating an iterator must not draw from the global RNG, or a
        # resumed run's dropout masks would differ from an uninterrupted one's.
        generator=torch.Generator().manual_seed(seed),
    )


# What a forkserver imports once, before it forks any worker (with the module of the first
# dataset it serves): a worker then unpickles its dataset without importing torch again.
WORKER_PRELOAD = ["torch", "lib.data.common"]


def worker_context(method: str | None, workers: int, dataset=None):
    """The multiprocessing context DataLoader workers start from: None (the OS's default, fork
    on Linux) unless `method` (`DeviceChoice.worker_start`) names one.

    XLA's is a forkserver. torch_xla runs threads of its own in the training process; a worker
    forked while one of them holds a lock of the C library (glibc's atexit lock, taken by a
    module import) starts with that lock held forever: it hangs before its first batch, the
    training waits for that batch, and the worker outlives the kernel (seen in this project's
    XLA lane; the same deadlock with pin-memory threads is pytorch/pytorch#130610). A
    forkserver is a fresh process without those threads; each worker forks from it. The
    datasets must pickle (`lib.data.packed.PackReader` reopens its memory maps in the worker),
    and a script run as `python x.py` needs its `if __name__ == "__main__":` guard (a
    notebook's kernel does not).
    """
    if not workers or method is None:
        return None
    context = multiprocessing.get_context(method)
    if method == "forkserver":  # no effect once the server runs: a process trains one workload
        context.set_forkserver_preload(
            WORKER_PRELOAD + ([type(dataset).__module__] if dataset is not None else []))
    return context
