"""The GPU check's measurements, one function per check; `bench.gpu_check` groups them into parts.

Each check takes a `Ctx` (device, sizes, scratch folder) and a workload, and returns a row
(a plain dict: what was run, the figures, `ok` where there is a pass/fail criterion). The
figures come from the existing benchmarks where they already measure it: `bench.bench_gpu`
(step time, peak memory, FLOPs), `bench.bench_compile` (eager vs torch.compile),
`bench.bench_scan` and `bench.bench_mamba_spike` (scans, the training step before/after issue 50).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import gpu_check_work as work
from bench.common import ROOT, median, workload_batch

# Loss over the first steps vs the fp32 run (TF32 off): |loss - loss_fp32| / |loss_fp32|.
# bf16 keeps 8 mantissa bits (relative rounding 2^-9 = 2e-3 per op) and fp16 11 (5e-4); a
# loss sums many rounded products, so the first step is allowed 10x that rounding, and the
# mean over the first FIRST_STEPS steps (trajectories part as updates compound) 5e-2.
FIRST_STEPS = 5
TOL_FIRST = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-5}
TOL_MEAN = 5e-2
# Kill-and-resume: with deterministic algorithms the resumed run's weights equal the
# uninterrupted run's; where an op has no deterministic kernel (listed in the row), this
# relative tolerance on the weights applies instead.
TOL_RESUME = 1e-4
TIMING = ("seconds", "samples_per_s", "compile_seconds")


@dataclass
class Ctx:
    device: str  # "cuda" or "cpu" (the dry run)
    root: Path  # scratch: sample data and run folders
    dry: bool
    steps: int  # training steps of a long run ("a few hundred" on a GPU)
    precision_steps: int
    timed_steps: int
    repeats: int

    @property
    def tiny(self) -> bool:
        return self.dry

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def make_ctx(device: str, root: Path, dry: bool) -> Ctx:
    if dry:
        return Ctx(device, root, True, steps=4, precision_steps=2, timed_steps=1, repeats=1)
    return Ctx(device, root, False, steps=300, precision_steps=20, timed_steps=20, repeats=5)


def _fresh(ctx: Ctx, name: str) -> str:
    """A run folder name not used before in this scratch root (a used one would resume)."""
    i = 0
    while (ctx.root / f"{name}{i}").exists():
        i += 1
    (ctx.root / f"{name}{i}").mkdir(parents=True)
    return f"{name}{i}"


def _batches_per_epoch(workload: str, ctx: Ctx) -> int:
    """Train batches of one epoch of the sample at this run's batch size."""
    s, _ = work.session_for(workload, ctx.root, _fresh(ctx, "probe"), ctx.device, "native", 1,
                            None, ctx.tiny)
    _, (train, _) = work.task_and_loaders(workload, s)
    return len(train)


@functools.cache
def _epoch_len(workload: str, root: Path, device: str, tiny: bool) -> int:
    return _batches_per_epoch(workload, Ctx(device, root, tiny, 0, 0, 0, 0))


def _plan(workload: str, ctx: Ctx, steps: int) -> tuple[int, int]:
    """(epochs, max_batches) giving about `steps` training steps on the sample."""
    per = min(_epoch_len(workload, ctx.root, ctx.device, ctx.tiny), 2 if ctx.dry else 50)
    return max(1, math.ceil(steps / per)), per


# --- precision -----------------------------------------------------------------------------
def precision(workload: str, ctx: Ctx) -> list[dict]:
    """The first steps at fp32 (TF32 off), at the GPU's own precision and at the T4's."""
    epochs, per = _plan(workload, ctx, ctx.precision_steps)
    runs = {p: work.train_run(workload, ctx.root, _fresh(ctx, f"prec-{p}"), device=ctx.device,
                              precision=p, epochs=epochs, max_batches=per, tiny=ctx.tiny,
                              scale=True)
            for p in ("fp32", "native", "fp16")}
    ref = runs["fp32"]["losses"]
    rows = []
    for setting, r in runs.items():
        losses = r["losses"]
        rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref, strict=False)]
        skipped = sum(1 for a, b in zip(r["scales"], r["scales"][1:], strict=False) if b < a)
        name = r["precision"] + (" + GradScaler" if r["scales"] else "")
        tol = TOL_FIRST.get(r["precision"], TOL_FIRST["bf16"])
        finite = all(math.isfinite(v) for v in losses)
        first, mean = (rel[0] if rel else math.nan), (
            sum(rel[:FIRST_STEPS]) / len(rel[:FIRST_STEPS]) if rel else math.nan)
        rows.append({"workload": workload, "setting": setting, "precision": name,
                     "tf32": r["tf32"], "batch": r["batch"], "steps": r["steps"],
                     "first_loss": losses[0] if losses else math.nan,
                     "rel_diff_first": first, f"rel_diff_mean{FIRST_STEPS}": mean,
                     "scaler_skipped_steps": skipped if r["scales"] else None,
                     "finite": finite,
                     "ok": finite and first <= tol and mean <= TOL_MEAN})
    return rows


# --- a few hundred steps --------------------------------------------------------------------
def train_long(workload: str, ctx: Ctx) -> list[dict]:
    """`ctx.steps` steps through the notebook's calls at the GPU's and the T4's precision."""
    epochs, per = _plan(workload, ctx, ctx.steps)
    rows = []
    for setting in ("native", "fp16"):
        start = time.perf_counter()
        r = work.train_run(workload, ctx.root, _fresh(ctx, f"long-{setting}"), device=ctx.device,
                           precision=setting, epochs=epochs, max_batches=per, tiny=ctx.tiny)
        hist = r["history"]
        rates = [h["samples_per_s"] for h in hist[1:]] or [h["samples_per_s"] for h in hist]
        losses = r["losses"]
        tail = losses[-per:] if losses else [math.nan]
        rows.append({"workload": workload, "setting": setting, "precision": r["precision"],
                     "batch": r["batch"], "steps": r["steps"], "epochs": len(hist),
                     "first_loss": losses[0] if losses else math.nan,
                     "last_epoch_loss": sum(tail) / len(tail),
                     "finite": all(math.isfinite(v) for v in losses),
                     "samples_per_s": median(rates), "peak_memory_mb": r["peak_memory_mb"],
                     "wall_s": time.perf_counter() - start,
                     "ok": all(math.isfinite(v) for v in losses)})
    return rows


# --- kill and resume, GPU <-> CPU checkpoints (worker subprocesses) -------------------------
def _worker(ctx: Ctx, workload: str, run: str, device: str, epochs: int, per: int,
            env: dict | None = None, minutes: float = 1e-9) -> dict:
    args = [sys.executable, "-m", "bench.gpu_check_work", "--workload", workload,
            "--root", str(ctx.root), "--run", run, "--device", device, "--epochs", str(epochs),
            "--max-batches", str(per), "--checkpoint-minutes", str(minutes)]
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(args + (["--tiny"] if ctx.tiny else []), cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=540)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1]) if lines and proc.returncode == 0 else {}
    return {"returncode": proc.returncode, "stderr": proc.stderr[-2000:], **out}


def _weights_diff(a: dict, b: dict) -> float:
    """Largest |a - b| / (|b|max + tiny) over the model tensors of two checkpoints."""
    worst = 0.0
    for k, v in b["model"].items():
        if v.is_floating_point():
            d = (a["model"][k].float() - v.float()).abs().max().item()
            worst = max(worst, d / (v.float().abs().max().item() + 1e-12))
    return worst


def _history(state: dict) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in TIMING} for h in state["history"]]


def kill_resume(workload: str, ctx: Ctx) -> dict:
    """SIGKILL a run mid-epoch (lib.base.faults), run it again (it resumes), compare with a run
    never killed: weights and metrics, under deterministic algorithms."""
    epochs, per = _plan(workload, ctx, max(4, ctx.precision_steps))
    per = max(per, 2)
    # train.step fires after backward, before the update: a kill there keeps the checkpoint
    # of the step before, mid-epoch unless kill_at - 1 ends an epoch
    kill_at = epochs * per // 2 + (1 if per > 2 else 0)
    ref_run, run = _fresh(ctx, "ref"), _fresh(ctx, "kill")
    ref = _worker(ctx, workload, ref_run, ctx.device, epochs, per)
    killed = _worker(ctx, workload, run, ctx.device, epochs, per,
                     env={"TA_FAILPOINTS": f"train.step@{kill_at}"})
    resumed = _worker(ctx, workload, run, ctx.device, epochs, per)
    row = {"workload": workload, "steps": epochs * per, "killed_at_step": kill_at,
           "killed_returncode": killed["returncode"], "resumed_returncode": resumed["returncode"],
           "nondeterministic_ops": "; ".join(resumed.get("nondeterministic_ops", [])) or "none"}
    if ref["returncode"] or resumed["returncode"]:
        row.update(ok=False, error=(ref["stderr"] or resumed["stderr"])[-500:])
        return row
    a, b = work.final_checkpoint(resumed["out_dir"]), work.final_checkpoint(ref["out_dir"])
    diff = _weights_diff(a, b)
    same_history = _history(a) == _history(b)
    exact = diff == 0.0
    expected = epochs * per - kill_at + 1  # the killed step again, then the rest
    row.update(resumed_steps=resumed["steps"], expected_steps=expected, weights_rel_diff=diff,
               identical=exact, same_metrics=same_history, checkpoint=a["file"],
               ok=killed["returncode"] == -9 and resumed["steps"] == expected
               and (exact and same_history or diff <= TOL_RESUME))
    return row


def cross_device(workload: str, ctx: Ctx) -> list[dict]:
    """A two-epoch run SIGKILLed at the start of epoch 2 on one device, resumed from its
    checkpoint on the other (the CPU half in a process that sees no GPU:
    CUDA_VISIBLE_DEVICES=""); EPOCHS stays 2, as a changed EPOCHS is another experiment."""
    rows = []
    cpu_env = {"CUDA_VISIBLE_DEVICES": ""}
    pairs = ((ctx.device, "cpu"), ("cpu", ctx.device))
    for first, second in pairs[:1] if ctx.device == "cpu" else pairs:  # the dry run: one
        _, per = _plan(workload, ctx, 2)
        run = _fresh(ctx, f"x-{first}-{second}")
        kill = {"TA_FAILPOINTS": f"train.step@{per + 1}"}
        one = _worker(ctx, workload, run, first, 2, per,
                      dict(kill, **(cpu_env if first == "cpu" else {})))
        two = _worker(ctx, workload, run, second, 2, per, cpu_env if second == "cpu" else None)
        hist = two.get("history", [])
        ok = one["returncode"] == -9 and two["returncode"] == 0 and len(hist) == 2 \
            and two["steps"] == per and all(math.isfinite(v) for v in two["losses"])
        rows.append({"workload": workload, "written_on": first, "resumed_on": second,
                     "epochs": len(hist), "steps_after_resume": two.get("steps"),
                     "loss_after_resume": hist[-1]["train_loss"] if hist else math.nan, "ok": ok,
                     **({} if ok else {"error": (two["stderr"] or one["stderr"])[-500:]})})
    return rows


# --- speed: samples/s, memory, FLOP/s; the loader -------------------------------------------
def _step_cases(ctx: Ctx):
    from bench.bench_gpu import _cases
    from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig
    from lib.models.mshnet import MSHNet

    cases = dict(zip(work.WORKLOADS, [_cases()[i] for i in (0, 1, 3, 2)], strict=True))
    if ctx.tiny:
        cfg = dataclasses.replace(MambaSpikeConfig.preset("nmnist"), d_model=16, n_layers=1,
                                  spike_channels=8)
        cases["mamba_spike"] = dataclasses.replace(
            cases["mamba_spike"], model=lambda: MambaSpike(cfg),
            batch=lambda n: ((torch.rand(n, 8, 2, 34, 34) > 0.97).to(torch.uint8),
                             torch.randint(0, 10, (n,))))
        cases["mshnet"] = dataclasses.replace(
            cases["mshnet"], model=MSHNet,
            batch=lambda n: (torch.randn(n, 3, 64, 64), (torch.rand(n, 1, 64, 64) > 0.99).float()))
    return cases


def step_speed(workload: str, ctx: Ctx) -> list[dict]:
    """bench_gpu's step on synthetic tensors of the real shapes, at the GPU's and T4's
    precision: samples/s, peak memory, fraction of the datasheet peak FLOP/s."""
    from bench.bench_gpu import measure_step, peak_tflops

    case = _step_cases(ctx)[workload]
    batch = 2 if ctx.tiny else workload_batch(case.key, "colab_t4")
    name = torch.cuda.get_device_name(0) if ctx.cuda else "CPU"
    rows = []
    for setting in ("native", "fp16"):
        s, _ = work.session_for(workload, ctx.root, _fresh(ctx, "speed"), ctx.device, setting,
                                1, None, ctx.tiny)
        dtype = s.choice.precision.dtype
        row = measure_step(case, batch, torch.device(ctx.device), dtype, ctx.timed_steps,
                           warmup=1 if ctx.dry else 3)
        peak = peak_tflops(name, dtype)
        row.update(workload=workload, setting=setting, precision=s.choice.precision.name,
                   fraction_of_peak=row["achieved_tflops"] / peak if peak else None)
        rows.append(row)
    return rows


def loader_fed(workload: str, ctx: Ctx) -> dict:
    """Step time with the workload's real loader (sample data, its DataLoader or on-device
    loader, Backend.to_device) vs the same batches already on the device."""
    from bench.bench_compile import _step
    from lib.training.loop import Backend, _io

    s, _ = work.session_for(workload, ctx.root, _fresh(ctx, "loader"), ctx.device, "native", 1,
                            None, ctx.tiny)
    task, (train, _) = work.task_and_loaders(workload, s)
    backend = Backend(s.choice)
    model = task.model.train()
    n = min(len(train), max(2, ctx.timed_steps))

    def batches():
        train.sampler.set_epoch(0)
        for i, b in enumerate(train):
            if i >= n:
                break
            yield _io(backend.to_device(b))

    for x, y in batches():  # warm-up: allocator, cuDNN plans, loader workers
        _step(model, task.optimizer, x, y, task.loss_fn, backend)
    ctx.sync()
    t0 = time.perf_counter()
    for x, y in batches():
        _step(model, task.optimizer, x, y, task.loss_fn, backend)
    ctx.sync()
    with_loader = (time.perf_counter() - t0) / n
    cached = list(batches())
    ctx.sync()
    t0 = time.perf_counter()
    for x, y in cached:
        _step(model, task.optimizer, x, y, task.loss_fn, backend)
    ctx.sync()
    on_device = (time.perf_counter() - t0) / n
    return {"workload": workload, "loader": type(train).__name__, "batch": s.batch_size,
            "batches": n, "ms_step_with_loader": 1e3 * with_loader,
            "ms_step_on_device": 1e3 * on_device, "gpu_fed": on_device / with_loader}


# --- eager vs torch.compile -------------------------------------------------------------------
@contextlib.contextmanager
def _eager_backend(on: bool):
    """The dry run compiles with backend="eager": Dynamo traces, no code generation."""
    if not on:
        yield
        return
    original = torch.nn.Module.compile
    torch.nn.Module.compile = functools.partialmethod(original, backend="eager")
    try:
        yield
    finally:
        torch.nn.Module.compile = original


def compiled(workload: str, ctx: Ctx) -> dict:
    """bench_compile.measure on this device: compile seconds and steady-state speed-up."""
    from bench import bench_compile

    name = {"optimizer_study": "cifar10"}.get(workload, workload)
    choice = bench_compile.device_choice(ctx.device)
    batch = 2 if ctx.tiny else bench_compile.default_batch(name, choice)
    # bench_compile's default T: the compile time grows with T (2,346 s at T = 300 on a CPU)
    frames = 4 if ctx.tiny else 20
    with _eager_backend(ctx.dry):
        row = bench_compile.measure(name, ctx.timed_steps, ctx.repeats, batch, frames, choice)
    row["workload"] = workload
    row["backend"] = "eager (dry run)" if ctx.dry else "inductor"
    return row
