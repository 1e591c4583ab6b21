"""torch.compile vs eager: each workload's training step on this CPU (`COMPILE = "auto"`'s table).

Run: ``python -m bench.bench_compile [--workloads fashion_mnist cifar10 ...]`` from the
repository root (one process, CPU, one thread). For each workload, two copies of the same
model (same weights, optimizer, batch): one eager, one compiled in place with
`nn.Module.compile()` (what `lib.compile` does). The compiled copy's first step (tracing and
code generation) is timed apart; then `repeats` rounds of `steps` steps each, eager and
compiled in rotating order, and the speed-up is the median of the per-round ratios of
steps/s. The loss of the first step of both copies is printed: compiled code computes the same
thing, within float rounding.
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F

from bench.common import load_average, median
from lib import compile

WORKLOADS = ("fashion_mnist", "cifar10", "mshnet", "mamba_spike")


def build(workload: str, batch: int | None = None, frames: int = 20):
    """(model, optimizer factory, inputs, target, loss_fn, label) as the workload trains it."""
    torch.manual_seed(0)
    if workload == "fashion_mnist":
        from lib.models.cnn import CNN, CNNConfig

        b = batch or 128
        model = CNN(CNNConfig())
        return (model, lambda p: torch.optim.Adadelta(p, lr=1.0), torch.randn(b, 1, 28, 28),
                torch.randint(0, 10, (b,)), F.cross_entropy, f"CNN, batch {b}")
    if workload == "cifar10":
        from lib.models.resnet import CifarResNet18, ResNetConfig

        b = batch or 32
        model = CifarResNet18(ResNetConfig(num_classes=10))
        return (model, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-4),
                torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,)), F.cross_entropy,
                f"ResNet-18, batch {b}")
    if workload == "mshnet":
        from lib.losses.sls import SLSLoss
        from lib.models.mshnet import MSHNet, MSHNetConfig

        b = batch or 4
        model = MSHNet(MSHNetConfig())
        target = (torch.rand(b, 1, 256, 256) < 0.01).float()
        return (model, lambda p: torch.optim.Adagrad(p, lr=0.05), torch.randn(b, 3, 256, 256),
                target, SLSLoss(), f"MSHNet 256 px, batch {b}")
    if workload == "mamba_spike":
        from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig

        b = batch or 2
        model = MambaSpike(MambaSpikeConfig.preset("nmnist"))
        x = (torch.rand(b, frames, 2, 34, 34) < 0.05).to(torch.uint8)
        return (model, lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=1e-4), x,
                torch.randint(0, 10, (b,)), F.cross_entropy,
                f"Mamba-Spike N-MNIST, T = {frames}, batch {b}")
    raise ValueError(f"unknown workload {workload!r}; expected one of {WORKLOADS}")


def _step(model, opt, x, y, loss_fn) -> float:
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


def _timed_steps(model, opt, x, y, loss_fn, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        _step(model, opt, x, y, loss_fn)
    return steps / (time.perf_counter() - t0)


def measure(workload: str, steps: int, repeats: int, batch: int | None = None,
            frames: int = 20) -> dict:
    model, make_opt, x, y, loss_fn, label = build(workload, batch, frames)
    compiled = compile.apply(copy.deepcopy(model), True)  # as a run compiles it
    eager_opt, compiled_opt = make_opt(model.parameters()), make_opt(compiled.parameters())
    model.train()
    compiled.train()
    t0 = time.perf_counter()
    eager_loss = _step(model, eager_opt, x, y, loss_fn)
    eager_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled_loss = _step(compiled, compiled_opt, x, y, loss_fn)
    compile_s = time.perf_counter() - t0
    _step(compiled, compiled_opt, x, y, loss_fn)  # a second step: any recompilation now
    eager, comp, ratios = [], [], []
    for r in range(repeats):
        pair = {}
        for name in (("eager", "compiled") if r % 2 == 0 else ("compiled", "eager")):
            m, o = (model, eager_opt) if name == "eager" else (compiled, compiled_opt)
            pair[name] = _timed_steps(m, o, x, y, loss_fn, steps)
        eager.append(pair["eager"])
        comp.append(pair["compiled"])
        ratios.append(pair["compiled"] / pair["eager"])
    return {"workload": workload, "label": label, "eager_steps_s": median(eager),
            "compiled_steps_s": median(comp), "speedup": median(ratios), "ratios": ratios,
            "first_step_eager_s": eager_first, "first_step_compiled_s": compile_s,
            "loss_eager": eager_loss, "loss_compiled": compiled_loss}


def report(rows: list[dict], steps: int, repeats: int) -> str:
    lines = [f"torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s), load average "
             f"{load_average()}; {repeats} paired rounds of {steps} steps, medians",
             "", "| workload | model, batch | eager steps/s | compiled steps/s | compiled / "
             "eager | per round | first step eager s | first step compiled s (compile) | "
             "first loss eager / compiled |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per = " ".join(f"{v:.2f}" for v in r["ratios"])
        lines.append(f"| {r['workload']} | {r['label']} | {r['eager_steps_s']:.3g} | "
                     f"{r['compiled_steps_s']:.3g} | {r['speedup']:.2f} | {per} | "
                     f"{r['first_step_eager_s']:.2f} | {r['first_step_compiled_s']:.0f} | "
                     f"{r['loss_eager']:.5f} / {r['loss_compiled']:.5f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--frames", type=int, default=20, help="Mamba-Spike's T")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    # code generation in this process: a pool of compile workers would take every core
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch.set_num_threads(args.threads)
    rows = []
    for w in args.workloads:
        start = time.perf_counter()
        rows.append(measure(w, args.steps, args.repeats, frames=args.frames))
        print(f"[{w}: {time.perf_counter() - start:.0f} s]", flush=True)
    print(report(rows, args.steps, args.repeats))


if __name__ == "__main__":
    main()
