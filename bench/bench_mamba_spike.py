"""Mamba-Spike training step on the CPU: where the time goes, and the front-end loop before/after.

Run: ``python -m bench.bench_mamba_spike`` from the repository root (one process, CPU, one
thread). N-MNIST preset (34x34 frames, C_s 64, d_model 128, 4 blocks), T = 300, batch 8.

Split: each part's forward + backward timed alone on detached inputs with a random output
gradient (the front-end's batched convolutions and pools, its LIF loop over time steps, the
rate interface, the Mamba blocks, the head and loss, then AdamW with clipping), the whole step
beside them. Before/after: the whole training step with the front-end's loop stepping over
``cur[:, t]`` (the first version: each indexed step's backward writes and adds a zero-filled
gradient of the whole sequence) and over ``cur.unbind(1)`` (now), same weights and batch,
paired in each repeat (rotating order); the speed-up is the median of the per-repeat ratios.
About 10 CPU-minutes (the indexed steps take most of it).
"""

from __future__ import annotations

import argparse
import time
import types

import torch
import torch.nn.functional as F
from einops import rearrange

from bench.common import load_average, median
from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig, SpikingConv, causal_rate


def indexed_forward(layer: SpikingConv, x: torch.Tensor) -> torch.Tensor:
    """The front-end layer as first written (snntorch Leaky stepped over `cur[:, t]`)."""
    cur = layer.currents(x)
    mem, spk, spikes = torch.zeros_like(cur[:, 0]), None, []
    for t in range(cur.shape[1]):
        spk, mem = layer.step(cur[:, t], spk, mem)
        spikes.append(spk)
    return torch.stack(spikes, dim=1)


def use_loop(model: MambaSpike, variant: str) -> None:
    """Make every front-end layer step over `cur[:, t]` ("indexed") or `unbind` ("unbind")."""
    for layer in model.frontend.layers:
        if variant == "indexed":
            layer.forward = types.MethodType(indexed_forward, layer)
        else:
            layer.__dict__.pop("forward", None)


def recurrence(layer: SpikingConv, cur: torch.Tensor, variant: str) -> torch.Tensor:
    """The LIF loop alone, from precomputed currents."""
    mem, spk, spikes = torch.zeros_like(cur[:, 0]), None, []
    steps = (cur[:, t] for t in range(cur.shape[1])) if variant == "indexed" else cur.unbind(1)
    for cur_t in steps:
        spk, mem = layer.step(cur_t, spk, mem)
        spikes.append(spk)
    return torch.stack(spikes, dim=1)


def _fwd_bwd(fn, *inputs) -> float:
    """Seconds of fn(*inputs) forward + backward with a random output gradient."""
    inputs = [i.detach().requires_grad_(i.is_floating_point()) for i in inputs]
    t0 = time.perf_counter()
    out = fn(*inputs)
    out.backward(torch.randn_like(out))
    return time.perf_counter() - t0


def setup(batch: int, frames: int, seed: int = 0):
    torch.manual_seed(seed)
    model = MambaSpike(MambaSpikeConfig.preset("nmnist"))
    x = (torch.rand(batch, frames, 2, 34, 34) < 0.05).to(torch.uint8)  # ~N-MNIST density
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    return model, x, y, opt


def train_step(model, x, y, opt) -> float:
    t0 = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def split(model, x, y, opt, variant: str) -> dict[str, float]:
    """Seconds of each part of one training step (forward + backward each)."""
    parts: dict[str, float] = {"front-end convs + pools": 0.0, "front-end LIF loop": 0.0}
    h = x.float()
    with torch.no_grad():  # the inputs of each part
        layer_in = []
        for layer in model.frontend.layers:
            layer_in.append(h)
            h = layer(h)
        spikes = rearrange(h, "b t c h w -> b t (c h w)")
        z = causal_rate(F.linear(spikes, model.input_proj.weight), model.cfg.rate_window)
        z = z + model.input_proj.bias
        z_out = z
        for block in model.blocks:
            z_out = block(z_out)
    for layer, inp in zip(model.frontend.layers, layer_in, strict=True):
        parts["front-end convs + pools"] += _fwd_bwd(layer.currents, inp)
        with torch.no_grad():
            cur = layer.currents(inp)
        parts["front-end LIF loop"] += _fwd_bwd(lambda c, la=layer: recurrence(la, c, variant),
                                                cur)

    def interface(s):
        r = causal_rate(F.linear(s, model.input_proj.weight), model.cfg.rate_window)
        return r + model.input_proj.bias

    def blocks(z):
        for block in model.blocks:
            z = block(z)
        return z

    parts["rate interface + projection"] = _fwd_bwd(interface, spikes)
    parts["Mamba blocks"] = _fwd_bwd(blocks, z)
    parts["head + loss"] = _fwd_bwd(
        lambda z: F.cross_entropy(model.head(model.norm(z.mean(dim=1))), y).reshape(1), z_out)
    opt.zero_grad(set_to_none=False)
    t0 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    parts["AdamW + clipping"] = time.perf_counter() - t0
    opt.zero_grad(set_to_none=True)
    return parts


def run(batch: int = 8, frames: int = 300, repeats: int = 3, split_repeats: int = 1) -> dict:
    model, x, y, opt = setup(batch, frames)
    use_loop(model, "unbind")
    train_step(model, x, y, opt)  # warm-up (allocator, oneDNN primitives)
    splits = {v: [] for v in ("indexed", "unbind")}
    steps = {v: [] for v in ("indexed", "unbind")}
    for r in range(repeats):
        order = ("indexed", "unbind") if r % 2 == 0 else ("unbind", "indexed")
        for variant in order:
            use_loop(model, variant)
            steps[variant].append(train_step(model, x, y, opt))
            if r < split_repeats:
                splits[variant].append(split(model, x, y, opt, variant))
    use_loop(model, "unbind")
    ratios = [a / b for a, b in zip(steps["indexed"], steps["unbind"], strict=True)]
    split_rows = []
    for name in splits["unbind"][0]:
        split_rows.append({"part": name, **{f"{v} s": median([s[name] for s in splits[v]])
                                             for v in splits}})
    return {"batch": batch, "frames": frames, "repeats": repeats,
            "split_repeats": split_repeats, "steps": steps,
            "ratios": ratios, "speedup": median(ratios), "split": split_rows}


def report(res: dict) -> str:
    lines = [f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average "
             f"{load_average()}; N-MNIST preset, batch {res['batch']}, T = {res['frames']}; "
             f"whole step: {res['repeats']} paired repeats (median), split: "
             f"{res['split_repeats']} (median)",
             "", f"{'part (forward + backward)':<30}{'indexed s':>12}{'unbind s':>12}"
             f"{'share now':>12}"]
    total = sum(r["unbind s"] for r in res["split"])
    for row in res["split"]:
        lines.append(f"{row['part']:<30}{row['indexed s']:>12.2f}{row['unbind s']:>12.2f}"
                     f"{row['unbind s'] / total:>11.0%}")
    lines.append(f"{'sum of the parts':<30}{sum(r['indexed s'] for r in res['split']):>12.2f}"
                 f"{total:>12.2f}")
    lines.append(f"{'whole training step':<30}{median(res['steps']['indexed']):>12.2f}"
                 f"{median(res['steps']['unbind']):>12.2f}")
    per = " ".join(f"{r:.2f}" for r in res["ratios"])
    lines += ["", f"whole step, indexed / unbind: {res['speedup']:.2f}x (per repeat: {per}); "
                  f"target >= 2x: {'PASS' if res['speedup'] >= 2 else 'FAIL'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--split-repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    print(report(run(args.batch, args.frames, args.repeats, args.split_repeats)))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
