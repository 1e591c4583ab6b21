"""How DataLoader workers start: fork (CUDA, CPU) against a forkserver (XLA).

    python -m bench.bench_workers            # 3 loaders in turn, each way
    python -m bench.bench_workers --quick    # 2 loaders

An XLA run's DataLoader workers start from a forkserver (`DeviceChoice.worker_start`), so
that none is forked while a torch_xla thread holds a C-library lock. This measures the cost: the
time from making a loader to its first batch, for several loaders in one process (as a
notebook makes a training and a test loader), over MSHNet's offline IRSTD sample with the
platforms' 2 workers. The forkserver starts on the first loader and imports torch and the
dataset's module once (`WORKER_PRELOAD`); each later worker forks from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

from bench.common import markdown_table, set_threads


def first_batches(start: str | None, loaders: int) -> list[float]:
    """Seconds from make_loader to the first batch, for `loaders` loaders in turn, workers
    started by `start` (`DeviceChoice.worker_start`)."""
    from lib.data.common import make_loader
    from lib.data.irstd import build_datasets
    from lib.runtime.device import Probe, choose_device
    from lib.runtime.platforms import get_platform

    cpu = choose_device("cpu", get_platform("colab_t4"), Probe(), environ={})
    choice = dataclasses.replace(cpu, num_workers=2, worker_start=start)
    train, _, _ = build_datasets(tempfile.mkdtemp(), True, 256, 256)
    seconds = []
    for _ in range(loaders):
        began = time.perf_counter()
        batches = iter(make_loader(train, 4, choice, train=True, seed=0))
        next(batches)
        seconds.append(time.perf_counter() - began)
        del batches
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    set_threads(1)
    loaders = 2 if args.quick else 3
    rows = []
    # the fork run first: a forkserver, once started, stays for the process
    for start, how in ((None, "fork (CUDA, CPU)"), ("forkserver", "forkserver (XLA)")):
        seconds = first_batches(start, loaders)
        rows.append({"how": how, "first": seconds[0], "later": max(seconds[1:])})
    print(markdown_table(rows, [("how", "workers start by"), ("first", "first loader s"),
                                ("later", "later loaders s (the slowest)")]))

if __name__ == "__main__":
    main()
