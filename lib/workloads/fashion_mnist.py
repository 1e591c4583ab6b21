"""Fashion-MNIST quickstart: its parameters and the pieces its notebook assembles."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from lib.config import RunConfig
from lib.metrics import Accuracy, ConfusionMatrix
from lib.models.cnn import CNN, CNNConfig
from lib.train import Task


@dataclass
class FashionConfig(RunConfig):
    """pytorch/examples' MNIST defaults: Adadelta lr 1.0, StepLR gamma 0.7, 14 epochs."""

    WORKLOAD = "fashion_mnist"

    epochs: int = 14
    lr: float = 1.0
    gamma: float = 0.7  # StepLR decay per epoch

    def validate(self) -> None:
        if not 0 < self.gamma <= 1:
            raise ValueError(f"GAMMA={self.gamma!r} must be in (0, 1]; e.g. GAMMA = 0.7.")


def build_task(cfg: FashionConfig, device: torch.device) -> tuple[Task, dict]:
    """The CNN, Adadelta and StepLR as a `Task`, plus the model config for checkpoints."""
    model_cfg = CNNConfig()
    model = CNN(model_cfg).to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=cfg.gamma)
    task = Task(model, nn.functional.cross_entropy, optimizer,
                metrics=lambda: [Accuracy(), ConfusionMatrix(model_cfg.num_classes)],
                scheduler=scheduler, monitor="test_accuracy")
    return task, asdict(model_cfg)
