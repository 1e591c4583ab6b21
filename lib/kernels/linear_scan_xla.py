"""Mamba's linear recurrence h_t = a_t h_{t-1} + x_t on XLA as one loop: torch_xla's `scan`
(an XLA While op whose body compiles once, whatever the length L), with autograd through it.

lib/models/mamba.py's parallel scan is whole-tensor ops over log5(L) levels plus a sequential
tail of up to 20 steps, written in Python: on XLA every level and tail step is graph, so the
graph and its compile time grow with L (= T, Mamba-Spike's time steps: 4,946 HLO instructions
of its Mamba blocks at T = 20, 8,930 at T = 300, BENCHMARKS.md). Here one step is traced once;
tests/test_xla_lif_scan.py holds it equal to `linear_scan_sequential` on the CPU.
"""

from __future__ import annotations

import torch

from lib.runtime import xla


def _step(h: torch.Tensor, step: tuple[torch.Tensor, torch.Tensor]):
    a_t, x_t = step
    h = a_t * h + x_t
    return h, h


def linear_scan_xla(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h (B, L, ...) with h_t = a_t h_{t-1} + x_t along dim 1, h_{-1} = 0, for XLA tensors
    `a`, `x` of one shape; differentiable in both."""
    with torch.autocast(x.device.type, enabled=False):  # the state's dtype is the caller's
        _, h = xla.scan(_step, torch.zeros_like(x[:, 0]), (a.movedim(1, 0), x.movedim(1, 0)),
                        pure=True)
    return h.movedim(0, 1)
