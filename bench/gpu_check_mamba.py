"""The GPU check's Mamba-Spike figures: the scans, and the spiking front-end's time-step loop.

Scans: `bench.bench_scan`'s inputs and forward + backward (our parallel scan, mambapy's, the
unbind loop, the official-style indexed loop), timed here with a device sync after each run
(bench_scan's own timer reads the host clock only, right for its CPU runs). Front-end: the
N-MNIST model's training step (`bench.bench_mamba_spike.setup` / `train_step`) vs the LIF
loops alone (`recurrence`, forward + backward from precomputed currents), both synced; the
aten operations one step dispatches (each at least one kernel launch on a GPU); and the loop
fused by torch.compile, timed the same way.
"""

from __future__ import annotations

import time

import torch

from bench import bench_mamba_spike as bms
from bench import bench_scan
from bench.bench_device_data import OpCount
from bench.common import median
from lib.models.mamba import linear_scan, linear_scan_sequential

FUSED_T = 50


def _timed(fn, ctx, repeats: int) -> float:
    """Median seconds of fn() with a device sync, after one warm-up call."""
    fn()
    ctx.sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ctx.sync()
        times.append(time.perf_counter() - t0)
    return median(times)


def scans(ctx) -> list[dict]:
    """Forward + backward of each scan at Mamba-Spike's lengths (L = T)."""
    candidates = {"parallel (ours)": linear_scan, "loop_unbind": linear_scan_sequential,
                  "loop_indexed": bench_scan.loop_indexed}
    if bench_scan.mambapy_pscan is not None:
        candidates["mambapy"] = bench_scan.mambapy_pscan
    lengths = (8,) if ctx.dry else (100, 300, 500)
    rows = []
    for length in lengths:
        inputs = [t.detach().to(ctx.device).requires_grad_()
                  for t in bench_scan.make_inputs(length, batch=2 if ctx.dry else 8,
                                                  d_inner=16 if ctx.dry else 256)]
        ref = bench_scan.forward_backward(linear_scan_sequential, inputs)
        row = {"L": length}
        for name, scan in candidates.items():
            diff = (bench_scan.forward_backward(scan, inputs) - ref).abs().max().item()
            run = lambda s=scan, i=inputs: bench_scan.forward_backward(s, i)  # noqa: E731
            row[f"{name} ms"] = 1e3 * _timed(run, ctx, ctx.repeats)
            row[f"{name} max diff"] = diff
        if bench_scan.mambapy_pscan is None:
            row["mambapy ms"] = "not installed"
        rows.append(row)
    return rows


def frontend(ctx) -> dict:
    """Share of the training step in the front-end's per-time-step LIF loop; op count; the
    loop compiled (fused) vs eager."""
    batch, frames = (2, 8) if ctx.dry else (16, 300)
    model, x, y, opt = bms.setup(batch, frames)
    if ctx.dry:
        model, x, y, opt = _tiny(frames)
    model, x, y = model.to(ctx.device), x.to(ctx.device), y.to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    step_s = _timed(lambda: bms.train_step(model, x, y, opt), ctx, ctx.repeats)
    with OpCount() as ops:
        bms.train_step(model, x, y, opt)
    h = x.float()
    currents = []
    with torch.no_grad():
        for layer in model.frontend.layers:
            currents.append(layer.currents(h))
            h = layer(h)

    def loops(fn):
        def run():
            for layer, cur in zip(model.frontend.layers, currents, strict=True):
                c = cur.detach().requires_grad_()
                out = fn(layer, c)
                out.backward(torch.ones_like(out))
        return run

    loop_s = _timed(loops(lambda la, c: bms.recurrence(la, c, "unbind")), ctx, ctx.repeats)
    # Fused by torch.compile over the first FUSED_T steps only: Dynamo unrolls the loop, and
    # its compile time grows with T (the whole model at T = 300 compiled for 39 min on a CPU)
    fused_t = min(frames, FUSED_T)
    currents = [c[:, :fused_t] for c in currents]
    short_s = _timed(loops(lambda la, c: bms.recurrence(la, c, "unbind")), ctx, ctx.repeats)
    backend = "eager" if ctx.dry else "inductor"  # the dry run traces only
    fused = torch.compile(bms.recurrence, backend=backend, dynamic=False)
    t0 = time.perf_counter()
    loops(lambda la, c: fused(la, c, "unbind"))()
    ctx.sync()
    compile_s = time.perf_counter() - t0
    fused_s = _timed(loops(lambda la, c: fused(la, c, "unbind")), ctx, ctx.repeats)
    return {"batch": batch, "T": frames, "precision": "fp32" + (
                " (TF32 matmuls)" if torch.backends.cuda.matmul.allow_tf32 else ""),
            "step_ms": 1e3 * step_s,
            "aten_ops_per_step": ops.n, "lif_loop_ms": 1e3 * loop_s,
            "lif_share_of_step": loop_s / step_s,
            "fused_T": fused_t, "lif_loop_eager_ms_at_fused_T": 1e3 * short_s,
            "lif_loop_compiled_ms_at_fused_T": 1e3 * fused_s, "lif_compile_s": compile_s,
            "compile_backend": backend,
            "lif_compiled_speedup": short_s / fused_s if fused_s else float("nan")}


def _tiny(frames: int):
    import dataclasses

    from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig

    torch.manual_seed(0)
    cfg = dataclasses.replace(MambaSpikeConfig.preset("nmnist"), d_model=16, n_layers=1,
                              spike_channels=8)
    model = MambaSpike(cfg)
    x = (torch.rand(2, frames, 2, 34, 34) < 0.05).to(torch.uint8)
    return model, x, torch.randint(0, 10, (2,)), None
