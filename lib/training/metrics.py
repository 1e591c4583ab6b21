"""Metrics kept on the device during an epoch and read once, in `compute()`.

A host read inside the step stalls a GPU and cuts an XLA graph, so `update()` only does
tensor arithmetic; `compute()` is called once per epoch. The records they produce are
written by `lib.runs.records` (metrics.jsonl), which needs no torch.
"""

from __future__ import annotations

from typing import Protocol

import torch


class Metric(Protocol):
    def reset(self) -> None: ...

    def update(self, output, target) -> None: ...

    def compute(self) -> dict[str, float]: ...


def _logits(output):
    """Models may return (main_output, extras); metrics judge the main output."""
    return output[0] if isinstance(output, (tuple, list)) else output


class Accuracy:
    """Top-1 accuracy over an epoch: correct / seen, summed on the device.

    Hand-written rather than torchmetrics' MulticlassAccuracy: measured in the XLA lane, that
    one made XLA compile 8 new graphs in every epoch of the Fashion-MNIST TPU notebook; this
    sum compiles none after the first epoch (tests/test_xla_lane.py)."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> None:
        self.correct = None
        # A Python int: the batch size is known on the host. A device counter made with
        # torch.tensor(n, device=...) was a blocking host-to-device copy per batch, which on a
        # GPU waits for every queued kernel (tests/test_fake_cuda.py).
        self.seen = 0

    def update(self, output, target) -> None:
        hits = (_logits(output).argmax(dim=-1) == target).sum()
        self.correct = hits if self.correct is None else self.correct + hits
        self.seen += target.shape[0]

    def compute(self) -> dict[str, float]:
        if not self.seen:
            return {"accuracy": float("nan")}
        return {"accuracy": float(self.correct) / self.seen}


class ConfusionMatrix:
    """Counts (target, prediction) pairs on the device; `matrix()` returns a CPU tensor
    (rows = targets)."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> None:
        self.counts = None

    def update(self, output, target) -> None:
        pred = _logits(output).argmax(dim=-1)
        flat = target.long() * self.num_classes + pred.long()
        if self.counts is None:
            self.counts = torch.zeros(self.num_classes**2, dtype=torch.long, device=flat.device)
        # A scatter into a fixed-size counter, not torch.bincount: CUDA's bincount reads the
        # input's min and max on the host (two syncs per batch) to size its output, and XLA
        # cannot know that size ahead (tests/test_fake_cuda.py).
        self.counts.index_add_(0, flat, torch.ones_like(flat))

    def matrix(self) -> torch.Tensor:
        n = self.num_classes
        if self.counts is None:
            return torch.zeros(n, n, dtype=torch.long)
        return self.counts.detach().cpu().view(n, n)

    def compute(self) -> dict[str, float]:
        m = self.matrix().double()
        per_class = m.diag() / m.sum(1).clamp(min=1)
        return {"balanced_accuracy": float(per_class.mean())}
