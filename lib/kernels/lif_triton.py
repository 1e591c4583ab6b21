"""The spiking recurrence as two Triton kernels (CUDA sm_70+, the T4 included): the forward
loops over T inside one program per block of pixels, all C channels in registers; the backward
loops over T in reverse. The recurrent weight's and bias's gradients are one torch matmul after
the backward kernel (lif_portable.weight_grads). Same interface as lif_portable: spikes in
the input's dtype, membranes (the one tensor saved) in float32 for 16-bit inputs.

The membrane accumulates in float32 (float64 for float64 inputs, which only Triton's CPU
interpreter runs: the tests hold this path to the reference at 1e-10 that way); tl.dot needs
every dimension >= 16, so channels are padded to a power of two >= 16 by masked loads (C = 2,
odd C: zeros that never spike and carry no weight), and the dot runs at IEEE precision, not
TF32: spikes are exact in any dtype, the weight keeps its bits. beta, thr and slope are
compile-time constants (a model has one set; Triton would pass run-time floats as float32, and
a tensor of them would cost a host-to-device copy per call).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import _disable_current_modes

from lib.kernels.lif_portable import compute_dtype, weight_grads


@triton.jit
def _forward_kernel(cur_ptr, w_ptr, b_ptr, spk_ptr, mem_ptr, T, N, C, step, beta: tl.constexpr,
                    thr: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < N) & (cols[None, :] < C)
    offs = rows[:, None] * C + cols[None, :]
    acc = mem_ptr.dtype.element_ty
    # W^T (C_in, C_out): row i, column o holds W[o, i]; padding is zero
    wt = tl.load(w_ptr + cols[None, :] * C + cols[:, None],
                 mask=(cols[:, None] < C) & (cols[None, :] < C), other=0.0).to(acc)
    bias = tl.load(b_ptr + cols, mask=cols < C, other=0.0).to(acc)
    # t = 0: no recurrent term, not even its bias; no reset (U_-1 = 0 < thr)
    u = tl.load(cur_ptr + offs, mask=mask, other=0.0).to(acc)
    s = (u > thr).to(acc)
    tl.store(mem_ptr + offs, u, mask=mask)
    tl.store(spk_ptr + offs, s.to(spk_ptr.dtype.element_ty), mask=mask)
    for _ in range(1, T):
        cur_ptr += step
        mem_ptr += step
        spk_ptr += step
        i = tl.load(cur_ptr + offs, mask=mask, other=0.0).to(acc)
        rec = tl.dot(s, wt, input_precision="ieee", out_dtype=acc)
        u = beta * u + i + rec + bias[None, :] - thr * s  # reset_t has S_{t-1}'s value
        s = (u > thr).to(acc)
        tl.store(mem_ptr + offs, u, mask=mask)
        tl.store(spk_ptr + offs, s.to(spk_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _backward_kernel(grad_ptr, mem_ptr, w_ptr, dmem_ptr, T, N, C, step, last, beta: tl.constexpr,
                     thr: tl.constexpr, slope: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < N) & (cols[None, :] < C)
    offs = rows[:, None] * C + cols[None, :] + last  # start at t = T - 1
    acc = mem_ptr.dtype.element_ty
    # W (C_out, C_in) as stored: dS_t = G_t + dU_{t+1} W
    w = tl.load(w_ptr + cols[:, None] * C + cols[None, :],
                mask=(cols[:, None] < C) & (cols[None, :] < C), other=0.0).to(acc)
    du = tl.zeros((BLOCK_N, BLOCK_C), dtype=acc)
    for _ in range(T):
        g = tl.load(grad_ptr + offs, mask=mask, other=0.0).to(acc)
        u = tl.load(mem_ptr + offs, mask=mask, other=0.0)
        x = slope * tl.abs(u - thr) + 1.0
        ds = g + tl.dot(du, w, input_precision="ieee", out_dtype=acc)
        du = ds / (x * x) + beta * du
        tl.store(dmem_ptr + offs, du, mask=mask)
        offs -= step


def _launch(n: int, c: int) -> tuple[tuple[int], dict]:
    """(grid, block sizes and warps): all channels per program, fewer pixels and more warps
    when channels are many (a 128x128 weight held in registers). Untuned: no GPU measured it."""
    block_c = max(16, triton.next_power_of_2(c))
    block_n = 32 if block_c >= 128 else 64
    return (triton.cdiv(n, block_n),), dict(BLOCK_N=block_n, BLOCK_C=block_c,
                                            num_warps=8 if block_c >= 128 else 4)


def forward(cur: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, beta: float,
            threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(spikes in cur's dtype, membranes in the compute dtype), both (T, N, C)."""
    t, n, c = cur.shape
    cur = cur.contiguous()
    spk = torch.empty_like(cur)
    mem = torch.empty_like(cur, dtype=compute_dtype(cur.dtype))
    weight, bias = weight.contiguous(), bias.contiguous()
    grid, sizes = _launch(n, c)
    with _disable_current_modes():  # a launch is no aten op; the interpreter's copies aren't
        _forward_kernel[grid](cur, weight, bias, spk, mem, t, n, c, n * c, beta, threshold,
                              **sizes)
    return spk, mem


def backward(grad: torch.Tensor, mem: torch.Tensor, weight: torch.Tensor, beta: float,
             threshold: float, slope: float):
    """(d cur, d weight, d bias), as lif_portable.backward."""
    t, n, c = mem.shape
    dmem = torch.empty_like(mem)
    grid, sizes = _launch(n, c)
    grad, weight = grad.contiguous(), weight.contiguous()
    with _disable_current_modes():
        _backward_kernel[grid](grad, mem, weight, dmem, t, n, c, n * c, (t - 1) * n * c, beta,
                               threshold, slope, **sizes)
    dw, db = weight_grads(dmem, mem, threshold)
    return dmem.to(grad.dtype), dw.to(weight.dtype), db.to(weight.dtype)
