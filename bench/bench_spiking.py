"""The spiking front-end's recurrence fused (lib/kernels, issue 50) against the loop it replaced.

Run: ``python -m bench.bench_spiking`` from the repository root (CPU, one thread; defaults: the
N-MNIST preset's front-end, batch 16, T = 300, 3 paired repeats; ``--step`` adds the aten ops of
one whole training step). Forward + backward of the three SpikingConv layers (convs, pools and
the LIF recurrence) with a random output gradient, per variant:

- ``snntorch loop``: the loop as it was before issue 50 (snntorch's Leaky stepped over
  ``cur.unbind(1)``, autograd recording every step): the baseline;
- ``reference``: lib/kernels' reference loop (plain torch, autograd per step);
- ``portable``: the fused op's portable path (what the CPU, MPS and a P100 run);
- ``triton``: the CUDA path's aten ops only, counted in a subprocess under Triton's CPU
  interpreter (its time there says nothing about a GPU).

Columns: aten ops (lib/kernels.count.OpCount, which counts inside the fused op), process
CPU seconds (median of the paired repeats, order rotating) and the ratio to the baseline in the
same repeat, the same for the LIF recurrence alone (from precomputed currents, the op's layout
copies included), bytes autograd saves for the backward, and the peak resident memory the forward +
backward adds (each variant in a fresh subprocess: its peak resident size, reset just before
with /proc/self/clear_refs, less its resident size then; Linux).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types

import torch
from einops import rearrange

from bench.common import ROOT, load_average, median
from lib.kernels import LIF_PATH_ENV, lif_multistep
from lib.kernels.count import OpCount
from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig, SpikingConv

VARIANTS = ("snntorch loop", "reference", "portable")


def snntorch_forward(layer: SpikingConv, x: torch.Tensor) -> torch.Tensor:
    """SpikingConv.forward before issue 50: snntorch's Leaky stepped over cur.unbind(1)."""
    cur = layer.currents(x)
    mem, spk, spikes = torch.zeros_like(cur[:, 0]), None, []
    for cur_t in cur.unbind(1):
        spk, mem = layer.step(cur_t, spk, mem)
        spikes.append(spk)
    return torch.stack(spikes, dim=1)


def use(model: MambaSpike, variant: str) -> None:
    """Make the model's front-end run `variant` (VARIANTS or "triton")."""
    for layer in model.frontend.layers:
        layer.__dict__.pop("forward", None)
        if variant == "snntorch loop":
            layer.forward = types.MethodType(snntorch_forward, layer)
    os.environ[LIF_PATH_ENV] = "auto" if variant == "snntorch loop" else variant


def setup(batch: int, frames: int, seed: int = 0):
    torch.manual_seed(seed)
    model = MambaSpike(MambaSpikeConfig.preset("nmnist"))
    x = (torch.rand(batch, frames, 2, 34, 34) < 0.05).float()  # about N-MNIST's density
    return model, x


def frontend_pass(model: MambaSpike, x: torch.Tensor) -> None:
    out = model.frontend(x)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(0)))


def layer_currents(model: MambaSpike, x: torch.Tensor) -> list[torch.Tensor]:
    """Each front-end layer's feed-forward currents (B, T, C, H, W), detached."""
    out = []
    with torch.no_grad():
        for layer in model.frontend.layers:
            out.append(layer.currents(x))
            x = layer(x)
    return out


def recurrence_pass(model: MambaSpike, currents: list[torch.Tensor], variant: str) -> None:
    """The LIF recurrence alone, forward + backward, from precomputed currents: the old loop
    on (B, T, C, H, W) as it ran, the op with its layout copies in and out."""
    for layer, cur in zip(model.frontend.layers, currents, strict=True):
        cur = cur.detach().requires_grad_()
        if variant == "snntorch loop":
            mem, spk, spikes = torch.zeros_like(cur[:, 0]), None, []
            for cur_t in cur.unbind(1):
                spk, mem = layer.step(cur_t, spk, mem)
                spikes.append(spk)
            out = torch.stack(spikes, dim=1)
        else:
            b, _, _, h, w = cur.shape
            out = rearrange(lif_multistep(rearrange(cur, "b t c h w -> t (b h w) c"),
                                          layer.rec.weight.flatten(1), layer.rec.bias,
                                          layer.beta, layer.threshold, layer.slope),
                            "t (b h w) c -> b t c h w", b=b, h=h, w=w)
        out.backward(torch.ones_like(out))


def ops(model, x, step: bool) -> dict:
    """Aten ops of a front-end forward + backward, and of a whole training step if `step`."""
    with OpCount() as front:
        frontend_pass(model, x)
    out = {"frontend_ops": front.n}
    if step:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
        y = torch.zeros(x.shape[0], dtype=torch.long)
        with OpCount() as whole:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        out["step_ops"] = whole.n
    return out


def saved_bytes(model, x) -> int:
    """Bytes of the distinct storages autograd saves in one front-end forward."""
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.frontend(x)
    return sum(storages.values())


def _status_bytes(key: str) -> int:
    """VmRSS or VmHWM (the peak resident size) of this process, from /proc (Linux)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def _child(args) -> None:
    """One variant in this fresh process: peak memory (and ops), as JSON on stdout."""
    torch.set_num_threads(1)
    model, x = setup(args.batch, args.frames)
    use(model, args.child)
    out = {}
    if args.child == "triton":
        out.update(ops(model, x, args.step))
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident size starts again from the current one
        before = _status_bytes("VmRSS")
        frontend_pass(model, x)
        out["peak_added"] = _status_bytes("VmHWM") - before
    print(json.dumps(out))


def _in_child(variant: str, args, env: dict | None = None) -> dict:
    cmd = [sys.executable, "-m", "bench.bench_spiking", "--child", variant, "--batch",
           str(args.batch), "--frames", str(args.frames)] + (["--step"] if args.step else [])
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def run(batch: int = 16, frames: int = 300, repeats: int = 3, step: bool = False,
        triton: bool = True, memory: bool = True) -> dict:
    torch.set_num_threads(1)
    args = argparse.Namespace(batch=batch, frames=frames, step=step)
    rows = {v: {"variant": v, "cpu_s": [], "lif_cpu_s": []} for v in VARIANTS}
    model, x = setup(batch, frames)
    currents = layer_currents(model, x)
    for v in VARIANTS:
        use(model, v)
        rows[v].update(ops(model, x, step), saved_bytes=saved_bytes(model, x))
    for r in range(repeats):
        for v in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
            use(model, v)
            model.zero_grad(set_to_none=True)
            t0 = time.process_time()
            frontend_pass(model, x)
            rows[v]["cpu_s"].append(time.process_time() - t0)
            t0 = time.process_time()
            recurrence_pass(model, currents, v)
            rows[v]["lif_cpu_s"].append(time.process_time() - t0)
    base, lif_base = rows["snntorch loop"]["cpu_s"], rows["snntorch loop"]["lif_cpu_s"]
    for row in rows.values():
        row["ratio"] = median([b / s for b, s in zip(base, row["cpu_s"], strict=True)])
        row["cpu_s_median"] = median(row["cpu_s"])
        row["lif_ratio"] = median([b / s for b, s in zip(lif_base, row["lif_cpu_s"],
                                                         strict=True)])
        row["lif_cpu_s_median"] = median(row["lif_cpu_s"])
        if memory:
            row.update(_in_child(row["variant"], args))
    out = list(rows.values())
    if triton:
        out.append({"variant": "triton", **_in_child("triton", args, {"TRITON_INTERPRET": "1"})})
    os.environ.pop(LIF_PATH_ENV, None)
    return {"batch": batch, "frames": frames, "repeats": repeats, "rows": out,
            "torch": torch.__version__, "load": load_average()}


def report(res: dict) -> str:
    lines = [f"torch {res['torch']}, 1 thread, load average {res['load']}; N-MNIST front-end "
             f"(3 SpikingConv layers), batch {res['batch']}, T = {res['frames']}, forward + "
             f"backward; CPU s: median of {res['repeats']} paired repeats", "",
             f"{'variant':<16}{'aten ops':>10}{'step ops':>10}{'CPU s':>8}{'base/this':>10}"
             f"{'LIF CPU s':>10}{'base/this':>10}{'saved MB':>10}{'peak MB':>9}"]

    def cell(r, key, fmt, width, scale=1):
        value = "-" if key not in r else format(r[key] / scale if scale != 1 else r[key], fmt)
        return f"{value:>{width}}"

    for r in res["rows"]:
        lines.append(f"{r['variant']:<16}{cell(r, 'frontend_ops', ',', 10)}"
                     f"{cell(r, 'step_ops', ',', 10)}{cell(r, 'cpu_s_median', '.2f', 8)}"
                     f"{cell(r, 'ratio', '.2f', 10)}{cell(r, 'lif_cpu_s_median', '.2f', 10)}"
                     f"{cell(r, 'lif_ratio', '.2f', 10)}{cell(r, 'saved_bytes', '.0f', 10, 2**20)}"
                     f"{cell(r, 'peak_added', '.0f', 9, 2**20)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step", action="store_true", help="also count one whole training step")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args)
    t0 = time.perf_counter()
    print(report(run(args.batch, args.frames, args.repeats, args.step)))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
