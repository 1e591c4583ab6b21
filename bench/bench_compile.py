"""torch.compile vs eager: each workload's training step, CPU or GPU (`COMPILE = "auto"`'s table).

Run: ``python -m bench.bench_compile [--workloads fashion_mnist cifar10 ...]`` from the
repository root (one process, CPU, one thread), or ``python -m bench.bench_compile --device
cuda`` on a GPU runtime (Colab T4: the run's precision, fp16 with a GradScaler or bf16, and
the platform's batch sizes). For each workload, two copies of the same model (same weights,
optimizer, batch): one eager, one compiled in place with `nn.Module.compile()` (what
`lib.runtime.compile` does), each stepped as `lib.training.loop.Backend` steps a run (autocast,
scaler). The
compiled copy's first step (tracing and code generation) is timed apart; then `repeats`
rounds of `steps` steps each, eager and compiled in rotating order, and the speed-up is the
median of the per-round ratios of steps/s. The loss of the first step of both copies is
printed: compiled code computes the same thing, within float rounding.
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F

from bench.bench_gpu import _platform_for, _sync
from bench.common import load_average, median, workload_batch
from lib.runtime import compile
from lib.runtime.device import DeviceChoice, choose_device
from lib.training.loop import Backend

WORKLOADS = ("fashion_mnist", "cifar10", "mshnet", "mamba_spike")
PLATFORM_KEY = {"cifar10": "optimizer_study"}  # the platform tables' name, where it differs


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


def device_choice(device: str) -> DeviceChoice:
    """The run's DeviceChoice for `device` ("cpu" or "cuda"): its precision, compile support."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here; run this on a GPU "
                         "runtime (e.g. Colab T4) or pass --device cpu.")
    name = torch.cuda.get_device_name(0) if device == "cuda" else ""
    choice = choose_device(device, _platform_for(name), environ={})
    if not choice.compile_ok:
        raise SystemExit(f"--device {device}: torch.compile cannot run here: "
                         f"{choice.compile_note}; nothing to measure.")
    return choice


def default_batch(workload: str, choice: DeviceChoice) -> int | None:
    """On a GPU the platform's batch size for the workload (None: `build`'s CPU default)."""
    if choice.type != "cuda":
        return None
    platform = _platform_for(torch.cuda.get_device_name(0))
    return workload_batch(PLATFORM_KEY.get(workload, workload), platform.name)


def _step(model, opt, x, y, loss_fn, backend: Backend) -> torch.Tensor:
    """One training step as the loop takes it (autocast, scaler); the detached loss."""
    with backend.autocast():
        loss = loss_fn(model(x), y)
    backend.backward_step(loss, model, opt, None)
    return loss.detach()


def _timed(fn, device: torch.device) -> tuple[object, float]:
    """(fn(), seconds until `device` has finished it)."""
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def _timed_steps(model, opt, x, y, loss_fn, backend: Backend, steps: int) -> float:
    def run():
        for _ in range(steps):
            _step(model, opt, x, y, loss_fn, backend)

    return steps / _timed(run, backend.device)[1]


def _to(device: torch.device, *items):
    return [i.to(device) if isinstance(i, torch.Tensor | torch.nn.Module) else i for i in items]


def measure(workload: str, steps: int, repeats: int, batch: int | None = None,
            frames: int = 20, choice: DeviceChoice | None = None) -> dict:
    choice = choice or device_choice("cpu")
    dev = choice.torch_device
    model, make_opt, x, y, loss_fn, label = build(workload, batch, frames)
    model, x, y, loss_fn = _to(dev, model, x, y, loss_fn)
    compiled = compile.apply(copy.deepcopy(model), True)  # as a run compiles it
    eager_opt, compiled_opt = make_opt(model.parameters()), make_opt(compiled.parameters())
    eager_bk, compiled_bk = Backend(choice), Backend(choice)  # a GradScaler each, as two runs
    model.train()
    compiled.train()
    eager_loss, eager_first = _timed(lambda: _step(model, eager_opt, x, y, loss_fn, eager_bk),
                                     dev)
    compiled_loss, compile_s = _timed(
        lambda: _step(compiled, compiled_opt, x, y, loss_fn, compiled_bk), dev)
    _step(compiled, compiled_opt, x, y, loss_fn, compiled_bk)  # any recompilation now
    eager, comp, ratios = [], [], []
    for r in range(repeats):
        pair = {}
        for name in (("eager", "compiled") if r % 2 == 0 else ("compiled", "eager")):
            m, o, bk = ((model, eager_opt, eager_bk) if name == "eager"
                        else (compiled, compiled_opt, compiled_bk))
            pair[name] = _timed_steps(m, o, x, y, loss_fn, bk, steps)
        eager.append(pair["eager"])
        comp.append(pair["compiled"])
        ratios.append(pair["compiled"] / pair["eager"])
    return {"workload": workload, "label": label, "eager_steps_s": median(eager),
            "compiled_steps_s": median(comp), "speedup": median(ratios), "ratios": ratios,
            "first_step_eager_s": eager_first, "first_step_compiled_s": compile_s,
            "loss_eager": float(eager_loss), "loss_compiled": float(compiled_loss)}


def describe(choice: DeviceChoice) -> str:
    """Where the table was measured: the GPU and precision, or the CPU's threads."""
    if choice.type == "cuda":
        return f"{torch.cuda.get_device_name(0)}, {choice.precision.name}"
    return f"CPU, {torch.get_num_threads()} thread(s)"


def report(rows: list[dict], steps: int, repeats: int, where: str) -> str:
    lines = [f"torch {torch.__version__}, {where}, load average "
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
    parser.add_argument("--frames", type=int, default=20,
                        help="Mamba-Spike's T (its compile time grows with T; N-MNIST's is 300)")
    parser.add_argument("--batch", type=int, default=None,
                        help="every workload's batch (default: the CPU sizes of `build`; on "
                             "CUDA the platform's batch sizes)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    # code generation in this process: a pool of compile workers would take every core
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch.set_num_threads(args.threads)
    choice = device_choice(args.device)
    rows = []
    for w in args.workloads:
        start = time.perf_counter()
        batch = args.batch or default_batch(w, choice)
        rows.append(measure(w, args.steps, args.repeats, batch, args.frames, choice))
        print(f"[{w}: {time.perf_counter() - start:.0f} s]", flush=True)
    print(report(rows, args.steps, args.repeats, describe(choice)))


if __name__ == "__main__":
    main()
