"""Scale and Location Sensitive (SLS) loss of MSHNet, vectorised over the batch.

Per image, with p = sigmoid(logit), g the binary target, |P| = sum p, |G| = sum g, I = sum p*g:
    IoU   = I / (|P| + |G| - I)
    omega = (min(|P|,|G|) + D) / (max(|P|,|G|) + D),  D = ((|P| - |G|) / 2)^2
    L_loc = 1 - min(d_p, d_g) / max(d_p, d_g) + (4 / pi^2) (theta_p - theta_g)^2
    SLS   = 1 - mean_b(omega * IoU) + mean_b(L_loc)
(d, theta) are the polar coordinates of the image's "centre", computed as in the official code:
the first moments mean(x * p), mean(y * p) with x, y in [0, 1) (not divided by the mass, so d
also grows with the predicted area).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lib.losses.warmup import OFFICIAL_WARMUP

_EPS = 1e-8  # the official code's smoothing inside the location term


def _sums(prob: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-image |P|, |G| and I, each of shape (B,)."""
    return prob.sum((1, 2, 3)), target.sum((1, 2, 3)), (prob * target).sum((1, 2, 3))


def soft_iou(prob: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image soft IoU I / (|P| + |G| - I), shape (B,); |P| > 0 since p = sigmoid(.)."""
    p, g, inter = _sums(prob, target)
    return inter / (p + g - inter)


def _centre(mass: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First moments (mean(x*m), mean(y*m)) per image, x and y in [0, 1); shapes (B,)."""
    h, w = mass.shape[-2:]
    xs = torch.arange(w, device=mass.device, dtype=mass.dtype) / w
    ys = torch.arange(h, device=mass.device, dtype=mass.dtype) / h
    m = mass.mean(1) / (h * w)  # (B, H, W); the official maps have one channel
    # marginals, then products and sums: no full-size temporaries, and no matmul, which
    # autocast would run in fp16/bf16 (the moments are ~1e-5 and need float32)
    return (m.sum(1) * xs).sum(-1), (m.sum(2) * ys).sum(-1)


def location_loss(prob: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image L_loc (length ratio + angle term), shape (B,)."""
    px, py = _centre(prob)
    gx, gy = _centre(target)
    angle = (4 / math.pi**2) * (torch.atan(py / (px + _EPS)) - torch.atan(gy / (gx + _EPS))) ** 2
    dp = torch.sqrt(px * px + py * py + _EPS)
    dg = torch.sqrt(gx * gx + gy * gy + _EPS)
    return 1 - torch.minimum(dp, dg) / (torch.maximum(dp, dg) + _EPS) + angle


def sls_loss(logit: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """SLS loss of one logit map (B, 1, H, W) against a 0/1 target of the same shape; scalar."""
    prob = torch.sigmoid(logit.float())
    target = target.float()
    p, g, inter = _sums(prob, target)
    iou = inter / (p + g - inter)
    delta = ((p - g) / 2) ** 2
    omega = (torch.minimum(p, g) + delta) / (torch.maximum(p, g) + delta)
    return 1 - (omega * iou).mean() + location_loss(prob, target).mean()


def soft_iou_loss(logit: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - mean_b soft IoU (the warm-up loss; no smoothing, as the official code); scalar."""
    return 1 - soft_iou(torch.sigmoid(logit.float()), target.float()).mean()


class SLSLoss(nn.Module):
    """MSHNet training loss on the model output ``(fused, scales)`` and a (B, 1, H, W) 0/1 mask.

    Epochs ``< warm_epochs`` (0-based, set by ``set_epoch``): soft-IoU on ``scales[0]`` only.
    Later: mean of the SLS loss on ``fused`` and on each ``scales[k]`` against the target
    max-pooled k times. ``warm_epochs`` counts warm-up epochs; the default is the official
    code's 6 (``warmup_length(5, "official")``: main.py's ``--warm-epoch 5``). A bare tensor
    output is treated as a single map (SLS after warm-up, soft-IoU before).
    """

    def __init__(self, warm_epochs: int = OFFICIAL_WARMUP) -> None:
        super().__init__()
        if warm_epochs < 0:
            raise ValueError(f"warm_epochs={warm_epochs} must be >= 0 (0 disables the warm-up)")
        self.warm_epochs = warm_epochs
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def warm(self) -> bool:
        return self.epoch < self.warm_epochs

    def forward(self, output, target: torch.Tensor) -> torch.Tensor:
        if isinstance(output, torch.Tensor):
            return (soft_iou_loss if self.warm else sls_loss)(output, target)
        fused, scales = output
        if self.warm:
            return soft_iou_loss(scales[0], target)
        total = sls_loss(fused, target)
        for k, logit in enumerate(scales):
            if k:
                target = F.max_pool2d(target, 2)
            total = total + sls_loss(logit, target)
        return total / (len(scales) + 1)
