"""The spiking recurrence on any device torch runs on: a forward loop and a hand-written
backward loop (BPTT through the fast-sigmoid surrogate), no autograd graph of T steps.

State is laid out (T, N, C), N = B*H*W pixels, so the 1x1 recurrent conv is one (N, C) x (C, C)
matmul per step. Three aten ops per step forward and three backward (a training step's launch
count is its op count on a GPU-like device); everything else runs once for all T. Half inputs
compute in float32 (the membrane is a running sum), spikes come back in the input's dtype.
"""

from __future__ import annotations

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for 16-bit inputs, the input's dtype otherwise (float32, float64)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@torch.no_grad()
def forward(cur: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, beta: float,
            threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(spikes in cur's dtype, membranes U in the compute dtype), both (T, N, C)."""
    dt = compute_dtype(cur.dtype)
    # I_t + b in the compute dtype: the t > 0 steps' start; contiguous whatever cur's strides
    mem = torch.add(cur, bias.to(dt), out=cur.new_empty(cur.shape, dtype=dt))
    mem[0] = cur[0]  # no recurrent term, not even its bias, at t = 0
    spk = torch.empty_like(mem)
    # reset_t has the value of S_{t-1} (both are [U_{t-1} > thr]), so the subtractive reset
    # folds into the recurrent matmul: S_{t-1} (W^T - thr I). Forward only: the backward
    # treats the reset as detached, as snntorch does.
    w_reset = weight.to(dt).t() - threshold * torch.eye(weight.shape[0], dtype=dt,
                                                         device=weight.device)
    us, ss = mem.unbind(0), spk.unbind(0)
    torch.gt(us[0], threshold, out=ss[0])
    for t in range(1, len(us)):
        us[t].addmm_(ss[t - 1], w_reset)
        us[t].add_(us[t - 1], alpha=beta)
        torch.gt(us[t], threshold, out=ss[t])
    return spk.to(cur.dtype), mem


def surrogate(mem: torch.Tensor, threshold: float, slope: float) -> torch.Tensor:
    """dS/dU of every step at once: 1 / (slope |U - thr| + 1)^2 (snntorch's fast sigmoid)."""
    return (mem - threshold).abs_().mul_(slope).add_(1.0).square_().reciprocal_()


def weight_grads(dmem: torch.Tensor, mem: torch.Tensor,
                 threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(dW, db) summed over pixels and t >= 1 as one matmul: dU_t^T S_{t-1}, sum of dU_t;
    the spikes recomputed from the membranes (S = [U > thr]) rather than kept."""
    c = dmem.shape[-1]
    d = dmem[1:].reshape(-1, c)
    spk = (mem[:-1].reshape(-1, c) > threshold).to(d.dtype)
    return d.t().mm(spk), d.sum(0)


@torch.no_grad()
def backward(grad: torch.Tensor, mem: torch.Tensor, weight: torch.Tensor, beta: float,
             threshold: float, slope: float):
    """(d cur, d weight, d bias) from the spikes' gradient `grad` (T, N, C) and what forward
    returned: dS_t = G_t + dU_{t+1} W, dU_t = dS_t sg_t + beta dU_{t+1}, dI_t = dU_t."""
    dt = mem.dtype
    w = weight.to(dt)
    sg = surrogate(mem, threshold, slope)
    dmem = torch.empty_like(mem)
    scratch = torch.empty_like(mem[0])
    gs, sgs, ds = grad.to(dt).unbind(0), sg.unbind(0), dmem.unbind(0)
    torch.mul(gs[-1], sgs[-1], out=ds[-1])
    for t in range(len(ds) - 2, -1, -1):
        torch.addmm(gs[t], ds[t + 1], w, out=scratch)
        torch.mul(scratch, sgs[t], out=ds[t])
        ds[t].add_(ds[t + 1], alpha=beta)
    dw, db = weight_grads(dmem, mem, threshold)
    return dmem.to(grad.dtype), dw.to(weight.dtype), db.to(weight.dtype)
