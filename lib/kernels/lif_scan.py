"""The LIF recurrence on XLA as one loop: torch_xla's `scan` (an XLA While op whose body is
compiled once, whatever T), with autograd through it.

The reference loop (lib/kernels/lif_reference.py) is unrolled into the XLA graph: every step
of every layer, forward and backward, is graph nodes, so compile time grows with T (191 s at
T = 5, 1,299 s at T = 100 for the N-MNIST preset on XLA's CPU client). Here the step is traced
once by AOTAutograd into a forward and a backward body that XLA runs T times.

The step is the reference's, op for op, so its spikes are the reference's:
    reset_t = [U_{t-1} > thr]                 (a comparison: no gradient, as snntorch's)
    U_t = beta U_{t-1} + I_t + (W S_{t-1} + b if t > 0) - thr reset_t
    S_t = [U_t > thr]
with the surrogate written without a custom autograd Function (which AOTAutograd cannot trace
inside `scan`): S = H(x) + (x - x.detach()) / (slope |x| + 1)^2.detach(), x = U - thr. The
second term is exactly 0 forward (x - x), and its derivative is the division's, grad /
(slope |x| + 1)^2: the reference's surrogate, the same ops on the same values (it is the
derivative of the fast sigmoid's x / (1 + slope |x|)). The weights ride in the carry, so
their gradients add up over the steps inside the backward loop.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from lib.runtime import xla


def _spike(shifted: torch.Tensor, slope: float) -> torch.Tensor:
    """Heaviside of `shifted` forward; its gradient is the reference's fast-sigmoid surrogate."""
    denom = (slope * shifted.abs() + 1.0) ** 2
    return (shifted > 0).to(shifted.dtype) + (shifted - shifted.detach()) / denom.detach()


def _matmul_dtype(cur: torch.Tensor) -> torch.dtype:
    """The dtype the reference's F.linear computes in: autocast's where it is on (the TPU
    notebook's bf16), else the spikes' (cur's). The loop runs with autocast off, so it casts
    itself, as autocast would have."""
    kind = cur.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return cur.dtype


@functools.cache
def _step(beta: float, threshold: float, slope: float, mm: torch.dtype):
    """The loop's body for these constants: one function per set, so torch_xla traces it once
    per input shape (its cache keys on the function; `is_fn_pure`) rather than every call."""

    def step(carry, x):
        mem, spk, w, b = carry
        cur_t, recurrent = x
        reset = (mem - threshold > 0).to(mem.dtype)
        rec = F.linear(spk.to(mm), w.to(mm), b.to(mm))
        cur_t = torch.where(recurrent, cur_t + rec, cur_t)
        mem = beta * mem + cur_t - reset * threshold
        spk = _spike(mem - threshold, slope)
        return (mem, spk, w, b), spk

    return step


def lif_scan(cur: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, beta: float,
             threshold: float, slope: float) -> torch.Tensor:
    """Spikes (T, N, C) of currents `cur` (T, N, C) on an XLA device, recurrent `weight`
    (C, C) and `bias` (C,): lif_reference's values, as one XLA loop; differentiable in cur,
    weight and bias. The caller (lif_multistep) has checked the shapes and threshold."""
    step = _step(float(beta), float(threshold), float(slope), _matmul_dtype(cur))
    later = torch.arange(cur.shape[0], device=cur.device) > 0  # t > 0: the recurrent term
    zeros = torch.zeros_like(cur[0])
    with torch.autocast(cur.device.type, enabled=False):  # the step casts as autocast would
        _, spikes = xla.scan(step, (zeros, zeros, weight, bias), (cur, later), pure=True)
    return spikes
