"""The GPU check's Mamba-Spike figures: the scans, and the training step before/after issue 50.

Scans: `bench.bench_scan`'s inputs and forward + backward (our parallel scan, the radix-2 scan
of round five, mambapy's, the unbind loop, the official-style indexed loop), timed here with a
device sync after each run (bench_scan's own timer reads the host clock only, right for its CPU
runs). Steps: each dataset's model at its official batch and T (N-MNIST 32 at T = 300, DVS
Gesture 16 at T = 500, CIFAR10-DVS 8 at T = 100; frames as the workload makes them for a 16 GB
GPU), one optimizer step (AdamW, clipping) under fp16 autocast + GradScaler (a T4) and bf16
autocast (an A100 / H100), round five's front-end loop and scan (`bench.bench_mamba_spike`
"round five") vs the fused LIF op and today's scan ("now"): step ms (median, synced), samples/s,
peak memory, and the N-MNIST epoch (60,000 samples) and official 100 epochs at that speed.
Sized for at most 4 minutes of an H100 (round five's loop at T = 500 is the long pole).
"""

from __future__ import annotations

import time

import torch

from bench import bench_mamba_spike as bms
from bench import bench_scan
from bench.common import median
from bench.scan_radix2 import radix2_scan
from lib.models.mamba import linear_scan, linear_scan_sequential


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
    candidates = {"parallel (ours)": linear_scan, "radix2 (round five)": radix2_scan,
                  "loop_unbind": linear_scan_sequential, "loop_indexed": bench_scan.loop_indexed}
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
            # the loops step L times (the indexed one's backward is O(L^2)): 2 timed runs
            reps = min(ctx.repeats, 2) if name.startswith("loop") else ctx.repeats
            row[f"{name} ms"] = 1e3 * _timed(run, ctx, reps)
            row[f"{name} max diff"] = diff
        if bench_scan.mambapy_pscan is None:
            row["mambapy ms"] = "not installed"
        rows.append(row)
    return rows


# (dataset, the official batch, the official T); N-MNIST's training set is 60,000 recordings
OFFICIAL = (("nmnist", 32, 300), ("dvsgesture", 16, 500), ("cifar10dvs", 8, 100))
NMNIST_TRAIN, OFFICIAL_EPOCHS = 60_000, 100


def _step_case(dataset: str, ctx):
    """(model config, batch, T) of `dataset` as the workload builds it on a 16 GB GPU (a tiny
    model at T = 4, batch 1 in the dry run)."""
    import dataclasses

    from lib.workloads.mamba_spike import MambaSpikeRunConfig

    cfg = MambaSpikeRunConfig.from_params(dict(
        PLATFORM="colab_t4", DEVICE="auto", DATA_DIR=None, OUT_DIR=None, SAMPLE_DATA=False,
        SMOKE=False, BATCH_SIZE=None, SEED=1, DATASET=dataset))
    model_cfg = cfg.model_config()
    if ctx.dry:
        model_cfg = dataclasses.replace(model_cfg, input_hw=(8, 8), hidden_channels=4,
                                        spike_channels=4, d_model=8, n_layers=1)
        return model_cfg, 1, 4
    return model_cfg, cfg.official_batch(), cfg.frames()


def steps(ctx) -> list[dict]:
    """One training step of each dataset's model at its official batch and T, fp16 and bf16,
    round five vs now: step ms, samples/s, peak memory; N-MNIST's epoch time."""
    from lib.models.mamba_spike import MambaSpike
    from lib.workloads.mamba_spike import GRAD_SCALE

    rows = []
    for dataset, _, _ in OFFICIAL[:1] if ctx.dry else OFFICIAL:
        model_cfg, batch, frames = _step_case(dataset, ctx)
        torch.manual_seed(0)
        model = MambaSpike(model_cfg).to(ctx.device)
        h, w = model_cfg.input_hw
        x = (torch.rand(batch, frames, 2, h, w, device=ctx.device) < 0.05).to(torch.uint8)
        y = torch.randint(0, model_cfg.n_classes, (batch,), device=ctx.device)
        for precision, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            for name in bms.VARIANTS:
                opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
                scaler = (torch.amp.GradScaler(ctx.device, init_scale=GRAD_SCALE)
                          if dtype == torch.float16 else None)

                def step(model=model, x=x, y=y, opt=opt, scaler=scaler, dtype=dtype):
                    with torch.autocast(ctx.device, dtype=dtype):
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                    (scaler.scale(loss) if scaler else loss).backward()
                    if scaler:
                        scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(opt) if scaler else opt.step()
                    if scaler:
                        scaler.update()
                    opt.zero_grad(set_to_none=True)

                with bms.variant(model, name):
                    if ctx.cuda:
                        torch.cuda.reset_peak_memory_stats()
                    # round five's loop: 3 timed steps (seconds each at T = 500), else 5
                    reps = min(ctx.repeats, 3) if name == "round five" else ctx.repeats
                    secs = _timed(step, ctx, reps)
                peak = torch.cuda.max_memory_allocated() / 2**30 if ctx.cuda else float("nan")
                row = {"dataset": dataset, "batch": batch, "T": frames, "precision": precision,
                       "variant": name, "step_ms": 1e3 * secs, "samples_per_s": batch / secs,
                       "peak_gib": peak}
                if dataset == "nmnist":
                    row["nmnist_epoch_min"] = NMNIST_TRAIN / row["samples_per_s"] / 60
                    row["official_100_epochs_h"] = row["nmnist_epoch_min"] * OFFICIAL_EPOCHS / 60
                rows.append(row)
    return rows

