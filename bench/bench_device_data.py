"""Host work per batch of the in-memory datasets, before (DataLoader) and after (on the device),
and whether the host can feed each GPU of the platform table (FLOP-based estimates).

Run: ``python -m bench.bench_device_data`` from the repository root (one process, CPU, one
thread; the offline samples, written to a temporary folder). Host CPU-ms per batch is the
process CPU time (`time.process_time`) over the timed batches, median of the repeats:

- before: `lib.data.common.make_loader` (torchvision transforms per sample, one process);
- after, host only: `DeviceLoader` with its tensors on the meta device (shapes, no data): the
  Python and dispatcher work a GPU run does on the host, plus an estimated 5 us per CUDA
  kernel launch for the aten ops it issues (counted);
- after, on this CPU: `DeviceLoader` on the CPU, which also does the augmentation arithmetic
  (what a CPU-only run pays).

Capacity = batch / host seconds per batch (one core). Demand = the samples/s a GPU consumes:
a stated fraction of its datasheet peak over the training FLOPs per sample (counted by
`bench.bench_gpu.step_flops`). Both are estimates until a GPU run measures them.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from bench import bench_gpu
from bench.bench_gpu import step_flops
from bench.common import load_average, median
from lib.data import fashion
from lib.data.cifar import STATS
from lib.data.cifar import build_datasets as build_cifar_datasets
from lib.data.common import make_loader
from lib.data.on_device import Augment, DeviceLoader, images_and_labels
from lib.kernels.count import OpCount
from lib.runtime.device import Probe, choose_device
from lib.runtime.platforms import get_platform

CPU = choose_device("cpu", get_platform("colab_t4"), Probe(), environ={})
LAUNCH_US = 5.0  # a CUDA kernel launch on the host, order of magnitude (estimate)
FRACTION = 0.4  # of the datasheet peak a training step reaches (stated assumption)
# Dense bf16/fp16 peak TFLOP/s per device (datasheets); the platforms' accelerators and an A100.
GPUS = {"T4 (colab_t4, kaggle_t4x2 per GPU)": 65.0, "P100 (kaggle_p100)": 18.7,
        "TPU v5e chip (colab_tpu, kaggle_tpu per chip)": 197.0, "A100": 312.0}


def _datasets(name: str, folder: Path):
    if name == "fashion_mnist":
        train, _, _ = fashion.build_datasets(folder, sample=True)
        return train, (fashion.MEAN,), (fashion.STD,), Augment()
    train, _, _ = build_cifar_datasets("cifar10", folder, sample=True)
    mean, std = STATS["cifar10"]
    return train, mean, std, Augment(padding=4, flip=True)


def _cpu_ms(loader, n: int, repeats: int) -> float:
    """Median process CPU-ms per batch over `repeats` passes of `n` batches."""
    out = []
    for r in range(repeats):
        loader.sampler.set_epoch(r)
        it = iter(loader)
        next(it)  # the iterator's start-up apart
        t0 = time.process_time()
        for _ in range(n):
            next(it)
        out.append((time.process_time() - t0) * 1000 / n)
    return median(out)


def measure(name: str, folder: Path, batch: int, n: int, repeats: int) -> dict:
    train, mean, std, augment = _datasets(name, folder)
    before = make_loader(train, batch, CPU, train=True, seed=0)
    images, labels = images_and_labels(train)

    def device_loader(device):
        return DeviceLoader(images, labels, batch, torch.device(device), train=True, seed=0,
                            mean=mean, std=std, augment=augment)

    meta = device_loader("meta")
    meta.sampler.set_epoch(0)
    it = iter(meta)
    next(it)
    with OpCount() as ops:
        next(it)
    host = _cpu_ms(meta, n, repeats)
    return {"workload": name, "batch": batch, "before_ms": _cpu_ms(before, n, repeats),
            "after_host_ms": host, "ops": ops.n,
            "after_host_launch_ms": host + ops.n * LAUNCH_US / 1000,
            "after_cpu_ms": _cpu_ms(device_loader("cpu"), n, repeats)}


def demand(rows: list[dict]) -> list[dict]:
    """Per workload and GPU: host samples/s (before, after) over the GPU's samples/s."""
    cases = {c.name.split()[0]: c for c in bench_gpu._cases()}  # looked up when called
    out = []
    for r in rows:
        case = cases["fashion_mnist" if r["workload"] == "fashion_mnist" else "cifar10"]
        per_sample = step_flops(case, 16) / 16
        for gpu, tflops in GPUS.items():
            need = FRACTION * tflops * 1e12 / per_sample
            out.append({"workload": r["workload"], "gpu": gpu,
                        "gflop_per_sample": per_sample / 1e9, "gpu_samples_s": need,
                        "before": r["batch"] / r["before_ms"] * 1000 / need,
                        "after": r["batch"] / r["after_host_launch_ms"] * 1000 / need})
    return out


def report(rows: list[dict], needs: list[dict], n: int, repeats: int) -> str:
    lines = [f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average "
             f"{load_average()}; offline samples, {n} batches x {repeats} repeats, median", "",
             "| workload | batch | before: DataLoader CPU-ms/batch | after: host CPU-ms/batch "
             "(meta device) | aten ops/batch | after: host + 5 us/launch (estimate) | after, "
             "augmenting on this CPU | before / after (host) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['batch']} | {r['before_ms']:.2f} | "
                     f"{r['after_host_ms']:.3f} | {r['ops']} | "
                     f"{r['after_host_launch_ms']:.3f} | {r['after_cpu_ms']:.2f} | "
                     f"{r['before_ms'] / r['after_host_launch_ms']:.0f}x |")
    lines += ["", f"Host capacity / GPU demand, one host core (ESTIMATES: demand = {FRACTION:.0%} "
              "of the datasheet bf16/fp16 peak over the counted training FLOPs per sample; "
              ">= 1 means the host keeps up):", "",
              "| workload | GPU | GFLOP/sample | GPU samples/s (est.) | before (DataLoader, "
              "1 process) | after (on device) |", "|---|---|---|---|---|---|"]
    for d in needs:
        lines.append(f"| {d['workload']} | {d['gpu']} | {d['gflop_per_sample']:.3g} | "
                     f"{d['gpu_samples_s']:,.0f} | {d['before']:.2f} | {d['after']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(w, Path(tmp), args.batch, args.batches, args.repeats)
                for w in ("fashion_mnist", "cifar10")]
    print(report(rows, demand(rows), args.batches, args.repeats))


if __name__ == "__main__":
    main()
