"""The small CNN of pytorch/examples' MNIST script, built from a dataclass config."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class CNNConfig:
    in_channels: int = 1
    num_classes: int = 10
    width: int = 32  # channels of the first conv; the second has twice as many
    hidden: int = 128
    image_size: int = 28


class CNN(nn.Module):
    """(B, C, H, W) images -> (B, num_classes) logits: two 3x3 convs, max-pool, two linears."""

    def __init__(self, cfg: CNNConfig = CNNConfig()) -> None:
        super().__init__()
        w, side = cfg.width, (cfg.image_size - 4) // 2
        self.features = nn.Sequential(
            nn.Conv2d(cfg.in_channels, w, 3), nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
        )
        self.head = nn.Sequential(
            nn.Linear(2 * w * side * side, cfg.hidden), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(cfg.hidden, cfg.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
