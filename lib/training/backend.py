"""The device-specific pieces of a training step, apart from the loop that calls them:
autocast, gradient scaling (GradScaler where the precision needs it), the XLA optimizer step
and loader, per-epoch device statistics, and the step itself in micro-batches.

A step (`train_step`) is one optimizer step over this device's share of a global batch,
passed through the model in the batch plan's micro-batches (`lib.training.batch`): each
micro-batch's loss is weighted by its share of the samples, so the gradients add up to those
of the whole batch; under DDP only the last micro-batch's backward all-reduces (`no_sync` on
the others); on XLA each micro-batch runs as its own graph and the optimizer step, with its
all-reduce, once per global batch; the GradScaler steps and updates once per optimizer step.
With MICRO_BATCH = "auto" an out-of-memory error in a micro-batch frees memory, halves the
micro-batch and redoes the step from the same state (no optimizer step taken, gradients
dropped, RNG and buffers as before): the same samples, re-split. `lib.training.loop` is the
same on every device.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import nn

from lib.base import faults
from lib.runtime.device import DeviceChoice
from lib.runtime.device_state import free_memory, rng_state, set_rng_state
from lib.runtime.distributed import Dist
from lib.training import batch as batches
from lib.training.batch import BatchPlan, OutOfMemory
from lib.training.optim import init_state


def _io(batch):
    """Split a batch into (inputs, target): the last element is the target."""
    return (batch[0] if len(batch) == 2 else batch[:-1]), batch[-1]


class Backend:
    """Device-specific pieces of a step: autocast, gradient scaling, XLA hooks, the step."""

    def __init__(self, choice: DeviceChoice, device: torch.device | None = None,
                 dist: Dist | None = None, plan: BatchPlan | None = None,
                 on_plan: Callable[[BatchPlan, BatchPlan], None] | None = None,
                 init_scale: float | None = None) -> None:
        """`init_scale`: the GradScaler's first scale where the precision scales (None:
        torch's 2**16); a checkpoint's saved scaler state replaces it on resume."""
        self.choice = choice
        self.device = device or choice.torch_device
        self.dist = dist or Dist()
        self.is_xla = choice.type == "xla"
        self.dtype = choice.precision.dtype
        scale = {} if init_scale is None else {"init_scale": init_scale}
        self.scaler = (torch.amp.GradScaler(choice.type, **scale) if choice.precision.scaler
                       else None)
        self.plan = plan  # None: every batch in one piece (evaluation, benchmarks)
        self.on_plan = on_plan  # told (old, new) when an out-of-memory error halves the plan
        self.cap = batches.memory_cap()  # tests only: lib.training.batch.MEMORY_CAP_ENV
        self.probing = True  # this session's first step: where a micro-batch first meets memory
        self.eval_size = plan.micro if plan is not None else None
        self.ran: set[str] = set()  # kinds of work that ran once this session (`_counting`)
        self.repeated = 0  # graphs compiled by a later one, this epoch (on XLA)

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Before the first step, with the weights (and optimizer state) in place, fresh or
        restored: on XLA, the model's scalar buffers each in a device buffer of its own
        (`lib.runtime.xla.own_scalars`) and the optimizer's state created now, not in the first
        step (`lib.training.optim.init_state`), so that the first step compiles the graphs
        every later step runs."""
        if self.is_xla:
            from lib.runtime import xla

            xla.own_scalars(model)
            if optimizer is not None:
                init_state(optimizer)

    def _cut(self) -> None:
        """On XLA, cut the lazy graph here and run it; elsewhere nothing (eager)."""
        if self.is_xla:
            from lib.runtime import xla

            xla.sync()

    def autocast(self):
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.choice.type, dtype=self.dtype)

    def loader(self, loader):
        if self.is_xla and getattr(loader, "device", None) != self.device:
            from lib.runtime import xla

            return xla.wrap_loader(loader, self.device)
        return loader

    def to_device(self, batch):
        if self.is_xla:  # MpDeviceLoader already moved it
            return batch
        nb = self.choice.pin_memory
        return [b.to(self.device, non_blocking=nb) if torch.is_tensor(b) else b for b in batch]

    # One optimizer step -----------------------------------------------------------------
    def train_step(self, task, batch) -> tuple[torch.Tensor, int]:
        """One optimizer step over `batch`, this device's share of a global batch; returns
        (its loss summed over its samples, on the device; its samples)."""
        with self._counting("step"):
            return self._train_step(task, batch)

    def _counting(self, kind: str):
        """On XLA, count the graphs compiled while a step ("step") or an evaluation batch
        ("eval") runs: those of any but the session's first of its kind add to `repeated`
        (every step after the first runs the graphs the first compiled)."""
        if not self.is_xla:
            return nullcontext()
        from lib.runtime import xla

        return xla.counting_compiles(lambda n: self._count(kind, n))

    def _count(self, kind: str, compiled: int) -> None:
        if kind in self.ran:
            self.repeated += compiled
        self.ran.add(kind)

    def _train_step(self, task, batch) -> tuple[torch.Tensor, int]:
        while True:
            saved = self._snapshot(task.model) if self._recoverable() else None
            # several processes: every backward holds its all-reduce back until all agree
            # that none ran out of memory (else the others would wait for it forever)
            together = saved is not None and self.dist.world_size > 1
            failed = ""
            try:
                out = self._accumulate(task, batch, hold_all=together)
            except Exception as exc:
                if not batches.is_out_of_memory(exc):
                    raise
                if saved is None:
                    self._give_up(str(exc))
                failed = " ".join(str(exc).split())[:200]
            if together:
                failed = self._any_failed(failed)
            if not failed:
                try:
                    self._step(task, all_held_back=together)
                except Exception as exc:  # XLA runs the step's graph at its sync(), here:
                    if not batches.is_out_of_memory(exc):  # RESOURCE_EXHAUSTED after the
                        raise  # first step, when no micro-batch syncs on its own
                    self._give_up(" ".join(str(exc).split())[:200])
                self.probing = False
                return out
            self._restore(task, saved)
            self._halve(failed)

    def _accumulate(self, task, batch, hold_all: bool = False) -> tuple[torch.Tensor, int]:
        """Forward and backward of each micro-batch, gradients adding up to the whole batch's.
        `hold_all`: no backward all-reduces (the caller averages after agreeing).

        On XLA each micro-batch's forward and backward is a graph of its own, run before the
        optimizer step's graph: an out-of-memory error is met before any weight changes, and
        every step, the first included, runs the same two graphs, so a session compiles them
        once (a first step split for probing and later steps fused compiled the step's largest
        graph a third time)."""
        model, n = task.model, batches.samples_in(batch)
        parts = batches.split(batch, self.plan.micro if self.plan is not None else n)
        loss_sum = torch.zeros((), device=self.device)
        for k, part in enumerate(parts):
            hold = hold_all or k < len(parts) - 1
            with self._no_sync(model) if hold else nullcontext():
                batches.check_cap(self.cap, batches.samples_in(part))
                inputs, target = _io(self.to_device(part))
                with self.autocast():
                    loss = task.loss_fn(model(inputs), target)
                faults.point("train.step")
                # a micro-batch's mean loss, weighted by its share: the gradients add up to
                # the mean over the whole batch (one part: the loss as it is, bit for bit)
                self.backward(loss * (target.shape[0] / n) if len(parts) > 1 else loss)
                loss_sum += loss.detach().float() * target.shape[0]
            self._cut()  # on XLA a graph per micro-batch: its memory, and any error, its own
        return loss_sum, n

    def _no_sync(self, model):
        return model.no_sync() if hasattr(model, "no_sync") else nullcontext()

    def backward(self, loss) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def _step(self, task, all_held_back: bool = False) -> None:
        if all_held_back:  # the all-reduce every backward held back: DDP's mean, now
            self.dist.average_gradients(task.model)
        self.optimizer_step(task.model, task.optimizer, task.clip_grad)

    def optimizer_step(self, model, optimizer, clip_grad: float | None) -> None:
        """Unscale, clip, step (once per global batch) and zero the gradients."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        if clip_grad:
            nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        elif self.is_xla:
            from lib.runtime import xla

            xla.optimizer_step(optimizer)
            xla.sync()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def backward_step(self, loss, model, optimizer, clip_grad: float | None) -> None:
        """Backward and optimizer step of one whole batch (benchmarks time this)."""
        self.backward(loss)
        self.optimizer_step(model, optimizer, clip_grad)

    # Out of memory ----------------------------------------------------------------------
    def _recoverable(self) -> bool:
        """Whether an out-of-memory error in this step is redone with a smaller micro-batch:
        with MICRO_BATCH "auto", in the session's first step; after it too in one process on
        a GPU, a Mac or the CPU (where a later batch may be larger: varying shapes). Several
        processes agree once, in the first; an XLA graph keeps its size once compiled."""
        return (self.plan is not None and self.plan.auto
                and (self.probing or (self.dist.world_size == 1 and not self.is_xla)))

    def _snapshot(self, model: nn.Module):
        """What a redone step must start from: the RNG states dropout draws from, and the
        buffers (BatchNorm's running statistics) the failed forward passes moved. On XLA the
        copies run as a graph of their own, so the step's graph is the one later steps run
        (with the copies in it, it had 120 more outputs for MSHNet and compiled twice)."""
        saved = rng_state(), [b.detach().clone() for b in model.buffers()]
        self._cut()
        return saved

    def _restore(self, task, saved) -> None:
        rng, buffers = saved
        task.optimizer.zero_grad(set_to_none=True)
        set_rng_state(rng)
        with torch.no_grad():
            for b, old in zip(task.model.buffers(), buffers, strict=True):
                b.copy_(old)
        free_memory(self.device)

    def _any_failed(self, failed: str) -> str:
        """Whether any process ran out of memory in this step (each learns it)."""
        flag = torch.tensor(1.0 if failed else 0.0, device=self.device)
        if float(self.dist.reduce_sum(flag)) == 0:
            return ""
        return failed or "another process ran out of memory"

    def _halve(self, why: str) -> None:
        smaller = self.plan.smaller()
        if smaller is None:
            where = self.plan.where or "this device"
            raise OutOfMemory(
                f"a step of one sample does not fit in the memory of {where} ({why}); this "
                "model cannot train there: choose a device with more memory, or a smaller "
                "model.")
        old, self.plan = self.plan, smaller
        self.eval_size = min(self.eval_size or smaller.micro, smaller.micro)
        if self.on_plan is not None:
            self.on_plan(old, smaller)

    def _give_up(self, why: str) -> None:
        """An out-of-memory error that cannot be redone here: one line with the fix."""
        micro = self.plan.micro if self.plan is not None else None
        smaller = self.plan.smaller() if self.plan is not None else None
        fix = (f"set MICRO_BATCH = {smaller.micro} (or \"auto\") and run again: it resumes "
               "from the newest checkpoint" if smaller is not None else
               "choose a device with more memory, or a smaller model")
        raise OutOfMemory(f"out of memory at {micro or 'this batch'} samples per step on "
                          f"{self.choice.where or self.choice.type} ({why}); {fix}.")

    # Evaluation ---------------------------------------------------------------------------
    def eval_step(self, model, loss_fn, batch, consume: Callable) -> None:
        """The forward pass of `batch` in pieces of at most `eval_size` samples (the training
        micro-batch; None: whole), then `consume(output, target, loss)` of each (the loss
        computed under autocast, as the output); a piece that runs out of memory is halved
        and redone (evaluation changes no state)."""
        with self._counting("eval"):
            self._eval_step(model, loss_fn, batch, consume)

    def _eval_step(self, model, loss_fn, batch, consume: Callable) -> None:
        n, done = batches.samples_in(batch), 0
        while done < n:
            size = min(self.eval_size or n, n - done)
            part = [b[done:done + size] if torch.is_tensor(b) else b for b in batch]
            try:
                batches.check_cap(self.cap, size)
                inputs, target = _io(self.to_device(part))
                with self.autocast():
                    output = model(inputs)
                    loss = loss_fn(output, target).detach().float()
                # On XLA the forward runs once, here, as one graph; else a metric that reads
                # a value on the host (Pd/Fa's masks) runs it, and the loader's sync again.
                self._cut()
            except Exception as exc:
                if size == 1 or not batches.is_out_of_memory(exc):
                    raise
                self.eval_size = size // 2
            else:
                consume(output, target, loss)
                done += size
                continue
            free_memory(self.device)

    def epoch_stats(self) -> dict:
        """On XLA: `xla_compiles`, the session's compilations so far, `xla_repeat_compiles`,
        those of this epoch at a step or evaluation batch that was not the session's first of
        its kind (0 when each distinct graph compiles once), and `xla_fallback_ops`, the ops
        the process has run on the CPU for want of an XLA lowering so far (sorted names; []
        when every op lowered: `lib.runtime.xla.fallback_ops`)."""
        if self.is_xla:
            from lib.runtime import xla

            repeated, self.repeated = self.repeated, 0
            return {"xla_compiles": xla.compile_count(), "xla_repeat_compiles": repeated,
                    "xla_fallback_ops": xla.fallback_ops()}
        return {}
