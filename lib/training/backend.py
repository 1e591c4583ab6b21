"""The device-specific pieces of a training step, apart from the loop that calls them:
autocast, gradient scaling (GradScaler where the precision needs it), the XLA optimizer step
and loader, and per-epoch device statistics. `lib.training.loop` is the same on every device.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from lib.runtime.device import DeviceChoice
from lib.runtime.distributed import Dist


class Backend:
    """Device-specific pieces of a step: autocast, gradient scaling, XLA hooks."""

    def __init__(self, choice: DeviceChoice, device: torch.device | None = None,
                 dist: Dist | None = None) -> None:
        self.choice = choice
        self.device = device or choice.torch_device
        self.dist = dist or Dist()
        self.is_xla = choice.type == "xla"
        self.dtype = choice.precision.dtype
        self.scaler = torch.amp.GradScaler(choice.type) if choice.precision.scaler else None

    def autocast(self):
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.choice.type, dtype=self.dtype)

    def loader(self, loader):
        if self.is_xla and getattr(loader, "device", None) != self.device:
            from lib.runtime import xla

            return xla.wrap_loader(loader, self.device)
        return loader

    def to_device(self, batch):
        if self.is_xla:  # MpDeviceLoader already moved it
            return batch
        nb = self.choice.pin_memory
        return [b.to(self.device, non_blocking=nb) if torch.is_tensor(b) else b for b in batch]

    def backward_step(self, loss, model, optimizer, clip_grad: float | None) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(optimizer)
        else:
            loss.backward()
        if clip_grad:
            nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        elif self.is_xla:
            from lib.runtime import xla

            xla.optimizer_step(optimizer)
            xla.sync()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def epoch_stats(self) -> dict:
        if self.is_xla:
            from lib.runtime import xla

            return {"xla_compiles": xla.compile_count()}
        return {}
