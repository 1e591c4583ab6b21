"""What gradient accumulation costs per sample: one global batch as 1, 2, 4 and 8 micro-batches.

Run: ``python -m bench.bench_accumulation`` (the CPU, and CUDA when there is a GPU; about
2 minutes on 2 CPU cores, well under 2 on a GPU). ``--devices cpu`` or ``cuda`` picks one.

Each row times `lib.training.backend.Backend.train_step`, the loop's optimizer step, over a
fixed global batch held on the device (no loader: the step alone), split into `accumulation`
micro-batches; seconds per sample are the median over repeats, variants interleaved in
rotating order, and the ratio is to accumulation 1 measured in the same repeat. The last row
of each model is accumulation 1 with MICRO_BATCH = "auto", whose every step first keeps the
RNG states and the model's buffers to redo the step from should memory run out: its cost.
Models: the Fashion-MNIST CNN (Adadelta, as its notebook) and, on CUDA, the study's CIFAR
ResNet-18 (SGD), at the precision `lib.runtime.device` chooses for the device.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from bench.common import median
from lib.models.cnn import CNN, CNNConfig
from lib.models.resnet import CifarResNet18, ResNetConfig
from lib.runtime.device import Probe, choose_device, probe
from lib.runtime.platforms import get_platform
from lib.training.backend import Backend
from lib.training.batch import BatchPlan
from lib.training.loop import Task

ACCUMULATION = (1, 2, 4, 8)
# (model, input shape, global batch on the CPU, on CUDA)
MODELS = {"Fashion-MNIST CNN": ((1, 28, 28), 256, 4096),
          "CIFAR ResNet-18": ((3, 32, 32), None, 512)}


def build(name: str, device: torch.device) -> Task:
    torch.manual_seed(0)
    if name == "Fashion-MNIST CNN":
        model = CNN(CNNConfig()).to(device)
        optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    else:
        model = CifarResNet18(ResNetConfig()).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Task(model.train(), nn.functional.cross_entropy, optimizer)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_steps(backend: Backend, task: Task, batch: list, steps: int) -> float:
    """Seconds per sample of `steps` optimizer steps over `batch`."""
    _sync(backend.device)
    t0 = time.perf_counter()
    for _ in range(steps):
        backend.train_step(task, batch)
    _sync(backend.device)
    return (time.perf_counter() - t0) / (steps * len(batch[-1]))


def measure(name: str, kind: str, steps: int, repeats: int, global_batch: int | None = None,
            warmup: int = 2) -> list[dict]:
    """Rows of one model on one device kind: each accumulation, then auto at 1."""
    choice = choose_device(kind, get_platform("local"), probe() if kind == "cuda" else Probe(),
                           environ={})
    device = choice.torch_device
    shape, cpu_batch, cuda_batch = MODELS[name]
    total = global_batch or (cuda_batch if kind == "cuda" else cpu_batch)
    g = torch.Generator().manual_seed(0)
    batch = [torch.randn(total, *shape, generator=g).to(device),
             torch.randint(0, 10, (total,), generator=g).to(device)]
    variants = [(a, False) for a in ACCUMULATION if total % a == 0] + [(1, True)]
    setups = {}
    for acc, auto in variants:
        plan = BatchPlan(total, micro=total // acc, auto=auto, where=choice.where)
        setups[acc, auto] = (Backend(choice, device, plan=plan), build(name, device))
        time_steps(*setups[acc, auto], batch, warmup)  # allocator, cuDNN plans, lazy state
    times: dict = {v: [] for v in variants}
    ratios: dict = {v: [] for v in variants}
    for r in range(repeats):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        got = {v: time_steps(*setups[v], batch, steps) for v in order}
        for v in variants:
            times[v].append(got[v])
            ratios[v].append(got[v] / got[1, False])
    return [{"device": choice.where or kind, "precision": choice.precision.name, "model": name,
             "global_batch": total, "accumulation": acc, "micro": total // acc,
             "auto": auto, "s_per_sample": median(times[acc, auto]),
             "ratio": median(ratios[acc, auto])} for acc, auto in variants]


def table(rows: list[dict]) -> str:
    lines = ["| device | model | global batch | accumulation | micro-batch | us per sample | "
             "ratio to 1 |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        acc = f"{r['accumulation']}" + (' (MICRO_BATCH "auto")' if r["auto"] else "")
        lines.append(f"| {r['device']} ({r['precision']}) | {r['model']} | {r['global_batch']} "
                     f"| {acc} | {r['micro']} | {1e6 * r['s_per_sample']:.1f} | "
                     f"{r['ratio']:.2f} |")
    return "\n".join(lines)


STEPS = {"cpu": 3, "cuda": 20}  # optimizer steps per timing: about a second each


def run(devices: list[str] | None = None, steps: int | None = None, repeats: int = 5,
        global_batch: int | None = None) -> list[dict]:
    devices = devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    rows = []
    for kind in devices:
        for name, (_, cpu_batch, _) in MODELS.items():
            if kind == "cpu" and cpu_batch is None and global_batch is None:
                continue  # ResNet-18: seconds a step on a CPU; its GPU row says enough
            rows += measure(name, kind, steps or STEPS[kind], repeats, global_batch)
    return rows


def oom_probe(width: int = 1 << 22) -> dict:
    """A real out-of-memory error on a GPU, met and halved by MICRO_BATCH = "auto": a step
    whose activations hold about 3 x 4 x `width` bytes a sample (Linear 16 -> `width`, ReLU,
    Linear -> 2), over a global batch of 4 x what the GPU's memory holds at that rate (a power
    of two). Two steps: the first finds the micro-batch, the second takes it."""
    choice = choose_device("cuda", get_platform("local"), probe(), environ={})
    device = choice.torch_device
    memory = torch.cuda.get_device_properties(device).total_memory
    total = 1 << (4 * memory // (12 * width)).bit_length()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 2)).to(device)
    task = Task(model, nn.functional.cross_entropy,
                torch.optim.SGD(model.parameters(), lr=0.01))
    said = []
    backend = Backend(choice, device, plan=BatchPlan(total, auto=True, where=choice.where),
                      on_plan=lambda old, new: said.append(f"{old.micro} -> {new.micro}"))
    batch = [torch.randn(total, 16, device=device), torch.randint(0, 2, (total,), device=device)]
    t0 = time.perf_counter()
    losses = [float(backend.train_step(task, batch)[0]) / total for _ in range(2)]
    torch.cuda.synchronize()
    return {"gpu": choice.where, "precision": choice.precision.name, "memory_gb": memory / 1e9,
            "global_batch": total, "halved": said, "micro": backend.plan.micro,
            "accumulation": backend.plan.accumulation, "losses": losses,
            "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"])
    parser.add_argument("--steps", type=int, help="per timing (default: 3 on the CPU, 20 on CUDA)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--oom-probe", action="store_true",
                        help="on CUDA, also meet a real out-of-memory error (oom_probe)")
    args = parser.parse_args()
    print(table(run(args.devices, args.steps, args.repeats)), flush=True)
    if args.oom_probe:
        print(oom_probe())


if __name__ == "__main__":
    main()
