"""The parallel scan of rounds one to five (radix 2, odd/even), kept as the baseline that
`bench.bench_scan --ops` and `bench.bench_mamba_spike` measure today's `linear_scan` against.
Same contract as `lib.models.mamba.linear_scan`; not used by the library."""

from __future__ import annotations

import torch


def _scan(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + x_t along dim 1 with h_{-1} = 0, any length L.

    Each level fuses the pairs (2k, 2k+1) into one step, solves that half-length problem for the
    odd positions, then fills in the even ones: O(L) work, 2*log2(L) dependent steps.
    """
    n = x.shape[1]
    if n == 1:
        return x.clone()  # a fresh tensor, never an alias of the input
    a_e, a_o, x_e, x_o = a[:, 0::2], a[:, 1::2], x[:, 0::2], x[:, 1::2]
    n_e, n_o = a_e.shape[1], a_o.shape[1]
    h_o = _scan(a_o * a_e[:, :n_o], torch.addcmul(x_o, a_o, x_e[:, :n_o]))
    h = torch.empty_like(x)
    h[:, 1::2] = h_o
    h[:, :1] = x[:, :1]
    # h_{2k} = a_{2k} h_{2k-1} + x_{2k}, written straight into the output (no temporaries)
    torch.addcmul(x_e[:, 1:], a_e[:, 1:], h_o[:, : n_e - 1], out=h[:, 2::2])
    return h


def _scan_reverse(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h_t = x_t + a_{t+1} * h_{t+1} along dim 1 with h_L = 0 (a_0 is unused), any length L.

    The mirror image of `_scan`, indexed so that the backward pass needs no flips or shifts.
    """
    n = x.shape[1]
    if n == 1:
        return x.clone()
    a_e, a_o, x_e, x_o = a[:, 0::2], a[:, 1::2], x[:, 0::2], x[:, 1::2]
    n_e, n_o = a_e.shape[1], a_o.shape[1]
    a_pair = a_e.clone()
    a_pair[:, 1:].mul_(a_o[:, : n_e - 1])  # links h_{2k-2} to h_{2k}
    x_pair = x_e.clone()
    x_pair[:, :n_o].addcmul_(a_o, x_o)  # x_{2k} + a_{2k+1} x_{2k+1}
    h_e = _scan_reverse(a_pair, x_pair)
    h = torch.empty_like(x)
    h[:, 0::2] = h_e
    if n % 2 == 0:  # the last step is odd and has no successor
        h[:, n - 1 :] = x[:, n - 1 :]
    torch.addcmul(x_o[:, : n_e - 1], a_e[:, 1:], h_e[:, 1:], out=h[:, 1::2][:, : n_e - 1])
    return h


class _Radix2Scan(torch.autograd.Function):
    """Parallel scan whose backward is one more parallel scan, run backwards in time."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = _scan(a, x)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, h = ctx.saved_tensors
        # dL/dx_t = g_t + a_{t+1} dL/dx_{t+1}; dL/da_t = dL/dx_t * h_{t-1} with h_{-1} = 0.
        grad_x = _scan_reverse(a, grad_h)
        grad_a = torch.empty_like(grad_x)
        grad_a[:, :1] = 0
        torch.mul(grad_x[:, 1:], h[:, :-1], out=grad_a[:, 1:])
        return grad_a, grad_x


def radix2_scan(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + x_t over dim 1, h_{-1} = 0, by the round-five radix-2 scan."""
    return _Radix2Scan.apply(a, x)
