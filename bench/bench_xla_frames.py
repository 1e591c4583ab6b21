"""How compile time on XLA grows with T: Mamba-Spike's N-MNIST preset (real layer sizes) at
batch 2, its first training steps on torch_xla's CPU client, at several T in one process.

Run in the XLA environment, XLA's default flags (no XLA_FLAGS):
``PJRT_DEVICE=CPU .venv-xla/bin/python -m bench.bench_xla_frames --frames 20 300``.

Each T: a fresh model, AdamW (its state made before the first step, as `fit` does), the TPU
notebook's bf16 autocast, three steps through `Backend.train_step`; printed per T: graphs
compiled and seconds compiling (torch_xla's CompileTime) in steps 1-3, the wall seconds of
step 1 and of step 3, and the lowered forward+backward's HLO instructions (whole model, and
the spiking front-end alone: the rest is the Mamba blocks, whose scan has log5(T) levels and
a sequential tail of at most 20 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _hlo_instructions(tensors) -> int:
    import torch_xla

    text = torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))
    return sum(" = " in line for line in text.splitlines())


def measure(frames: int, batch: int = 2) -> dict:
    import torch
    import torch_xla.debug.metrics as met

    from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig
    from lib.runtime import xla
    from lib.runtime.device import Probe, choose_device
    from lib.runtime.platforms import get_platform
    from lib.training.backend import Backend
    from lib.training.loop import Task

    dev = xla.device()
    choice = choose_device("xla", get_platform("colab_tpu"), Probe(xla_installed=True),
                           environ={})
    torch.manual_seed(0)
    model = MambaSpike(MambaSpikeConfig.preset("nmnist")).to(dev)
    task = Task(model, torch.nn.functional.cross_entropy,
                torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05))
    backend = Backend(choice)
    backend.prepare(model, task.optimizer)
    x = (torch.rand(batch, frames, 2, 34, 34) < 0.1).float()
    y = torch.randint(0, 10, (batch,))
    with backend.autocast():  # graph sizes, lowered only (nothing compiled or run)
        front = model.frontend(x.to(dev))
        loss = task.loss_fn(model(x.to(dev)), y.to(dev))
    params = [p for p in model.parameters() if p.requires_grad]
    whole = _hlo_instructions(torch.autograd.grad(loss, params, allow_unused=True,
                                                  materialize_grads=True))
    front_n = None
    if front is not None:
        fparams = list(model.frontend.parameters())
        front_n = _hlo_instructions(torch.autograd.grad(front.float().sum(), fparams))
    del loss, front
    xla.sync()
    compiles0, seconds0 = xla.compile_count(), _compile_seconds(met)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        backend.train_step(task, [x.to(dev), y.to(dev)])
        xla.sync()
        torch.tensor(0.0).to(dev).cpu()  # wait for the step
        walls.append(time.perf_counter() - t0)
    return {"T": frames, "compiles": xla.compile_count() - compiles0,
            "compile_s": _compile_seconds(met) - seconds0, "step1_s": walls[0],
            "step3_s": walls[2], "hlo_model": whole, "hlo_frontend": front_n}


def _compile_seconds(met) -> float:
    data = met.metric_data("CompileTime")
    return data[1] / 1e9 if data else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, nargs="+", default=[20, 300])
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch

    torch.set_num_threads(1)
    rows = [measure(t, args.batch) for t in args.frames]
    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r} (empty: XLA's defaults)")
    print("| T | graphs compiled, steps 1-3 | s compiling | step 1 wall s | step 3 wall s | "
          "HLO instr., model fwd+bwd | HLO instr., front-end fwd+bwd |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['T']} | {r['compiles']} | {r['compile_s']:.1f} | {r['step1_s']:.1f} | "
              f"{r['step3_s']:.2f} | {r['hlo_model']} | {r['hlo_frontend']} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
