"""The GPU check's training runs: each workload trained through the notebooks' own calls.

`train_run(...)` builds the workload's config from notebook parameters (the offline sample
data, the Colab T4 notebook's batch sizes), starts a `lib.session` Session, forces the
precision asked for ("native": what `lib.runtime.device` picks for this GPU; "fp16": the T4's fp16
autocast + GradScaler; "bf16"; "fp32": autocast off and TF32 off, the reference) and trains
through the workload's own `train(session)` (`Session.fit` -> `lib.training.loop.fit`), recording
every step's loss (and GradScaler scale) by wrapping `lib.training.backend.Backend.train_step`.

Run as a module it is the worker that `bench.gpu_check` starts in a subprocess for the
kill-and-resume and GPU <-> CPU checks (a real SIGKILL through `lib.base.faults`, a real CPU-only
process through ``CUDA_VISIBLE_DEVICES=""``); it prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

import torch

from bench.common import captured
from lib.runtime.device import Precision
from lib.training.loop import Backend

WORKLOADS = ("fashion_mnist", "optimizer_study", "mamba_spike", "mshnet")
PRECISIONS = {"fp32": Precision(None, False), "fp16": Precision(torch.float16, True),
              "bf16": Precision(torch.bfloat16, False)}
# Tiny sizes for the CPU dry run: every code path, seconds per workload.
TINY = {
    "fashion_mnist": dict(BATCH_SIZE=32),
    "optimizer_study": dict(BATCH_SIZE=8),
    "mamba_spike": dict(BATCH_SIZE=4, N_TIME_BINS=8, D_MODEL=16, N_LAYERS=1, SPIKE_CHANNELS=8),
    "mshnet": dict(BATCH_SIZE=2),
}
# The T4 notebook's batch sizes are the platform tables'; the study's run is one grid cell.
EXTRA = {"optimizer_study": dict(OPTIMIZER="sgd", SEED=0, WARMUP_EPOCHS=1)}


def config(workload: str, root: Path, run: str, device: str, epochs: int, tiny: bool,
           checkpoint_minutes: float = 10.0):
    """The workload's RunConfig from notebook parameters (sample data under root/data)."""
    from lib.workloads import fashion_mnist, mamba_spike, mshnet, optimizer_study

    cls = {"fashion_mnist": fashion_mnist.FashionConfig,
           "optimizer_study": optimizer_study.OptimizerStudyConfig,
           "mamba_spike": mamba_spike.MambaSpikeRunConfig,
           "mshnet": mshnet.MSHNetRunConfig}[workload]
    params = dict(PLATFORM="colab_t4", DEVICE=device, SAMPLE_DATA=True, SMOKE=False,
                  DATA_DIR=str(root / "data" / workload), OUT_DIR=str(root / run / workload),
                  EPOCHS=epochs, COMPILE=False, CHECKPOINT_MINUTES=checkpoint_minutes,
                  **EXTRA.get(workload, {}), **(TINY[workload] if tiny else {}))
    return cls.from_params(params)


def with_precision(choice, precision: str):
    """`choice` with the precision asked for ("native" keeps lib.runtime.device's)."""
    if precision == "native":
        return choice
    chosen = PRECISIONS[precision]
    if choice.type == "cpu" and chosen.dtype is not None:
        # The dry run's stand-in: fp16/bf16 convolutions on a CPU take minutes a step; fp32
        # with the GradScaler still runs every line of the scaler path.
        chosen = Precision(None, chosen.scaler)
    return dataclasses.replace(choice, precision=chosen,
                               tf32=choice.tf32 and precision != "fp32")


def set_tf32(on: bool) -> None:
    """TF32 matmuls/convolutions (lib.runtime.device turns them on for Ampere+ CUDA; off for
    fp32)."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def session_for(workload: str, root: Path, run: str, device: str, precision: str, epochs: int,
                max_batches: int | None, tiny: bool, checkpoint_minutes: float = 10.0):
    """A started Session (the run's device choice, precision forced) and the train function."""
    from lib import session
    from lib.workloads import fashion_mnist, mamba_spike, mshnet, optimizer_study

    cfg = config(workload, root, run, device, epochs, tiny, checkpoint_minutes)
    with captured():
        s = session.start(cfg, runtime="local", announce=False)
        if workload == "optimizer_study":  # the grid's one cell, its own session
            s = optimizer_study.cell_session(s, optimizer_study.plan(s.cfg)[0])
    s.choice = with_precision(s.choice, precision)
    set_tf32(s.choice.tf32)
    s.max_batches = max_batches
    train = {"fashion_mnist": fashion_mnist.train, "optimizer_study": optimizer_study.train,
             "mamba_spike": mamba_spike.train, "mshnet": mshnet.train}[workload]
    return s, train


def task_and_loaders(workload: str, s):
    """(task, (train, test) loaders) exactly as the workload's `train(s)` builds them."""
    from lib.data.cifar import STATS
    from lib.data.on_device import Augment
    from lib.workloads import fashion_mnist, mamba_spike, mshnet, optimizer_study

    if workload == "optimizer_study":  # optimizer_study.train's own lines
        train_set, test_set, info = optimizer_study.datasets(s)
        mean, std = STATS[s.cfg.dataset]
        loaders = s.device_loaders(train_set, test_set, mean, std, Augment(padding=4, flip=True))
        task, _ = optimizer_study.build_task(s.cfg, s.device, info["num_classes"],
                                             len(loaders[0]))
        return task, loaders
    module = {"fashion_mnist": fashion_mnist, "mamba_spike": mamba_spike, "mshnet": mshnet}
    loaders = module[workload].loaders(s)
    return module[workload].build_task(s.cfg, s.device)[0], loaders


@contextlib.contextmanager
def step_log(scale: bool = False):
    """Every training step's loss (a device tensor, read at the end) and, with `scale`, the
    GradScaler's scale after the step (a sync per step)."""
    log: dict[str, list] = {"loss": [], "scale": []}
    original = Backend.train_step

    def logged(self, task, batch):
        loss_sum, n = original(self, task, batch)
        log["loss"].append(loss_sum.detach().float() / n)  # the step's mean loss
        if scale and self.scaler is not None:
            log["scale"].append(float(self.scaler.get_scale()))
        return loss_sum, n

    Backend.train_step = logged
    try:
        yield log
    finally:
        Backend.train_step = original


def train_run(workload: str, root: Path, run: str, *, device: str, precision: str = "native",
              epochs: int = 2, max_batches: int | None = None, tiny: bool = False,
              checkpoint_minutes: float = 10.0, scale: bool = False) -> dict:
    """Train `workload` in root/run; its per-step losses, history and what it ran with."""
    s, train = session_for(workload, root, run, device, precision, epochs, max_batches, tiny,
                           checkpoint_minutes)
    if s.choice.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with step_log(scale) as log, captured():
        history = train(s)
    losses = torch.stack(log["loss"]).cpu().tolist() if log["loss"] else []
    peak = torch.cuda.max_memory_allocated() / 2**20 if s.choice.type == "cuda" else None
    return {"workload": workload, "device": s.choice.type, "where": s.choice.where,
            "precision": s.choice.precision.name, "tf32": s.choice.tf32,
            "batch": s.batch_size, "steps": len(losses), "losses": losses,
            "scales": log["scale"], "history": history, "peak_memory_mb": peak,
            "out_dir": str(s.out_dir)}


def final_checkpoint(out_dir: str | Path) -> dict:
    """The newest checkpoint of a run folder, loaded on the CPU."""
    newest = sorted((Path(out_dir) / "checkpoints").glob("ckpt-*.pt"))[-1]
    state = torch.load(newest, map_location="cpu", weights_only=True)
    state["file"] = newest.name
    return state


def deterministic() -> list[str]:
    """torch's deterministic algorithms (warn only where an op has none); returns the list
    the warnings of such ops are appended to."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    caught: list[str] = []
    original = warnings.showwarning

    def keep(message, category, *args, **kwargs):
        if "deterministic" in str(message):
            caught.append(str(message).splitlines()[0][:200])
        return original(message, category, *args, **kwargs)

    warnings.showwarning = keep
    return caught


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one training run of the GPU check (worker)")
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--precision", default="native", choices=("native", *PRECISIONS))
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument("--checkpoint-minutes", type=float, default=10.0)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    nondeterministic = deterministic()
    res = train_run(args.workload, args.root, args.run, device=args.device,
                    precision=args.precision, epochs=args.epochs, max_batches=args.max_batches,
                    tiny=args.tiny, checkpoint_minutes=args.checkpoint_minutes)
    res["nondeterministic_ops"] = sorted(set(nondeterministic))
    print(json.dumps(res, default=str), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
