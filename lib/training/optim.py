"""The optimizers of the study, their literature defaults, and warm-up + cosine schedules.

The table below is the one place the defaults live. The weight decays are chosen so that
the per-step shrink of the weights, lr * wd, is the same 5e-5 for SGD (0.1 * 5e-4), AdamW
(1e-3 * 5e-2), Lion (2e-4 * 0.25) and RAdam, which makes the comparison about the update
rule rather than the amount of regularisation (Adam's L2 term is coupled, see its note).
The table imports no torch (`report` reads a study through it); building an optimizer does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where an optimizer is built: the table is read without it
    import torch
    from torch.optim.lr_scheduler import LambdaLR


@dataclass(frozen=True)
class OptimizerDefaults:
    lr: float
    weight_decay: float
    source: str  # where the numbers come from


OPTIMIZERS: dict[str, OptimizerDefaults] = {
    "sgd": OptimizerDefaults(0.1, 5e-4, "SGD, momentum 0.9, Nesterov, L2 5e-4: the CIFAR "
                             "ResNet recipe (He et al. 2016 lr 0.1; Zagoruyko & Komodakis "
                             "2016 wd 5e-4)"),
    "adam": OptimizerDefaults(1e-3, 5e-4, "Adam with coupled L2 5e-4: Kingma & Ba 2015 "
                              "defaults, the L2 of the AdaBound CIFAR benchmark (Luo et al. "
                              "2019); the baseline AdamW was proposed to fix"),
    "adamw": OptimizerDefaults(1e-3, 5e-2, "AdamW, decoupled decay (Loshchilov & Hutter "
                               "2019); lr * wd = 5e-5 matches SGD's shrink per step"),
    "lion": OptimizerDefaults(2e-4, 0.25, "Lion, betas (0.9, 0.99) (Chen et al. 2023): lr "
                              "5x smaller and wd 5x larger than AdamW, inside the paper's "
                              "3-10x, same lr * wd"),
    "radam": OptimizerDefaults(1e-3, 5e-2, "RAdam with decoupled decay (Liu et al. 2020): "
                               "AdamW plus variance rectification, the fix meant to make "
                               "warm-up unnecessary; same lr and wd as AdamW to isolate it"),
}


def check_optimizer_name(name: str) -> str:
    """The canonical (lower-case) name, or one ValueError listing the valid choices."""
    key = str(name).strip().lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid choices are "
                         f"{', '.join(OPTIMIZERS)}. Fix the OPTIMIZERS parameter.")
    return key


def resolved_hparams(name: str, lr: float | None = None,
                     weight_decay: float | None = None) -> tuple[float, float]:
    """(lr, weight_decay): the given values, or the table's defaults for `name`."""
    d = OPTIMIZERS[name]
    lr = d.lr if lr is None else float(lr)
    weight_decay = d.weight_decay if weight_decay is None else float(weight_decay)
    if lr <= 0 or weight_decay < 0:
        raise ValueError(f"{name}: lr={lr} and weight_decay={weight_decay}; expected lr > 0 "
                         "and weight_decay >= 0 (or None for the literature default).")
    return lr, weight_decay


def make_optimizer(name: str, params: Iterable, lr: float | None = None,
                   weight_decay: float | None = None) -> torch.optim.Optimizer:
    """Optimizer `name` over `params` (tensors or param groups); None means the default."""
    import torch

    key = name
    lr, wd = resolved_hparams(key, lr, weight_decay)
    if key == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
    if key == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if key == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if key == "radam":
        return torch.optim.RAdam(params, lr=lr, weight_decay=wd, decoupled_weight_decay=True)
    from lion_pytorch import Lion  # imported here: only Lion runs need the package

    return Lion(params, lr=lr, betas=(0.9, 0.99), weight_decay=wd)


def init_state(optimizer: torch.optim.Optimizer) -> int:
    """Create now, for every parameter that has none, the state `optimizer` would create at
    its first step, with the values that step would start from (zeros, step 0): the results
    are the same bit for bit, and on XLA the first step's graph is every later step's (state
    created inside the first step made the second a new graph, compiled again). Returns how
    many parameters got state.

    Known: SGD with momentum and no dampening (its first step copies the gradient: with a
    zero buffer, 0 * momentum + grad is that copy), Adam, AdamW, RAdam and Adadelta (neither
    capturable nor fused: their step count then lives on the host), Lion. Others (Adagrad
    creates its state when built) keep theirs as it is. The zeros are made on the host and
    moved, so they arrive as data (on XLA: no graph to compile for them).
    """
    import torch

    def zeros(p):
        return torch.zeros_like(p, device="cpu", memory_format=torch.preserve_format).to(
            p.device)

    scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    made = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not p.requires_grad or optimizer.state.get(p):
                continue
            if isinstance(optimizer, torch.optim.SGD):
                if not group["momentum"] or group["dampening"]:
                    continue
                state = {"momentum_buffer": zeros(p)}
            elif isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW,
                                        torch.optim.RAdam)):
                if group.get("capturable") or group.get("fused"):
                    continue
                state = {"step": torch.tensor(0.0, dtype=scalar), "exp_avg": zeros(p),
                         "exp_avg_sq": zeros(p)}
                if group.get("amsgrad"):
                    state["max_exp_avg_sq"] = zeros(p)
            elif isinstance(optimizer, torch.optim.Adadelta):
                if group.get("capturable"):
                    continue
                state = {"step": torch.tensor(0.0, dtype=scalar), "square_avg": zeros(p),
                         "acc_delta": zeros(p)}
            elif type(optimizer).__name__ == "Lion":  # lion_pytorch's (imported where used)
                state = {"exp_avg": zeros(p)}
            else:
                continue
            optimizer.state[p] = state
            made += 1
    return made


def warmup_cosine_factor(step: int, total_steps: int, warmup_steps: int,
                         min_lr_ratio: float = 0.0) -> float:
    """lr multiplier at optimizer step `step` (0-based).

    Linear warm-up (step + 1) / warmup_steps for the first `warmup_steps` steps, then
    cosine from 1 to `min_lr_ratio` at `total_steps`, constant afterwards.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int,
                  min_lr_ratio: float = 0.0) -> LambdaLR:
    """A LambdaLR to be stepped once per optimizer step (Task(scheduler_interval="step")).

    The shape comes from the arguments, not from a checkpoint: a resumed run restores the
    step count, and the horizon stays the one the current configuration asks for.
    """
    if total_steps < 1 or not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_cosine(total_steps={total_steps}, warmup_steps="
                         f"{warmup_steps}): expected total_steps >= 1 and "
                         "0 <= warmup_steps <= total_steps.")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio={min_lr_ratio} must be in [0, 1].")
    # A partial has an empty __dict__, so LambdaLR saves and restores no shape parameters.
    from torch.optim.lr_scheduler import LambdaLR

    fn = partial(warmup_cosine_factor, total_steps=total_steps, warmup_steps=warmup_steps,
                 min_lr_ratio=min_lr_ratio)
    return LambdaLR(optimizer, fn)


def defaults_table() -> str:
    """The defaults as a Markdown table (for the notebook's text)."""
    rows = ["| optimizer | lr | weight decay | source |", "|---|---|---|---|"]
    rows += [f"| {k} | {d.lr:g} | {d.weight_decay:g} | {d.source} |"
             for k, d in OPTIMIZERS.items()]
    return "\n".join(rows)
