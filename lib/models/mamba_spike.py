"""Mamba-Spike (Qin & Liu, 2024): spiking conv front-end -> firing-rate interface -> Mamba.

Input event frames (B, T, 2, H, W) with ON/OFF polarity as channels; output logits (B, classes).
Sizes follow the official code: N-MNIST ~1.03 M parameters, DVS Gesture / CIFAR10-DVS ~36 M.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import snntorch as snn
import torch
import torch.nn.functional as F
from einops import rearrange
from snntorch import surrogate
from torch import nn

from lib.base.errors import ConfigError
from lib.kernels.lif import lif_multistep, lif_notes  # noqa: F401 (workload: lif_notes)
from lib.models.mamba import SCANS, MambaBlock, MambaConfig

PRESETS: dict[str, dict] = {
    "nmnist": dict(n_classes=10, input_hw=(34, 34), spike_channels=64, d_model=128, n_layers=4),
    "dvsgesture": dict(
        n_classes=11, input_hw=(128, 128), spike_channels=128, d_model=256, n_layers=6
    ),
    "cifar10dvs": dict(
        n_classes=10, input_hw=(128, 128), spike_channels=128, d_model=256, n_layers=6
    ),
}


@dataclass
class MambaSpikeConfig:
    """Model sizes; `MambaSpikeConfig.preset(name, input_hw=...)` gives the paper's sizes."""

    n_classes: int = 10
    input_hw: tuple[int, int] = (34, 34)  # frame (H, W) after any downsampling
    in_channels: int = 2
    hidden_channels: int = 32
    spike_channels: int = 64
    d_model: int = 128
    n_layers: int = 4
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    beta: float = 0.97  # membrane decay per step
    threshold: float = 1.0
    surrogate_slope: float = 25.0  # fast-sigmoid surrogate gradient slope
    rate_window: int = 5  # steps averaged by the spike-rate interface
    scan: str = "parallel"

    def __post_init__(self) -> None:
        self.input_hw = tuple(int(v) for v in self.input_hw)
        if min(self.input_hw) < 4:
            raise ConfigError(
                f"input_hw={self.input_hw}: frames must be at least 4x4 (two 2x max-pools); "
                "use a smaller DOWNSAMPLE factor."
            )
        if not 0.0 <= self.beta <= 1.0:
            raise ConfigError(f"beta={self.beta} must lie in [0, 1] (membrane decay per step).")
        if self.threshold <= 0:
            raise ConfigError(f"threshold={self.threshold} must be > 0 (a neuron at rest, U = 0, "
                              "is below it); use a positive threshold such as 1.0.")
        if self.rate_window < 1:
            raise ConfigError(f"rate_window={self.rate_window} must be >= 1 time step.")
        if self.scan not in SCANS:
            raise ConfigError(f"scan={self.scan!r} is not one of {sorted(SCANS)}; use 'parallel'.")

    @classmethod
    def preset(cls, name: str, **overrides) -> MambaSpikeConfig:
        """Sizes of the official code for 'nmnist', 'dvsgesture' or 'cifar10dvs', plus overrides."""
        if name not in PRESETS:
            raise ConfigError(f"preset {name!r} is unknown; expected one of {sorted(PRESETS)}.")
        return replace(cls(), **{**PRESETS[name], **overrides})

    @property
    def feature_hw(self) -> tuple[int, int]:
        """(H, W) of the front-end output: two 2x max-pools, flooring like the official code."""
        return self.input_hw[0] // 4, self.input_hw[1] // 4

    def mamba(self) -> MambaConfig:
        return MambaConfig(
            d_model=self.d_model,
            d_state=self.d_state,
            d_conv=self.d_conv,
            expand=self.expand,
            scan=self.scan,
        )


def _leaky(cfg: MambaSpikeConfig) -> snn.Leaky:
    """An snntorch LIF neuron (subtractive reset) whose membrane is passed explicitly."""
    lif = snn.Leaky(
        beta=cfg.beta,
        threshold=cfg.threshold,
        spike_grad=surrogate.fast_sigmoid(slope=cfg.surrogate_slope),
    )
    # snntorch keeps every neuron ever built in a class-level list (used only with
    # init_hidden=True); dropping ours lets finished models be garbage-collected.
    snn.SpikingNeuron.instances.remove(lif)
    return lif


class SpikingConv(nn.Module):
    """3x3 conv (+ 2x max-pool) feeding LIF neurons with a 1x1 recurrent conv of last spikes.

    I_t = pool(conv(x_t)) + rec(S_{t-1})  (no recurrent term at t = 0)
    U_t = beta U_{t-1} + I_t - thr * [U_{t-1} > thr],  S_t = [U_t > thr],  U_{-1} = 0.
    """

    def __init__(self, in_ch: int, out_ch: int, pool: bool, cfg: MambaSpikeConfig):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.pool = nn.MaxPool2d(2) if pool else nn.Identity()
        self.rec = nn.Conv2d(out_ch, out_ch, 1)
        self.lif = _leaky(cfg)  # `step`'s neuron; its buffers stay in checkpoints
        self.beta, self.threshold = cfg.beta, cfg.threshold
        self.slope = cfg.surrogate_slope

    def currents(self, x: torch.Tensor) -> torch.Tensor:
        """Feed-forward current of all steps at once: (B, T, C, H, W) -> (B, T, C', H', W')."""
        b = x.shape[0]
        y = self.pool(self.conv(rearrange(x, "b t c h w -> (b t) c h w")))
        return rearrange(y, "(b t) c h w -> b t c h w", b=b)

    def step(
        self, cur: torch.Tensor, spk_prev: torch.Tensor | None, mem: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One time step with snntorch's Leaky: (feed-forward current, previous spikes or None,
        membrane) -> (S, U). The definition `forward`'s fused op is tested equal to."""
        if spk_prev is not None:
            cur = cur + self.rec(spk_prev)
        return self.lif(cur, mem)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C, H, W) frames or spikes -> (B, T, C', H', W') spikes in {0, 1}."""
        b, _, _, h, w = (cur := self.currents(x)).shape
        # All T steps as one op (lib/kernels): pixels as rows, so the 1x1 recurrent conv is a
        # (pixels, C) x (C, C) matmul per step, inside one kernel or a loop without autograd.
        spikes = lif_multistep(rearrange(cur, "b t c h w -> t (b h w) c"),
                               self.rec.weight.flatten(1), self.rec.bias, self.beta,
                               self.threshold, self.slope)
        return rearrange(spikes, "t (b h w) c -> b t c h w", b=b, h=h, w=w)


class SpikingFrontEnd(nn.Module):
    """Three spiking conv layers 2 -> 32 -> 32 -> C_s, max-pool after the first two."""

    def __init__(self, cfg: MambaSpikeConfig):
        super().__init__()
        c_in, c_h, c_s = cfg.in_channels, cfg.hidden_channels, cfg.spike_channels
        self.layers = nn.ModuleList(
            [
                SpikingConv(c_in, c_h, True, cfg),
                SpikingConv(c_h, c_h, True, cfg),
                SpikingConv(c_h, c_s, False, cfg),
            ]
        )

    def forward(self, x: torch.Tensor, return_all: bool = False):
        """(B, T, 2, H, W) -> spikes (B, T, C_s, H/4, W/4); with return_all, every layer's.

        Integer frames (the data's uint8 event counts) become float here, on the device."""
        if not x.is_floating_point():
            x = x.to(self.layers[0].conv.weight.dtype)
        outs = []
        for layer in self.layers:
            x = layer(x)
            outs.append(x)
        return outs if return_all else x


def causal_rate(x: torch.Tensor, window: int) -> torch.Tensor:
    """Mean of the last `window` steps along dim 1 (zeros before t = 0): (B, T, F) -> same."""
    c = torch.cumsum(x.float(), dim=1)
    past = F.pad(c, (0, 0, window, 0))[:, : c.shape[1]]  # c_{t-window}, 0 before the start
    return ((c - past) / window).to(x.dtype)


class MambaSpike(nn.Module):
    """Front-end -> windowed firing rate -> Linear -> Mamba blocks -> mean over time -> head."""

    def __init__(self, cfg: MambaSpikeConfig):
        super().__init__()
        self.cfg = cfg
        h, w = cfg.feature_hw
        self.frontend = SpikingFrontEnd(cfg)
        self.input_proj = nn.Linear(cfg.spike_channels * h * w, cfg.d_model)
        self.blocks = nn.ModuleList(MambaBlock(cfg.mamba()) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def _check_input(self, x: torch.Tensor) -> None:
        expected = (self.cfg.in_channels, *self.cfg.input_hw)
        if x.dim() != 5 or tuple(x.shape[2:]) != expected:
            raise ConfigError(
                f"input of shape {tuple(x.shape)} does not match (B, T, {expected[0]}, "
                f"{expected[1]}, {expected[2]}); build the config with input_hw equal to the "
                "frame size the data produces (after DOWNSAMPLE)."
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, 2, H, W) event frames -> (B, n_classes) logits."""
        self._check_input(x)
        spikes = rearrange(self.frontend(x), "b t c h w -> b t (c h w)")
        # The rate is linear in the spikes, so project first and average the d_model-wide
        # result: same numbers as Linear(rate(spikes)), without a (B, T, C*H*W) float copy.
        z = causal_rate(F.linear(spikes, self.input_proj.weight), self.cfg.rate_window)
        z = z + self.input_proj.bias
        for block in self.blocks:
            z = block(z)
        return self.head(self.norm(z.mean(dim=1)))


@torch.no_grad()
def firing_rates(model: MambaSpike, x: torch.Tensor) -> dict[str, float]:
    """Mean spikes per neuron per step of each front-end layer, and the share of silent neurons."""
    stats: dict[str, float] = {}
    for i, spikes in enumerate(model.frontend(x, return_all=True), start=1):
        stats[f"layer{i}_rate"] = spikes.mean().item()
        stats[f"layer{i}_silent"] = (spikes.sum(dim=1) == 0).float().mean().item()
    return stats


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameter_count(cfg: MambaSpikeConfig) -> int:
    """Parameters of `MambaSpike(cfg)` without allocating its input projection (33.5 M of the
    36.25 M at 128x128): the model at 4x4 frames, plus the projection's missing rows."""
    small = count_parameters(MambaSpike(replace(cfg, input_hw=(4, 4))))
    h, w = cfg.feature_hw
    return small + cfg.spike_channels * (h * w - 1) * cfg.d_model


# Bytes autograd keeps per recording and frame for the backward pass in float32, measured here
# (the saved tensors of a training forward on the CPU, tests/test_mamba_spike_model.py): about
# 328 per input pixel (the 32-channel spiking layers at full and half resolution: the convs'
# inputs, pooling, the fused LIF op's float32 membranes, from which its backward recomputes the
# spikes), 8 per element of the last layer's spikes (its membranes, the projection's input),
# and 180 per inner channel of each Mamba block at d_state 16 (the parallel scan's states).
# Before the fused op (issue 50) they were 375 and 18: snntorch kept each step's spikes too.
BYTES_PER_PIXEL, BYTES_PER_SPIKE, BYTES_PER_INNER = 328, 8, 180


def activation_bytes(cfg: MambaSpikeConfig, batch: int, frames: int) -> int:
    """Estimated float32 activation memory of one training step on `batch` recordings of
    `frames` frames (weights, optimizer state and workspaces not included)."""
    (h, w), (fh, fw) = cfg.input_hw, cfg.feature_hw
    per_frame = (BYTES_PER_PIXEL * h * w * cfg.hidden_channels / 32
                 + BYTES_PER_SPIKE * cfg.spike_channels * fh * fw
                 + BYTES_PER_INNER * cfg.n_layers * cfg.expand * cfg.d_model * cfg.d_state / 16)
    return round(batch * frames * per_frame)
