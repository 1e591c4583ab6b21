"""MSHNet (Liu et al., CVPR 2024): a U-Net with attention residual blocks and a multi-scale head.

Layout as the official code (ying-fu/MSHNet): a 1x1 stem, encoder 16/32/64/128 and a 256-wide
middle, max-pool down, bilinear x2 (align_corners=True) up with skip concatenation, every stage
built from residual blocks with channel and spatial attention. About 4.07 M parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lib.base.errors import ConfigError


@dataclass
class MSHNetConfig:
    """Sizes of MSHNet; the defaults are the paper's model."""

    in_channels: int = 3
    widths: tuple[int, ...] = (16, 32, 64, 128, 256)  # stem/encoder_0, encoder_1..3, middle
    blocks: tuple[int, ...] = (2, 2, 2, 2)  # residual blocks in encoder_1..3 and the middle
    ca_ratio: int = 16  # channel-attention bottleneck: width // ca_ratio (at least 1)
    sa_kernel: int = 7  # spatial-attention kernel size

    def __post_init__(self) -> None:
        if len(self.widths) != 5 or len(self.blocks) != 4:
            raise ConfigError(
                f"MSHNetConfig needs 5 widths and 4 block counts, got widths={self.widths} "
                f"blocks={self.blocks}; use e.g. widths=(16, 32, 64, 128, 256), blocks=(2, 2, 2, 2)"
            )


class ChannelAttention(nn.Module):
    """CBAM channel gate: sigmoid(MLP(avgpool x) + MLP(maxpool x)), shape (B, C, 1, 1)."""

    def __init__(self, channels: int, ratio: int) -> None:
        super().__init__()
        hidden = max(channels // ratio, 1)
        self.mlp = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False),
            nn.ReLU(),
            nn.Conv2d(hidden, channels, 1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        avg = self.mlp(F.adaptive_avg_pool2d(x, 1))
        mx = self.mlp(F.adaptive_max_pool2d(x, 1))
        return torch.sigmoid(avg + mx)


class SpatialAttention(nn.Module):
    """CBAM spatial gate: sigmoid(conv_k([mean_c x, max_c x])), shape (B, 1, H, W)."""

    def __init__(self, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 1, kernel, padding=kernel // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], dim=1)
        return torch.sigmoid(self.conv(pooled))


class AttentionResBlock(nn.Module):
    """relu(SA(CA(body(x))) + shortcut(x)), body = conv3-BN-ReLU-conv3-BN.

    The shortcut is a 1x1 conv + BN when the widths differ, else the identity.
    """

    def __init__(self, cin: int, cout: int, cfg: MSHNetConfig) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
        )
        self.shortcut = (
            nn.Sequential(nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout))
            if cin != cout
            else nn.Identity()
        )
        self.ca = ChannelAttention(cout, cfg.ca_ratio)
        self.sa = SpatialAttention(cfg.sa_kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        out = self.ca(out) * out
        out = self.sa(out) * out
        return F.relu(out + self.shortcut(x))


def _stage(cin: int, cout: int, n: int, cfg: MSHNetConfig) -> nn.Sequential:
    """n residual blocks, the first one changing the width from cin to cout."""
    return nn.Sequential(*[AttentionResBlock(cin if k == 0 else cout, cout, cfg) for k in range(n)])


def _up(x: torch.Tensor, factor: int) -> torch.Tensor:
    return F.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=True)


class MSHNet(nn.Module):
    """MSHNet. Input (B, C_in, H, W) with H, W multiples of 16.

    forward returns ``(fused, scales)``: ``fused`` (B, 1, H, W) logits of the 3x3 fusion of all
    heads, and ``scales`` a list of four logit maps at H, H/2, H/4, H/8 (B, 1, H/2^k, W/2^k).
    Every head is always computed, so the graph is static (XLA); the warm-up phase of the
    official training only chooses which of them the loss and metrics read (``scales[0]``).
    """

    def __init__(self, cfg: MSHNetConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg = cfg or MSHNetConfig()
        w, b = cfg.widths, cfg.blocks
        self.stem = nn.Conv2d(cfg.in_channels, w[0], 1)
        # encoders[i] has width w[i]; encoder_0 has a single block, as the official code.
        deeper = [_stage(w[i - 1], w[i], b[i - 1], cfg) for i in (1, 2, 3)]
        self.encoders = nn.ModuleList([_stage(w[0], w[0], 1, cfg), *deeper])
        self.middle = _stage(w[3], w[4], b[3], cfg)
        # decoders[i] produces width w[i] from skip w[i] + upsampled w[i+1]; decoder_0 has 1 block.
        deeper = [_stage(w[i] + w[i + 1], w[i], b[i - 1], cfg) for i in (1, 2, 3)]
        self.decoders = nn.ModuleList([_stage(w[0] + w[1], w[0], 1, cfg), *deeper])
        self.heads = nn.ModuleList([nn.Conv2d(w[i], 1, 1) for i in range(4)])
        self.fuse = nn.Conv2d(4, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if x.shape[-1] % 16 or x.shape[-2] % 16:
            raise ConfigError(
                f"MSHNet input size {tuple(x.shape[-2:])} must be a multiple of 16 in height and "
                "width (four 2x poolings); use a base/crop size such as 256"
            )
        skips, h = [], self.stem(x)
        for i, enc in enumerate(self.encoders):
            h = enc(h if i == 0 else F.max_pool2d(h, 2))
            skips.append(h)
        h = self.middle(F.max_pool2d(h, 2))
        feats = [h] * 4
        for i in (3, 2, 1, 0):
            h = feats[i] = self.decoders[i](torch.cat([skips[i], _up(h, 2)], dim=1))
        scales = [head(f) for head, f in zip(self.heads, feats, strict=True)]
        full_res = [scales[0]] + [_up(s, 2**k) for k, s in enumerate(scales[1:], start=1)]
        return self.fuse(torch.cat(full_res, dim=1)), scales


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
