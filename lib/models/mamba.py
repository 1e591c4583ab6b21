"""Mamba (selective state space) blocks with a portable parallel scan.

The scan is pure PyTorch: no Python loop over time steps, only over the log2(L) levels of an
odd/even recursive doubling, so every shape is static and it runs unchanged on CPU, CUDA, MPS
and XLA. `linear_scan_sequential` is the step-by-step reference the tests compare against.
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


class _LinearScan(torch.autograd.Function):
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


# torch.compile runs the scan as it is (a graph break): Dynamo tracing its recursion over
# halving lengths fails building shape guards (IndexError in produce_guards, torch 2.14, from
# L = 20 of Mamba-Spike; `python -m bench.bench_compile --workloads mamba_spike`), and the
# scan is already a few whole-tensor ops per level.
@torch.compiler.disable
def linear_scan(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Parallel h_t = a_t * h_{t-1} + x_t over dim 1 of (B, L, ...) tensors, h_{-1} = 0."""
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
