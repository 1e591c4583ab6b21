"""Mamba-Spike's training step on the CPU, issue 50 against round five, in the same process.

Run: ``python -m bench.bench_mamba_spike`` from the repository root (one thread). N-MNIST
preset (34x34 frames, C_s 64, d_model 128, 4 blocks), batch 16, T = 300, AdamW with clipping.
Two variants of the same model, weights and batch:

- ``round five``: the front-end's snntorch loop (`bench.bench_spiking.snntorch_forward`,
  autograd recording each of the 300 steps of each layer) and the radix-2 scan
  (`bench.scan_radix2`): the step as it was before issue 50;
- ``now``: the fused LIF op (lib/kernels; its portable path on the CPU) and today's scan.

Columns: aten ops per training step (`lib.kernels.count.OpCount`, which counts inside the
fused op), on the portable path and on the CUDA path (the Triton kernels under Triton's CPU
interpreter, in a subprocess with TRITON_INTERPRET=1, each launch counted as one op; AdamW and
clipping with foreach=True, as on CUDA; at batch 2 and 8 x 8 frames, where the count is the
full size's and the interpreter takes seconds, not minutes); CPU seconds per step (process
time, paired repeats in rotating order, median) and the ratio round five / now per repeat
(median); peak MB, the
largest total of live tensor storages during one step (`bench.bench_scan.PeakMemory`; the
fused op's own per-step temporaries inside it are not seen, its outputs and saved tensors are).
``--frames`` and ``--batch`` change the size; ``--count-only`` prints the op counts alone;
``--max-grad`` prints the largest |gradient| of an fp32 step instead (the parameters', and of
every tensor the backward pass makes that scales with the loss: found by running it for the
loss and for 2 x the loss), what sets fp16's first loss scale (`GRAD_SCALE` of the workload).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import types

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from bench.bench_scan import PeakMemory
from bench.bench_spiking import snntorch_forward
from bench.common import ROOT, load_average, median
from bench.scan_radix2 import radix2_scan
from lib.kernels import LIF_PATH_ENV
from lib.kernels.count import OpCount
from lib.models import mamba
from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig

VARIANTS = ("round five", "now")


def setup(batch: int, frames: int, seed: int = 0, foreach: bool | None = None,
          hw: int = 34):
    """The N-MNIST model (at `hw` x `hw` frames: 34 is N-MNIST's), a batch of ~N-MNIST
    density and its AdamW (foreach as given)."""
    torch.manual_seed(seed)
    model = MambaSpike(MambaSpikeConfig.preset("nmnist", input_hw=(hw, hw)))
    x = (torch.rand(batch, frames, 2, hw, hw) < 0.05).to(torch.uint8)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, foreach=foreach)
    return model, x, y, opt


def train_step(model, x, y, opt, foreach: bool | None = None) -> float:
    """One optimizer step as the training loop takes it (fp32); returns its wall seconds."""
    t0 = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


@contextlib.contextmanager
def variant(model: MambaSpike, name: str):
    """Run `model` as `name` inside: round five's loop and scan, or today's (as built)."""
    saved = mamba.SCANS["parallel"]
    if name == "round five":
        mamba.SCANS["parallel"] = radix2_scan
        for layer in model.frontend.layers:
            layer.forward = types.MethodType(snntorch_forward, layer)
    try:
        yield
    finally:
        mamba.SCANS["parallel"] = saved
        for layer in model.frontend.layers:
            layer.__dict__.pop("forward", None)


def step_ops(batch: int, frames: int, name: str = "now", foreach: bool | None = None,
             hw: int = 34, warm: bool = True) -> int:
    """Aten ops of one training step after a first one (AdamW's state exists), on the LIF path
    this process chooses (LIF_PATH_ENV); with `warm` False, of the first step (which also
    creates AdamW's state: an upper bound of every later step's). The count depends on T
    alone, not on the batch (from 2) or the frame size: tests count at batch 2, 8 x 8."""
    model, x, y, opt = setup(batch, frames, foreach=foreach, hw=hw)
    with variant(model, name):
        if warm:
            train_step(model, x, y, opt, foreach)
        with OpCount() as ops:
            train_step(model, x, y, opt, foreach)
    return ops.n


def cuda_path_ops(batch: int, frames: int, hw: int = 34, warm: bool = True) -> int:
    """`step_ops` on the CUDA path: the Triton kernels under the interpreter, foreach AdamW
    and clipping, in a subprocess (TRITON_INTERPRET must be set before triton is imported)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", LIF_PATH_ENV: "triton",
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "bench.bench_mamba_spike", "--child", "--batch", str(batch),
           "--frames", str(frames), "--hw", str(hw)] + ([] if warm else ["--first"])
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.splitlines()[-1])["ops"]


def count(batch: int, frames: int, cuda: bool = True) -> dict:
    """Ops per step: round five and now on the portable path, now on the CUDA path (if
    `cuda`: a subprocess under the interpreter, about a minute)."""
    os.environ[LIF_PATH_ENV] = "portable"
    try:
        out = {"round five ops": step_ops(batch, frames, "round five"),
               "portable ops": step_ops(batch, frames),
               "portable ops, foreach": step_ops(batch, frames, foreach=True),
               "portable ops, foreach, batch 2 at 8x8": step_ops(2, frames, foreach=True, hw=8)}
    finally:
        os.environ.pop(LIF_PATH_ENV, None)
    # at batch 2 and 8 x 8 frames: the interpreter takes minutes a step at full size, and the
    # count is the same (the portable counts above and the one just before show it)
    out["CUDA path ops"] = cuda_path_ops(2, frames, hw=8) if cuda else None
    return out


def run(batch: int = 16, frames: int = 300, repeats: int = 3, cuda: bool = True) -> dict:
    """Ops, CPU seconds per step (paired) and peak MB of both variants."""
    torch.set_num_threads(1)
    res = {"batch": batch, "frames": frames, "repeats": repeats,
           **count(batch, frames, cuda)}
    model, x, y, opt = setup(batch, frames)
    secs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for v in VARIANTS:
        with variant(model, v):
            train_step(model, x, y, opt)  # warm-up (allocator, oneDNN primitives)
            with PeakMemory() as mem:
                train_step(model, x, y, opt)
            res[f"{v} peak MB"] = mem.peak / 2**20
    for r in range(repeats):
        for v in VARIANTS[r % 2:] + VARIANTS[:r % 2]:
            with variant(model, v):
                t0 = time.process_time()
                train_step(model, x, y, opt)
                secs[v].append(time.process_time() - t0)
    for v in VARIANTS:
        res[f"{v} CPU s"] = median(secs[v])
    res["ratios"] = [a / b for a, b in zip(secs["round five"], secs["now"], strict=True)]
    res["speedup"] = median(res["ratios"])
    return res


class _Maxes(TorchDispatchMode):
    """The max |value| of each floating-point tensor every op makes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[float] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
                self.values.append(t.detach().abs().max().item())
        return out


def max_grad(batch: int, frames: int, seed: int = 0) -> dict:
    """Largest |gradient| of one fp32 step: of the parameters, and of any tensor in the
    backward pass that doubles when the loss does (a gradient, scaled by a GradScaler)."""
    model, x, y, _ = setup(batch, frames, seed)
    loss = F.cross_entropy(model(x), y)
    with _Maxes() as once:
        loss.backward(retain_graph=True)
    params = max(p.grad.abs().max().item() for p in model.parameters())
    model.zero_grad(set_to_none=True)  # the same ops again (no accumulation into .grad)
    with _Maxes() as twice:
        loss.backward(torch.tensor(2.0))  # the same ops as the first, from 2 x the loss
    grads = [a for a, b in zip(once.values, twice.values, strict=True)
             if a > 0 and abs(b / a - 2) < 1e-3]
    return {"batch": batch, "frames": frames, "seed": seed, "params": params,
            "backward": max(grads)}


def report(res: dict) -> str:
    lines = [f"torch {torch.__version__}, 1 thread, load average {load_average()}; N-MNIST "
             f"preset, batch {res['batch']}, T = {res['frames']}; one training step (AdamW + "
             f"clipping); CPU s: median of {res.get('repeats', 0)} paired repeats", ""]
    lines.append(f"aten ops per step: round five {res['round five ops']:,}; now, portable path "
                 f"{res['portable ops']:,} ({res['portable ops, foreach']:,} with foreach "
                 f"AdamW, {res['portable ops, foreach, batch 2 at 8x8']:,} so at batch 2, 8 x 8 "
                 f"frames); now, CUDA path (Triton interpreted, foreach; batch 2, 8 x 8) "
                 + (f"{res['CUDA path ops']:,}" if res["CUDA path ops"] else "not counted"))
    if "now CPU s" in res:
        per = " ".join(f"{r:.2f}" for r in res["ratios"])
        lines += [f"CPU s per step: round five {res['round five CPU s']:.2f}, now "
                  f"{res['now CPU s']:.2f}; round five / now {res['speedup']:.2f}x (per "
                  f"repeat: {per})",
                  f"peak MB of a step: round five {res['round five peak MB']:.0f}, now "
                  f"{res['now peak MB']:.0f}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hw", type=int, default=34, help=argparse.SUPPRESS)
    parser.add_argument("--first", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count-only", action="store_true", help="the op counts alone")
    parser.add_argument("--max-grad", type=int, default=0, metavar="SEEDS",
                        help="largest |gradient| of an fp32 step, for this many seeds")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.child:  # cuda_path_ops' subprocess: LIF path and interpreter set by the parent
        print(json.dumps({"ops": step_ops(args.batch, args.frames, foreach=True, hw=args.hw,
                                          warm=not args.first)}))
        return
    start = time.perf_counter()
    if args.max_grad:
        for seed in range(args.max_grad):
            r = max_grad(args.batch, args.frames, seed)
            print(f"batch {r['batch']}, T = {r['frames']}, seed {seed}: max |grad| of the "
                  f"parameters {r['params']:.3g}, of any gradient in the backward pass "
                  f"{r['backward']:.3g}", flush=True)
        return
    if args.count_only:
        res = {"batch": args.batch, "frames": args.frames, **count(args.batch, args.frames)}
    else:
        res = run(args.batch, args.frames, args.repeats)
    print(report(res))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
