"""Input pipeline: per workload, time per batch of data loading vs of the training step (CPU).

Run: ``python -m bench.bench_pipeline``.

Each workload's real loader (torchvision, the IRSTD folder reader, tonic) reads its learnable
sample through `lib.data.common.make_loader` (one process, as on the CPU; a GPU notebook adds
workers). Loading is timed batch by batch (`next()` on the loader); the step (forward,
backward, optimizer step) on batches already loaded. Every epoch reads the same samples in
the same order here, and a first untimed pass warms the file and event-frame caches, so the
numbers are those of the second and later epochs. Batches are small enough for a CPU; both
times grow with the batch, so their ratio is what carries over. "Loader-bound samples/s" is
what one loader process can feed; a GPU step faster than that is starved. Event framing is
timed over an epoch, cold (Denoise + ToFrame, written to tonic's HDF5 disk cache) and warm
(from the cache), batches included.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from itertools import cycle
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.bench_loop import choice_for
from bench.common import FIGURES, markdown_table, median, save_figure
from lib.data.common import make_loader

# CPU batch sizes (the platform batches of a T4 would take minutes per step here).
BATCHES = {"fashion_mnist": 128, "cifar10": 32, "mshnet": 4, "mamba_spike": 2}


def _fashion(folder: Path):
    from lib.data import fashion
    from lib.models.cnn import CNN

    train, _, _ = fashion.build_datasets(folder, sample=True)
    model = CNN()
    return train, None, model, F.cross_entropy, torch.optim.Adadelta(model.parameters(), 1.0)


def _cifar(folder: Path):
    from lib.data.cifar import build_datasets as cifar_datasets
    from lib.models.resnet import CifarResNet18
    from lib.training.optim import make_optimizer

    train, _, _ = cifar_datasets("cifar10", folder, sample=True)
    model = CifarResNet18()
    return train, None, model, F.cross_entropy, make_optimizer("sgd", model.parameters())


def _irstd(folder: Path):
    from lib.data.irstd import build_datasets as irstd_datasets
    from lib.losses.sls import SLSLoss
    from lib.models.mshnet import MSHNet

    train, _, _ = irstd_datasets(folder, sample=True)
    model = MSHNet()
    return train, None, model, SLSLoss(warm_epochs=0), torch.optim.Adagrad(model.parameters(),
                                                                            lr=0.05)


def _events(folder: Path):
    from lib.data.events import build_datasets as event_datasets
    from lib.data.events import collate_fn
    from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig

    train, _, info = event_datasets("nmnist", folder, sample=True)
    model = MambaSpike(MambaSpikeConfig.preset("nmnist", input_hw=info["frame_hw"]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    return train, collate_fn(info), model, F.cross_entropy, opt


# name -> (library module that must exist, builder)
WORKLOADS = {"fashion_mnist": ("lib.data.fashion", _fashion),
             "cifar10": ("lib.data.cifar", _cifar),
             "mshnet": ("lib.data.irstd", _irstd),
             "mamba_spike": ("lib.data.events", _events)}


def time_loading(loader, n: int) -> tuple[list[float], list]:
    """Seconds of each of the first `n` `next()` calls, and the batches they returned."""
    times, batches = [], []
    it = iter(loader)
    for _ in range(min(n, len(loader))):
        start = time.perf_counter()
        batches.append(next(it))
        times.append(time.perf_counter() - start)
    return times, batches


def time_steps(model, loss_fn, optimizer, batches: list, steps: int,
               slow_s: float = 5.0) -> list[float]:
    """Seconds of `steps` training steps over `batches`, after one untimed warm-up step;
    when the warm-up took more than `slow_s`, one timed step is enough."""
    model.train()
    times = []
    for i, (x, y) in enumerate(cycle(batches)):
        start = time.perf_counter()
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        if i >= steps or (i >= 1 and times[0] > slow_s):
            return times[1:]


def measure(name: str, folder: Path, batch: int | None = None, n_batches: int = 4,
            steps: int = 2) -> dict:
    """One workload's row: median ms per batch of loading and of the step, their ratio and
    the loader-bound samples/s."""
    torch.manual_seed(0)
    batch = batch or BATCHES[name]
    train, collate, model, loss_fn, optimizer = WORKLOADS[name][1](folder / name)
    loader = make_loader(train, batch, choice_for("cpu"), train=True, seed=0, collate_fn=collate)
    time_loading(loader, n_batches)  # first touch: file caches, imports, event framing
    load, batches = time_loading(loader, n_batches)
    step = time_steps(model, loss_fn, optimizer, batches, steps)
    load_ms, step_ms = 1e3 * median(load), 1e3 * median(step)
    return {"workload": name, "batch": batch, "load_ms": load_ms,
            "step_ms": step_ms,
            "load_over_step": load_ms / step_ms, "loader_samples_per_s": batch / load_ms * 1e3,
            "step_samples_per_s": batch / step_ms * 1e3, "batches": len(load),
            "starved": load_ms > step_ms}


# Events per N-MNIST-sized recording (300 ms, 34x34): the sample's 1,500, and more. Public
# N-MNIST readers size their buffers for about 9,000 events per recording.
EVENT_COUNTS = (1_500, 4_000, 9_000)


# The N-MNIST batch of a T4 or P100 notebook (the platform table's mamba_spike batch x 2).
FRAMING_BATCH = 32


def framing(folder: Path, repeats: int = 3, counts=EVENT_COUNTS,
            batch: int = FRAMING_BATCH) -> dict:
    """An epoch over N-MNIST-format recordings of n events, official framing (T=300), read
    through tonic and batched as training batches them (DataLoader, one process): the first
    epoch cold (read, Denoise, ToFrame, cache write), the second from the disk cache, each in
    a fresh cache folder per repeat; medians, per recording."""
    from torch.utils.data import DataLoader

    from lib.data.events import build_datasets as event_datasets
    from lib.data.events_sample import write_nmnist_sample

    rows = []
    for n_events in counts:
        data = folder / f"events{n_events}"
        write_nmnist_sample(data / "sample", n_events=n_events)  # build_* then finds it there
        cold, warm, n = [], [], 0
        for r in range(repeats):
            train, _, _ = event_datasets("nmnist", data, sample=True,
                                               cache_dir=data / f"cache-{r}")
            n = len(train)
            loader = DataLoader(train, batch_size=batch)
            for times in (cold, warm):
                start = time.perf_counter()
                for _ in loader:
                    pass
                times.append(time.perf_counter() - start)
        rows.append({"events": n_events, "recordings": n, "batch": batch,
                     "cold_ms": 1e3 * median(cold) / n, "cached_ms": 1e3 * median(warm) / n,
                     "speedup": median(cold) / median(warm)})
    return {"rows": rows, "target": 10.0, "framing_ms_by_events": framing_by_events()}


def framing_by_events(counts=(1_500, 20_000), repeats: int = 3) -> dict[int, float]:
    """ms to frame (Denoise + ToFrame, T=300) one N-MNIST-sized recording of n events: what
    the disk cache saves grows with the events per recording; its read cost does not."""
    import numpy as np
    import tonic

    from lib.data.events import event_transform
    from lib.data.events_sample import blob_events

    transform, rng = event_transform("nmnist", n_time_bins=300), np.random.default_rng(0)
    out = {}
    for n in counts:
        columns = blob_events(rng, 3, 10, 34, 300_000, n)
        events = np.zeros(n, dtype=tonic.datasets.NMNIST.dtype)
        for key in ("x", "y", "t", "p"):
            events[key] = columns[key]
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            transform(events)
            times.append(time.perf_counter() - start)
        out[n] = 1e3 * median(times)
    return out


def run(workloads: list[str] | None = None, folder: Path | None = None, n_batches: int = 4,
        steps: int = 2, batches: dict | None = None, framing_repeats: int = 3) -> dict:
    """Rows for every workload whose data module exists; framing when lib.data.events does."""
    rows, missing = [], []
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        folder = Path(folder or tmp)
        for name in workloads or list(WORKLOADS):
            if importlib.util.find_spec(WORKLOADS[name][0]) is None:
                missing.append(f"{name}: {WORKLOADS[name][0]} is not there yet")
                continue
            rows.append(measure(name, folder, (batches or {}).get(name), n_batches, steps))
        events = importlib.util.find_spec("lib.data.events") is not None and framing_repeats
        frames = framing(folder / "framing", framing_repeats) if events else None
    return {"rows": rows, "missing": missing, "framing": frames}


def report(res: dict, figure: str | None = None) -> str:
    text = ["CPU, one loader process (`make_loader`, num_workers 0), sample data; medians of "
            "the timed batches.", "", markdown_table(res["rows"], [
                ("workload", "workload"), ("batch", "batch"), ("load_ms", "load ms/batch"),
                ("step_ms", "step ms/batch (CPU)"), ("load_over_step", "load / step"),
                ("loader_samples_per_s", "loader-bound samples/s"),
                ("step_samples_per_s", "CPU step samples/s"), ("starved", "CPU step starved")])]
    text += [f"- not measured: {m}" for m in res["missing"]]
    f = res["framing"]
    if f:
        text += ["", "Event framing: an epoch over N-MNIST-format recordings (300 ms, 34x34, "
                 "T=300) read through tonic and batched by a DataLoader (one process), per "
                 "recording: cold = first epoch (read + Denoise + ToFrame + cache write + "
                 "batching), cached = second epoch (tonic's disk cache of sparse frames, read "
                 "by `EventCache`, uint8 frames + batching). Target: cached epoch "
                 f"{f['target']:.0f}x faster.", "",
                 markdown_table([dict(r, verdict="meets" if r["speedup"] >= f["target"]
                                      else "misses") for r in f["rows"]],
                                [("events", "events per recording"),
                                 ("recordings", "recordings"), ("batch", "batch"),
                                 ("cold_ms", "cold ms"),
                                 ("cached_ms", "cached ms"), ("speedup", "cached speed-up"),
                                 ("verdict", "10x target")]),
                 "", "Framing alone (Denoise + ToFrame), per recording of n events: "
                 + ", ".join(f"{n:,} events {ms:.1f} ms"
                             for n, ms in f["framing_ms_by_events"].items()) + "."]
    else:
        text += ["", "Event framing: not measured (lib/data/events.py is not there yet)."]
    if figure:
        text += ["", f"![pipeline]({figure})"]
    return "\n".join(text)


def plot(res: dict, folder: Path = FIGURES) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.6))
    rows = res["rows"]
    y = range(len(rows))
    ax.barh([i - 0.2 for i in y], [r["load_ms"] for r in rows], 0.4, label="load")
    ax.barh([i + 0.2 for i in y], [r["step_ms"] for r in rows], 0.4, label="step (CPU)")
    ax.set(yticks=list(y), yticklabels=[f"{r['workload']} (b{r['batch']})" for r in rows],
           xscale="log", xlabel="ms per batch")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    return save_figure(fig, "pipeline", folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="data loading vs training step, per workload")
    parser.add_argument("--workloads", nargs="*", default=None, choices=list(WORKLOADS))
    args = parser.parse_args(argv)
    print(report(run(args.workloads)))


if __name__ == "__main__":
    main()
