"""Mamba (selective state space) blocks with a portable parallel scan.

The scan is pure PyTorch: no Python loop over time steps, only over the log5(L) levels of a
radix-5 recursive reduction (and the last few steps), so every shape is static and it runs
unchanged on CPU, CUDA and MPS; on XLA, where those levels would be unrolled into the graph,
one While loop (lib/kernels/linear_scan_xla.py). `linear_scan_sequential` is the step-by-step
reference the tests compare against.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import nn

from lib.base.errors import ConfigError

ScanFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# Steps fused per level of the scan, and the length solved step by step. A level of radix k
# dispatches 3k + 4 ops and divides L by k; a short sequence costs L + 3 ops step by step.
# Radix 5 with the last <= 20 steps in sequence: 124 ops forward + backward at L = 300 (the
# presets' L = 100, 300, 500 divide by 5 twice, so nothing is left over), 364 at radix 2; a
# whole Mamba block's 514 before, 274 now (`python -m bench.bench_scan --ops`).
RADIX, SEQUENTIAL_UPTO = 5, 20


def _shift(t: torch.Tensor, later: bool) -> torch.Tensor:
    """t moved one step along dim 1 in one op: later, t_{s-1} at s (0 at the start); else
    t_{s+1} at s (0 at the end). A negative pad crops the step pushed out."""
    return F.pad(t, [0, 0] * (t.dim() - 2) + ([1, -1] if later else [-1, 1]))


def _scan_into(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor, reverse: bool) -> None:
    """Write h into `out` (any strides, never an input), along dim 1 of (B, L, ...):
    forward h_t = a_t h_{t-1} + x_t with h_{-1} = 0; reverse h_t = x_t + a_t h_{t+1} with
    h_L = 0.

    Each level fuses groups of RADIX consecutive steps into one (A = the product of their a,
    X = their h from a zero start), solves that problem of L / RADIX steps straight into the
    output's every RADIX-th step, then fills in the others from the group before: O(L) work,
    the sequence never padded, every h written once where it belongs. The L % RADIX steps left
    over (at the end forward, at the start in reverse: the side that needs the others' result)
    follow step by step.
    """
    n, k = x.shape[1], RADIX
    if n <= max(SEQUENTIAL_UPTO, k):
        a_s, x_s, h = a.unbind(1), x.unbind(1), out.unbind(1)
        order = range(n - 1, -1, -1) if reverse else range(n)
        h[order[0]].copy_(x_s[order[0]])
        for prev, t in zip(order, order[1:], strict=False):
            torch.addcmul(x_s[t], a_s[t], h[prev], out=h[t])
        return
    m, r = divmod(n, k)
    body = slice(r, n) if reverse else slice(0, n - r)  # whole groups, h = 0 at their edge
    shape = (x.shape[0], m, k, *x.shape[2:])
    a_g, x_g, h_g = ((t[:, body] if r else t).view(shape).unbind(2) for t in (a, x, out))
    order = range(k - 1, -1, -1) if reverse else range(k)
    first, last = order[0], order[-1]
    coef, drive = a_g[order[1]] * a_g[first], torch.addcmul(x_g[order[1]], a_g[order[1]],
                                                            x_g[first])
    for i in order[2:]:  # in place: one group-sized tensor of each alive, never two
        torch.addcmul(x_g[i], a_g[i], drive, out=drive)
        coef.mul_(a_g[i])
    _scan_into(coef, drive, h_g[last], reverse)  # h at each group's last step, in place
    del coef, drive  # freed before the shifted copy below: peak memory no higher than radix 2
    prev = _shift(h_g[last], later=not reverse)  # the previous group's result
    for i in order[:-1]:
        prev = torch.addcmul(x_g[i], a_g[i], prev, out=h_g[i])
    if r:  # the steps left over, one by one from the body's edge
        a_s, x_s, h = a.unbind(1), x.unbind(1), out.unbind(1)
        steps = range(r - 1, -1, -1) if reverse else range(n - r, n)
        for t in steps:
            torch.addcmul(x_s[t], a_s[t], h[t + 1 if reverse else t - 1], out=h[t])


class _LinearScan(torch.autograd.Function):
    """Parallel scan whose backward is one more parallel scan, run backwards in time."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = torch.empty_like(x)  # a fresh tensor, never an alias of the input
        _scan_into(a, x, h, reverse=False)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, h = ctx.saved_tensors
        # dL/dx_t = g_t + a_{t+1} dL/dx_{t+1}; dL/da_t = dL/dx_t * h_{t-1} with h_{-1} = 0.
        # a_{t+1} at t; the last one stands in for a_L (it multiplies h_L = 0): a cat writes
        # each element once, where a pad (`_shift`) would fill with zeros first
        a_next = torch.cat([a[:, 1:], a[:, -1:]], dim=1)
        grad_x = torch.empty_like(h)
        _scan_into(a_next, grad_h, grad_x, reverse=True)
        grad_a = a_next  # its memory, no longer needed, takes dL/da (peak memory as before)
        grad_a[:, 0].zero_()
        torch.mul(grad_x[:, 1:], h[:, :-1], out=grad_a[:, 1:])
        return grad_a, grad_x


# torch.compile runs the scan as it is (a graph break): Dynamo tracing its recursion over
# shrinking lengths fails building shape guards (IndexError in produce_guards, torch 2.14, from
# L = 20 of Mamba-Spike; `python -m bench.bench_compile --workloads mamba_spike`), and the
# scan is already a few whole-tensor ops per level.
@torch.compiler.disable
def linear_scan(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Parallel h_t = a_t * h_{t-1} + x_t over dim 1 of (B, L, ...) tensors, h_{-1} = 0; on
    XLA one While loop (lib/kernels/linear_scan_xla.py): the levels here would be unrolled into
    the graph, which would then grow with L."""
    if x.device.type == "xla":
        from lib.kernels.linear_scan_xla import linear_scan_xla  # reaches torch_xla

        return linear_scan_xla(a, x)
    return _LinearScan.apply(a, x)


def linear_scan_sequential(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Reference for `linear_scan`: one Python step per time step (obviously right).

    `unbind` rather than `a[:, t]` indexing: each indexed step's backward would write a
    zero-filled gradient of the whole sequence, making the backward pass O(L^2).
    """
    h = torch.zeros_like(x[:, 0])
    hs = []
    for a_t, x_t in zip(a.unbind(1), x.unbind(1), strict=True):
        h = a_t * h + x_t
        hs.append(h)
    return torch.stack(hs, dim=1)


SCANS: dict[str, ScanFn] = {"parallel": linear_scan, "sequential": linear_scan_sequential}


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    scan: ScanFn = linear_scan,
) -> torch.Tensor:
    """Discretised selective SSM: h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t, y_t = C_t·h_t + D u_t.

    u, delta: (B, L, E); A: (E, N); B, C: (B, L, N); D: (E,) -> y: (B, L, E), in u's dtype.
    The state is computed in float32 whatever the autocast dtype (fp16 underflows in exp).
    """
    dtype = u.dtype
    u, delta, B, C = u.float(), delta.float(), B.float(), C.float()
    decay = torch.exp(rearrange(delta, "b l e -> b l e 1") * A.float())
    drive = rearrange(delta * u, "b l e -> b l e 1") * rearrange(B, "b l n -> b l 1 n")
    h = scan(decay, drive)
    y = einsum(h, C, "b l e n, b l n -> b l e") + D.float() * u
    return y.to(dtype)


@dataclass
class MambaConfig:
    """Sizes of one Mamba mixer (defaults as in the Mamba paper and Mamba-Spike's code)."""

    d_model: int = 128
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int | None = None  # None: ceil(d_model / 16)
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    scan: str = "parallel"

    def __post_init__(self) -> None:
        if self.scan not in SCANS:
            raise ConfigError(f"scan={self.scan!r} is not one of {sorted(SCANS)}; use 'parallel'.")
        if self.dt_rank is None:
            self.dt_rank = math.ceil(self.d_model / 16)
        if not 0 < self.dt_min <= self.dt_max:
            raise ConfigError(
                f"dt_min={self.dt_min}, dt_max={self.dt_max}: need 0 < dt_min <= dt_max."
            )

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model


class MambaMixer(nn.Module):
    """in_proj -> causal depthwise conv -> SiLU -> selective SSM, gated by SiLU(z) -> out_proj.

    (B, L, d_model) -> (B, L, d_model).
    """

    def __init__(self, cfg: MambaConfig):
        super().__init__()
        self.cfg = cfg
        e, n, r = cfg.d_inner, cfg.d_state, cfg.dt_rank
        self.in_proj = nn.Linear(cfg.d_model, 2 * e, bias=False)
        self.conv1d = nn.Conv1d(e, e, cfg.d_conv, groups=e, padding=cfg.d_conv - 1, bias=False)
        self.x_proj = nn.Linear(e, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, e, bias=True)
        self.out_proj = nn.Linear(e, cfg.d_model, bias=False)
        # S4D-real init: A = -(1..N) per channel, stored as log so A stays negative.
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1).float()).repeat(e, 1))
        self.D = nn.Parameter(torch.ones(e))
        self._init_dt_bias()

    def _init_dt_bias(self) -> None:
        """softplus(bias) = dt, log-uniform in [dt_min, dt_max] (the Mamba initialisation)."""
        lo, hi = math.log(self.cfg.dt_min), math.log(self.cfg.dt_max)
        dt = torch.exp(torch.rand(self.cfg.d_inner) * (hi - lo) + lo)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg, length = self.cfg, x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = self.conv1d(rearrange(u, "b l e -> b e l"))[..., :length]  # keep causal outputs
        u = F.silu(rearrange(u, "b e l -> b l e"))
        dt, B, C = self.x_proj(u).split([cfg.dt_rank, cfg.d_state, cfg.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt))
        y = selective_scan(u, delta, -torch.exp(self.A_log), B, C, self.D, SCANS[cfg.scan])
        return self.out_proj(y * F.silu(z))


class MambaBlock(nn.Module):
    """Pre-norm residual block: x + mixer(LayerNorm(x)), (B, L, d_model) -> same."""

    def __init__(self, cfg: MambaConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.mixer = MambaMixer(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mixer(self.norm(x))
