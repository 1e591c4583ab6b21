"""ResNet-18 for 32x32 images: torchvision's ResNet with a 3x3 stride-1 stem and no max-pool.

ImageNet's 7x7 stride-2 stem plus max-pool would shrink a 32x32 image to 8x8 before the
first block; the CIFAR variant keeps 32x32 there, so the last stage sees 4x4 maps.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from lib.base.errors import ConfigError


@dataclass(frozen=True)
class ResNetConfig:
    num_classes: int = 10
    in_channels: int = 3
    zero_init_residual: bool = False  # start each block as identity (Goyal et al. 2017)

    def __post_init__(self) -> None:
        if self.num_classes < 2 or self.in_channels < 1:
            raise ConfigError(f"ResNetConfig(num_classes={self.num_classes}, in_channels="
                             f"{self.in_channels}): expected num_classes >= 2 and "
                             "in_channels >= 1.")


class CifarResNet18(ResNet):
    """(B, C, 32, 32) images -> (B, num_classes) logits; 11.17 M parameters for 10 classes."""

    def __init__(self, cfg: ResNetConfig = ResNetConfig()) -> None:
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=cfg.num_classes,
                         zero_init_residual=cfg.zero_init_residual)
        self.cfg = cfg
        self.conv1 = nn.Conv2d(cfg.in_channels, 64, kernel_size=3, stride=1, padding=1,
                               bias=False)
        # torchvision's own initialisation for convs, applied to the replaced stem.
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.maxpool = nn.Identity()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
