"""The spiking layer's recurrence written once in plain torch: the definition of the math.

Every other path (lib/kernels/lif_portable.py, lif_triton.py) is tested equal to this loop, and
this loop equal to snntorch's `Leaky` stepped the way SpikingConv stepped it (subtractive reset,
fast-sigmoid surrogate; tests/test_spiking_kernels.py). Autograd records every step: slow, but
it runs on any device, XLA included (the loop is traced like any other Python loop).

With I_t the feed-forward current, W, b the 1x1 recurrent conv and U_{-1} = 0:
    reset_t = [U_{t-1} > thr]                 (no gradient: snntorch detaches it)
    U_t = beta U_{t-1} + I_t + (W S_{t-1} + b if t > 0) - thr reset_t
    S_t = [U_t > thr],  dS_t/dU_t := 1 / (slope |U_t - thr| + 1)^2   (the surrogate)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _Spike(torch.autograd.Function):
    """Heaviside of `shifted` = U - thr forward, the fast-sigmoid surrogate backward."""

    @staticmethod
    def forward(ctx, shifted: torch.Tensor, slope: float) -> torch.Tensor:
        ctx.save_for_backward(shifted)
        ctx.slope = slope
        return (shifted > 0).to(shifted.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (shifted,) = ctx.saved_tensors
        return grad / (ctx.slope * shifted.abs() + 1.0) ** 2, None


def lif_reference(cur: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, beta: float,
                  threshold: float, slope: float) -> torch.Tensor:
    """Spikes (T, N, C) of currents `cur` (T, N, C), recurrent `weight` (C, C) and `bias` (C,),
    in cur's dtype; differentiable in cur, weight and bias through autograd."""
    mem = torch.zeros_like(cur[0])
    spk, out = None, []
    for cur_t in cur.unbind(0):
        reset = (mem - threshold > 0).to(cur.dtype)  # a new tensor, outside the graph
        if spk is not None:
            cur_t = cur_t + F.linear(spk, weight.to(spk.dtype), bias.to(spk.dtype))
        mem = beta * mem + cur_t - reset * threshold
        spk = _Spike.apply(mem - threshold, slope)
        out.append(spk)
    return torch.stack(out)
