"""The training loop: `train_one_epoch`, `evaluate`, `fit`, each returning plain dicts.

Workloads differ only in what they pass in (model, loss, metrics, loaders); devices differ
only inside `Backend` (lib/training/backend.py: autocast, scaler, XLA step and loader hooks,
the step in micro-batches of the session's batch plan, `lib.training.batch`). A loader batch
is one device's share of a global batch: one optimizer step, whatever the micro-batch.
Metrics stay on the device during an epoch and are read once at its end. `fit` resumes from
the newest good checkpoint of the run folder (which counts optimizer steps and samples),
saves every epoch and every few minutes, and writes `metrics.jsonl`, TensorBoard scalars and
a progress bar with an ETA.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from lib.base import faults
from lib.runs.folder import RunFolder
from lib.runtime.device import DeviceChoice
from lib.runtime.distributed import Dist, unwrap
from lib.training import batch as batches
from lib.training.backend import Backend, _io  # noqa: F401 (_io: benchmarks import it here)
from lib.training.batch import BatchPlan
from lib.training.state import counters as _counters
from lib.training.state import restore as _restore
from lib.training.state import state_of as _state


@dataclass
class Task:
    """What a workload passes to the loop."""

    model: nn.Module
    loss_fn: Callable
    optimizer: torch.optim.Optimizer
    metrics: Callable[[], Sequence] = list  # factory of fresh eval metrics
    scheduler: object | None = None
    scheduler_interval: str = "epoch"  # "step" or "epoch"
    clip_grad: float | None = None
    monitor: str = "test_accuracy"  # which record key picks best.pt
    monitor_mode: str = "max"
    extra_state: dict = field(default_factory=dict)
    # GradScaler's first scale where the precision scales (fp16); None: torch's 2**16. A model
    # whose gradients overflow fp16 at 2**16 would skip its first steps while it backs off.
    grad_scale: float | None = None


def _batch_limit(loader, max_batches: int | None) -> int:
    return len(loader) if max_batches is None else min(len(loader), max_batches)


def _set_epoch(task: Task, epoch: int) -> None:
    if hasattr(task.loss_fn, "set_epoch"):
        task.loss_fn.set_epoch(epoch)


def train_one_epoch(task: Task, loader, backend: Backend, epoch: int, *, start_batch: int = 0,
                    max_batches: int | None = None, partial=None, on_step=None) -> dict:
    """One pass over `loader` from `start_batch`, an optimizer step per batch; returns
    train_loss and sample counts."""
    model, n_batches = task.model, _batch_limit(loader, max_batches)
    model.train()
    _set_epoch(task, epoch)
    loader.sampler.set_epoch(epoch, start_batch * loader.batch_size)
    loss_sum = torch.zeros((), device=backend.device)
    seen = 0
    # Sums carried over from a mid-epoch checkpoint: over all processes, so the main one
    # alone adds them (the epoch's sums are reduced over processes at its end).
    if partial and backend.dist.main:
        loss_sum += partial["loss_sum"]
        seen = partial["seen"]
    for i, batch in enumerate(backend.loader(loader), start=start_batch):
        if i >= n_batches:
            break
        step_loss, n = backend.train_step(task, batch)
        if task.scheduler is not None and task.scheduler_interval == "step":
            task.scheduler.step()  # per optimizer step, never per micro-batch
        loss_sum += step_loss
        seen += n
        if on_step is not None:
            on_step(i + 1, loss_sum, seen, n)
    seen_t = backend.dist.reduce_sum(torch.tensor(float(seen), device=backend.device))
    loss_sum = backend.dist.reduce_sum(loss_sum)
    return {"train_loss": float(loss_sum) / max(float(seen_t), 1.0),
            "train_samples": int(float(seen_t))}


@torch.no_grad()
def evaluate(task: Task, loader, backend: Backend, max_batches: int | None = None,
             metrics: Sequence | None = None, on_batch: Callable[[], None] | None = None) -> dict:
    """Loss and metrics over `loader`, prefixed `test_`; `metrics` overrides the task's.

    Under DDP every process evaluates the whole loader with its unwrapped model, so every
    process gets the same numbers without a reduction.
    """
    model, n_batches = unwrap(task.model), _batch_limit(loader, max_batches)
    model.eval()
    metrics = list(task.metrics()) if metrics is None else metrics
    loss_sum, seen = torch.zeros((), device=backend.device), [0]
    loader.sampler.set_epoch(0)

    def consume(output, target, loss) -> None:
        nonlocal loss_sum
        loss_sum += loss * target.shape[0]
        seen[0] += target.shape[0]
        for m in metrics:
            m.update(output, target)

    for i, batch in enumerate(backend.loader(loader)):
        if i >= n_batches:
            break
        backend.eval_step(model, task.loss_fn, batch, consume)  # in micro-batches, as training
        faults.point("eval.batch")
        if on_batch is not None:
            on_batch()
    out = {"test_loss": float(loss_sum) / max(seen[0], 1)}
    for m in metrics:
        out.update({f"test_{k}": v for k, v in m.compute().items()})
    return out


def evaluate_on(task: Task, loader, choice: DeviceChoice, metrics: Sequence,
                max_batches: int | None = None) -> dict:
    """`evaluate` with the caller's metric objects (e.g. to read a confusion matrix after)."""
    return evaluate(task, loader, Backend(choice), max_batches, metrics=metrics)


def _improved(task: Task, value: float, best: float | None) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if best is None:
        return True
    return value > best if task.monitor_mode == "max" else value < best


NOTHING, SAVE, STOP = 0, 1, 2  # what every process does at a batch boundary


class _Stop(Exception):
    """Saved at (epoch, batch) before the session limit: leave the loop."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__(epoch, batch)
        self.epoch, self.batch = epoch, batch


def _replanned(run: RunFolder, model: nn.Module, old: BatchPlan, new: BatchPlan) -> None:
    """An out-of-memory error halved the micro-batch: say so, and record it for the next
    session on this device."""
    run.log(f"out of memory at {old.micro} per step on {new.where or 'this device'}: the step "
            f"redone from the same state; {new.line()}")
    if new.accumulation > 1 and old.accumulation == 1 and batches.batch_norm(model):
        run.log(batches.batch_norm_line(new))
    run.update_session(new.fields())


def agree(dist: Dist, action: int, device: torch.device) -> int:
    """The main process's `action`, known to every process (one small all-reduce when there
    are several: the others contribute 0)."""
    if dist.world_size == 1:
        return action
    decided = torch.tensor(float(action if dist.main else NOTHING), device=device)
    return int(float(dist.reduce_sum(decided)))


def compile_seconds(marks: list[float]) -> float:
    """The first batch's time beyond the median of the others', from batch end times
    (`marks[0]` the start): what compiling added. 0 with fewer than two batches."""
    durations = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    if len(durations) < 2:
        return 0.0
    return max(0.0, durations[0] - statistics.median(durations[1:]))


def fit(task: Task, train_loader, eval_loader, choice: DeviceChoice, run: RunFolder, epochs: int,
        *, max_batches: int | None = None, checkpoint_minutes: float = 10.0,
        on_epoch: Callable[[dict], None] | None = None, dist: Dist | None = None,
        device: torch.device | None = None, compiled: bool = False,
        plan: BatchPlan | None = None) -> list[dict]:
    """Train for `epochs` (resuming from `run`'s newest good checkpoint); return the history.

    `max_batches` caps train and eval batches per epoch (smoke mode). Each epoch record has
    `epoch` (1-based, epochs done), the train/test dicts, `lr`, `seconds`, `samples_per_s`,
    `device` and, on XLA, `Backend.epoch_stats`' compile counts and fallback ops; with
    `compiled` (the model went through torch.compile), the session's first epoch also has
    `compile_seconds`. Under DDP/XLA
    multi-processing (`dist`), each process trains on its shard and only the main one writes;
    the main process decides at each batch boundary whether to save mid-epoch (every
    `checkpoint_minutes`) or to save and stop (the session clock, `run.clock`, is about to
    reach its limit) and every process follows it (`agree`). A stopped run returns the
    history so far with `run.stopped` set; the notebook carries on normally. `plan` (the
    session's batch plan; None: each loader batch in one piece) splits each step into
    micro-batches; an out-of-memory error that halves it is said, and recorded in the
    session's row of sessions.jsonl for the next session on this device.
    """
    dist = dist or Dist()
    backend = Backend(choice, device, dist, plan, on_plan=lambda old, new: _replanned(
        run, task.model, old, new), init_scale=task.grad_scale)
    task.model.to(backend.device)
    task = dataclasses.replace(task, model=dist.wrap_model(task.model, backend.device))
    history, best, start_epoch, start_batch, partial = [], None, 0, 0, None
    n_train = _batch_limit(train_loader, max_batches)
    state = run.checkpoints.latest()
    count = _counters(state, n_train)
    if state is not None:
        _restore(task, backend, state, run.log)
        history, best, partial = state["history"], state["best"], state["partial"]
        start_epoch, start_batch = state["position"]
        run.log(f"resumed from {state['path']} at epoch {start_epoch}, batch {start_batch} "
                f"({len(history)} epochs in the history; {count['steps']} optimizer steps, "
                f"{count['samples']} samples)")
    else:
        run.keep_old_metrics()
    backend.prepare(unwrap(task.model), task.optimizer)
    run.begin(history, start_epoch, state)  # from here the run folder owns the history
    history = run.history
    if start_epoch >= epochs:
        run.log(f"nothing to do: the checkpoint has {start_epoch} of {epochs} epochs")
        return history
    if plan is not None:
        run.session = dict(run.session or {}, **plan.fields(),
                           batch_norm=batches.batch_norm(task.model))
        if plan.accumulation > 1 and batches.batch_norm(task.model):
            run.log(batches.batch_norm_line(plan))
    run.record_session(start_epoch)
    progress = run.progress(total=(epochs - start_epoch) * n_train - start_batch)
    last_save = [time.monotonic()]
    epoch_lr = [None]

    # Batch end times in this session's first epoch, where torch.compile compiles.
    first_epoch, train_marks, eval_marks = [compiled], [], []

    def on_eval_batch() -> None:
        if first_epoch[0]:
            eval_marks.append(time.perf_counter())

    def on_step(batch_done: int, loss_sum, seen: int, n: int) -> None:
        count["steps"] += 1
        count["samples"] += n * dist.world_size  # every process takes an equal share
        progress.update(1)
        if first_epoch[0]:
            train_marks.append(time.perf_counter())
        action = NOTHING
        if dist.main:
            if run.clock.must_stop():
                action = STOP
            elif (time.monotonic() - last_save[0] >= checkpoint_minutes * 60
                  and batch_done < n_train):
                action = SAVE
        action = agree(dist, action, backend.device)
        if action == NOTHING:
            return
        loss_total = dist.reduce_sum(loss_sum.detach().clone())
        seen_total = dist.reduce_sum(torch.tensor(float(seen), device=backend.device))
        part = {"loss_sum": float(loss_total), "seen": int(float(seen_total)),
                "lr": epoch_lr[0]}
        run.save(_state(task, backend, history, best, count, part), epoch, batch_done)
        last_save[0] = time.monotonic()
        if action == STOP:
            raise _Stop(epoch, batch_done)

    for epoch in range(start_epoch, epochs):
        # Between epochs (not before this session's first step): stop when the limit is near.
        ending = run.clock.must_stop() or faults.session_over(epoch - start_epoch)
        if epoch > start_epoch and agree(dist, STOP if dist.main and ending
                                         else NOTHING, backend.device) == STOP:
            run.stop(epoch, 0)
            break
        t0 = time.perf_counter()
        if first_epoch[0]:
            train_marks.append(t0)
        # The lr the epoch started with: after a mid-epoch resume, a per-step schedule has
        # moved on, so it comes from the checkpoint.
        lr = partial["lr"] if partial and "lr" in partial else task.optimizer.param_groups[0]["lr"]
        epoch_lr[0] = lr
        record = {"epoch": epoch + 1, "lr": lr}
        try:
            record.update(train_one_epoch(task, train_loader, backend, epoch,
                                          start_batch=start_batch, max_batches=max_batches,
                                          partial=partial, on_step=on_step))
        except _Stop as stop:
            run.stop(stop.epoch, stop.batch)
            break
        train_seconds = time.perf_counter() - t0
        on_eval_batch()  # the evaluation's start
        record.update(evaluate(task, eval_loader, backend, max_batches, on_batch=on_eval_batch))
        if first_epoch[0]:
            record["compile_seconds"] = compile_seconds(train_marks) + compile_seconds(eval_marks)
            first_epoch[0] = False
        if task.scheduler is not None and task.scheduler_interval == "epoch":
            task.scheduler.step()
        record.update(backend.epoch_stats(), device=choice.type, seconds=time.perf_counter() - t0,
                      samples_per_s=record["train_samples"] / max(train_seconds, 1e-9))
        is_best = _improved(task, record.get(task.monitor), best)
        best = record.get(task.monitor) if is_best else best
        run.save(_state(task, backend, history + [record], best, count), epoch + 1, 0,
                 best=is_best)
        last_save[0] = time.monotonic()
        run.end_epoch(record, epochs, progress)  # appends it to the history
        if on_epoch is not None:
            on_epoch(record)
        start_batch, partial = 0, None
    progress.close()
    return history
