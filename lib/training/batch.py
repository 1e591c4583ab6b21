"""The batch plan: the experiment's global batch on this session's devices, in steps that fit.

    global batch = devices x micro-batch x accumulation steps

The global batch is the experiment's: the samples of one optimizer step, recorded in the run
folder (`lib.runs.identity`) and kept wherever the run continues. Each device takes its share
(the per-device batch, what its loader yields) and, when that does not fit in its memory,
passes it through the model in micro-batches, adding up their gradients before the one
optimizer step (`lib.training.backend`). `decide` computes the plan once per session from the
run's record, the platform, the device found and what fits; the loop only reads it.

MICRO_BATCH = "auto" starts from what a device of this kind holds (the workload's BATCH_SIZES,
with the headroom of `HEADROOM`; on the CPU, the whole per-device batch) or from what an
earlier session of the run found on this very device; on an out-of-memory error the step is
redone from the same state with half the micro-batch (`smaller`): the same samples, re-split.
Exact for models without batch statistics; BatchNorm sees the micro-batch (`batch_norm`).

The plan's arithmetic imports no torch (the command line checks MICRO_BATCH with it before a
kernel starts: `check_micro_batch`); the out-of-memory pieces import it where they run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lib.base.errors import ConfigError, DeviceError, how_to_set
from lib.runs import identity as experiment
from lib.runtime.platforms import ANY, get_platform

if TYPE_CHECKING:
    from torch import nn

AUTO = "auto"
# A per-device batch up to this many times the workload's default for the device is tried
# whole first (the defaults are sized to fit with room); more starts in micro-batches.
HEADROOM = 2
# Smoke runs use small batches so the sample data holds several.
SMOKE_MAX_BATCH = 32
# For tests only: a device that holds at most N samples per forward/backward. A training or
# evaluation step over more raises torch.OutOfMemoryError where a real device would (the CPU
# has no memory limit, so without it no test meets one). Never set it to train.
MEMORY_CAP_ENV = "TA_TEST_MEMORY_CAP"


class OutOfMemory(DeviceError):
    """A step does not fit in the device's memory at the micro-batch asked for."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step's samples are laid out in this session."""

    global_batch: int  # the experiment's: samples per optimizer step, over all devices
    devices: int = 1  # processes training, one device each
    micro: int = 0  # samples per forward/backward on one device; 0: the per-device batch
    auto: bool = False  # MICRO_BATCH = "auto": halve on an out-of-memory error
    kept: bool = False  # the global batch is the one the run folder records
    where: str = ""  # the device that holds `micro` (lib.runtime.device.DeviceChoice.where)
    found: bool = False  # `micro` was lowered after an out-of-memory error on that device

    def __post_init__(self) -> None:
        if not self.micro:
            object.__setattr__(self, "micro", self.per_device)
        if self.global_batch % self.devices or self.per_device % self.micro:
            raise ValueError(f"inconsistent {self}")  # decide() never builds one

    @property
    def per_device(self) -> int:
        """Samples per optimizer step on one device: what its loader yields."""
        return self.global_batch // self.devices

    @property
    def accumulation(self) -> int:
        """Micro-batches whose gradients add up to one optimizer step."""
        return self.per_device // self.micro

    def smaller(self) -> BatchPlan | None:
        """The plan after an out-of-memory error: the largest micro-batch at most half this
        one that splits the per-device batch evenly; None below one sample."""
        below = [d for d in divisors(self.per_device) if d <= self.micro // 2]
        return replace(self, micro=below[-1], found=True) if below else None

    def line(self) -> str:
        """'global batch 4096 kept: 256 per step x 16 accumulated, on 1 device'."""
        kept = " kept" if self.kept else ""
        on = f"on {self.devices} device{'s' * (self.devices != 1)}"
        if self.accumulation == 1:
            return f"global batch {self.global_batch}{kept}: {self.per_device} per step, {on}"
        return (f"global batch {self.global_batch}{kept}: {self.micro} per step x "
                f"{self.accumulation} accumulated, {on}")

    def fields(self) -> dict:
        """What sessions.jsonl records of the plan (the next session on this device reads
        `micro_batch_found` and `micro_batch_on` back)."""
        return {"micro_batch": self.micro, "accumulation": self.accumulation,
                "micro_batch_found": self.found, "micro_batch_on": self.where}


# Deciding it ---------------------------------------------------------------------------------
def default_global(cfg, devices: int, kind: str) -> int:
    """A new run's global batch: BATCH_SIZE x devices, else the workload's default (SMOKE:
    the default per device, at most SMOKE_MAX_BATCH, x devices: seconds on a CPU)."""
    if cfg.batch_size is not None:
        return cfg.batch_size * devices
    if cfg.smoke:
        return min(cfg.resolved_batch_size(kind), SMOKE_MAX_BATCH) * devices
    return cfg.default_global_batch(devices, kind)


def split_over(total: int, available: int, kind: str) -> int:
    """The most devices (of `available`) that split `total` evenly; torch_xla launches on one
    chip or on all of them."""
    counts = (1, available) if kind == "xla" else range(1, available + 1)
    return max(n for n in counts if total % n == 0)


def remembered(sessions: list[dict], where: str) -> int | None:
    """The micro-batch an earlier session of this run found (after an out-of-memory error)
    on the same device, the newest; None when none did."""
    found = [row["micro_batch"] for row in sessions
             if row.get("micro_batch_found") and row.get("micro_batch_on") == where]
    return found[-1] if found else None


def first_micro(cfg, per_device: int, kind: str, known: int | None) -> int:
    """MICRO_BATCH = "auto"'s first try: what an earlier session found here, else BATCH_SIZE
    set by hand (the user's), else up to HEADROOM x the workload's default for this device
    (no limit on the CPU); the largest divisor of the per-device batch at most that."""
    limit = known
    if limit is None and cfg.batch_size is None:
        default = cfg.step_batch(kind)
        limit = None if default is None else HEADROOM * default
    limit = per_device if limit is None else min(limit, per_device)
    return max(d for d in divisors(per_device) if d <= max(limit, 1))


def fixed_micro(micro: int, per_device: int, total: int, devices: int) -> int:
    """MICRO_BATCH set by hand: a divisor of the per-device batch (at or above it: the whole
    per-device batch); else one line naming the values that work."""
    if micro >= per_device:
        return per_device
    if per_device % micro:
        raise ConfigError(
            f"MICRO_BATCH={micro} does not divide the {per_device} samples each device takes "
            f"per step (global batch {total} over {devices} device(s)); expected one of "
            f"{divisors(per_device)}; {how_to_set('MICRO_BATCH', AUTO)} to find what fits.")
    return micro


def check_micro_batch(cfg) -> None:
    """Refuse, before anything starts, a MICRO_BATCH that divides the per-device batch of no
    device a new run of `cfg` may train on, with the line `decide` would say once the notebook
    ran. A run folder that recorded its batch is its session's to check (`decide`)."""
    if isinstance(cfg.micro_batch, str):
        return
    profile = get_platform(cfg.platform)
    kinds = [cfg.device] if cfg.device != "auto" else (
        ["cuda", "mps", "cpu"] if profile.accelerator == ANY else [profile.accelerator, "cpu"])
    refusals = []
    for kind in kinds:
        for available in range(1, profile.devices + 1):
            total = default_global(cfg, available, kind)
            devices = split_over(total, available, kind)
            try:
                fixed_micro(cfg.micro_batch, total // devices, total, devices)
                return
            except ConfigError as exc:
                refusals.append(exc)
    raise refusals[0]


def decide(cfg, kind: str, where: str, available: int, run_dir=None) -> BatchPlan:
    """This session's plan: the global batch the run in `run_dir` records, when BATCH_SIZE
    leaves it to the experiment (`run_dir` None: a grid's root, whose cells decide their
    own), else a new run's; the devices of `available` that split it; the micro-batch
    (MICRO_BATCH, or "auto"'s first try: what an earlier session found on `where`)."""
    recorded, sessions = (None, []) if run_dir is None else experiment.batch_record(
        run_dir, cfg.run_settings())
    recorded = recorded if cfg.batch_size is None else None
    total = recorded or default_global(cfg, available, kind)
    devices = split_over(total, available, kind)
    per_device = total // devices
    if cfg.micro_batch == AUTO:
        known = remembered(sessions, where)
        micro = first_micro(cfg, per_device, kind, known)
        return BatchPlan(total, devices, micro, auto=True, kept=recorded is not None,
                         where=where, found=known is not None)
    micro = fixed_micro(cfg.micro_batch, per_device, total, devices)
    return BatchPlan(total, devices, micro, kept=recorded is not None, where=where)


def fewer_devices_line(plan: BatchPlan, available: int) -> str | None:
    """One line when the global batch does not split over every device found."""
    if plan.devices == available:
        return None
    return (f"the global batch {plan.global_batch} does not split evenly over {available} "
            f"devices: training on {plan.devices} of them (a BATCH_SIZE set by hand uses "
            "them all, as a new experiment)")


# Out of memory -------------------------------------------------------------------------------
def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's torch.OutOfMemoryError, MPS's 'MPS backend out of memory', XLA's
    RESOURCE_EXHAUSTED."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("MPS backend out of memory" in text
                                              or "RESOURCE_EXHAUSTED" in text)


def memory_cap() -> int | None:
    value = os.environ.get(MEMORY_CAP_ENV)
    return int(value) if value else None


def check_cap(cap: int | None, samples: int) -> None:
    """The test stand-in for a small device (MEMORY_CAP_ENV): raise where a real device
    would, before the forward pass of more samples than it holds."""
    if cap is not None and samples > cap:
        import torch

        raise torch.OutOfMemoryError(
            f"out of memory: {samples} samples in one step, more than the {cap} this device "
            f"holds ({MEMORY_CAP_ENV}, a test stand-in)")


def batch_norm(model: nn.Module) -> bool:
    """True when the model normalises by batch statistics (its numbers then depend on the
    micro-batch: accumulation is exact only without them)."""
    from torch import nn

    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def batch_norm_line(plan: BatchPlan) -> str:
    return (f"BatchNorm normalises each micro-batch of {plan.micro}, not the {plan.per_device} "
            "samples of a device's step: gradient accumulation is exact only for models "
            "without batch statistics, so this run's numbers differ slightly from one that "
            "holds the whole batch (listed with the results)")


def split(batch, size: int) -> list[list]:
    """The micro-batches of `size` samples of a batch (a list of tensors sharing dim 0;
    other elements are passed to every micro-batch as they are)."""
    n = samples_in(batch)
    if size >= n:
        return [list(batch)]
    import torch

    return [[b[i:i + size] if torch.is_tensor(b) else b for b in batch]
            for i in range(0, n, size)]


def samples_in(batch) -> int:
    return len(batch[-1])  # the target, last: `lib.training.loop._io`


def deviations(official: int | None, global_batch: int, sessions: list[dict]) -> list[str]:
    """The batch's deviations from a paper's setup, one phrase each: a global batch other
    than the paper's, and BatchNorm over fewer samples than the global batch in the sessions
    that trained the run (`sessions`: sessions.jsonl's rows; a row's micro-batch is what one
    device's forward pass held: accumulation and devices both shrink it)."""
    out = []
    if official is not None and global_batch != official:
        out.append(f"global batch {global_batch} (official: {official} on one GPU)")
    seen = sorted({row["micro_batch"] for row in sessions if row.get("batch_norm")
                   and row.get("micro_batch", global_batch) < global_batch})
    if seen:
        out.append(f"BatchNorm over {' / '.join(map(str, seen))} samples per step, not the "
                   f"global batch of {global_batch} (micro-batches or devices; accumulation is "
                   "exact only for models without batch statistics)")
    return out
