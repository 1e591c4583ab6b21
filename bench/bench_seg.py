"""Vectorised SLS loss and IRSTD metrics against straightforward per-sample versions.

Run: ``python -m bench.bench_seg`` (CPU). The per-sample references below follow the official
MSHNet code's structure (a Python loop over images, components found image by image) and are
also the ground truth of the unit tests.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from scipy import ndimage

from lib.losses.sls import SLSLoss
from lib.training.metrics_seg import IoUMetric, PdFaMetric

# ---------------------------------------------------------------- per-sample references


def reference_sls(logit: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """SLS loss of one logit map, one image at a time (as the official LLoss loop)."""
    b, _, h, w = logit.shape
    prob, target = torch.sigmoid(logit.float()), target.float()
    xs = (torch.arange(w) / w).view(1, 1, w)
    ys = (torch.arange(h) / h).view(1, h, 1)
    iou_term, loc_term = 0.0, 0.0
    for i in range(b):
        p, g = prob[i], target[i]
        inter, ps, gs = (p * g).sum(), p.sum(), g.sum()
        delta = ((ps - gs) / 2) ** 2
        omega = (torch.min(ps, gs) + delta) / (torch.max(ps, gs) + delta)
        iou_term = iou_term + omega * inter / (ps + gs - inter) / b
        px, py, gx, gy = (xs * p).mean(), (ys * p).mean(), (xs * g).mean(), (ys * g).mean()
        theta_p, theta_g = torch.atan(py / (px + 1e-8)), torch.atan(gy / (gx + 1e-8))
        angle = (4 / math.pi**2) * (theta_p - theta_g) ** 2
        dp = torch.sqrt(px * px + py * py + 1e-8)
        dg = torch.sqrt(gx * gx + gy * gy + 1e-8)
        loc_term = loc_term + (1 - torch.min(dp, dg) / (torch.max(dp, dg) + 1e-8) + angle) / b
    return 1 - iou_term + loc_term


def reference_loss(output, target: torch.Tensor) -> torch.Tensor:
    """The post-warm-up MSHNet loss built from ``reference_sls`` (mean over fused + 4 scales)."""
    fused, scales = output
    total = reference_sls(fused, target)
    for k, logit in enumerate(scales):
        if k:
            target = torch.nn.functional.max_pool2d(target, 2)
        total = total + reference_sls(logit, target)
    return total / (len(scales) + 1)


def _regions(mask: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """(centroid (y, x), area) of each 8-connected component of a 2-D mask, in label order."""
    labels, n = ndimage.label(mask, structure=np.ones((3, 3)))
    out = []
    for k in range(1, n + 1):
        ys, xs = np.nonzero(labels == k)
        out.append((np.array([ys.mean(), xs.mean()]), len(ys)))
    return out


def reference_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """mIoU, nIoU, Pd, Fa with a loop over images and over component pairs."""
    inter_sum = union_sum = targets_n = matched = false_px = pixels = 0
    ious = []
    for logit, target in zip(logits, targets, strict=True):
        pred, gt = logit[0].numpy() > 0, target[0].numpy() > 0.5
        inter, union = int((pred & gt).sum()), int((pred | gt).sum())
        inter_sum, union_sum = inter_sum + inter, union_sum + union
        ious.append(inter / union if union else 1.0)
        preds, used = _regions(pred), set()
        for centre, _ in _regions(gt):
            targets_n += 1
            for j, (p_centre, _) in enumerate(preds):
                if j not in used and np.linalg.norm(p_centre - centre) < 3:
                    used.add(j)
                    matched += 1
                    break
        false_px += sum(area for j, (_, area) in enumerate(preds) if j not in used)
        pixels += pred.size
    return {
        "mIoU": 100 * (inter_sum / union_sum if union_sum else 1.0),
        "nIoU": 100 * float(np.mean(ious)),
        "Pd": 100 * matched / targets_n if targets_n else float("nan"),
        "Fa": 1e6 * false_px / pixels,
    }


# ---------------------------------------------------------------- benchmark


def random_batch(b: int, size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and targets with 1-3 small square targets per image and noisy predictions."""
    g = torch.Generator().manual_seed(seed)
    target = torch.zeros(b, 1, size, size)
    for i in range(b):
        for _ in range(int(torch.randint(1, 4, (), generator=g))):
            y, x = torch.randint(4, size - 8, (2,), generator=g).tolist()
            target[i, 0, y : y + 4, x : x + 4] = 1
    logit = 8 * (2 * target - 1) + 3 * torch.randn(b, 1, size, size, generator=g)
    return logit, target


def _time(fn, repeat: int) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1e3


def _loss_case(b: int, size: int, fn) -> float:
    logit, target = random_batch(b, size)
    scales = [logit[..., :: 2**k, :: 2**k].clone().requires_grad_() for k in range(4)]
    fused = logit.clone().requires_grad_()
    return _time(lambda: fn((fused, scales), target).backward(), repeat=5)


def _metric_case(b: int, size: int) -> tuple[float, float]:
    logit, target = random_batch(b, size)

    def vectorised():
        for metric in (IoUMetric(), PdFaMetric()):
            metric.update(logit, target)
            metric.compute()

    return _time(vectorised, 5), _time(lambda: reference_metrics(logit, target), 5)


def main() -> None:
    torch.set_num_threads(1)
    loss = SLSLoss(warm_epochs=0)
    print(f"CPU, 1 thread, 256x256 maps, times in ms per batch (torch {torch.__version__})")
    row = "{:<34}{:>6}{:>12}{:>12}{:>10}"
    print(row.format("case", "batch", "vectorised", "per-sample", "speed-up"))
    for b in (4, 16, 32):
        fast, slow = _loss_case(b, 256, loss), _loss_case(b, 256, reference_loss)
        print(row.format("SLS loss, 5 maps, fwd+bwd", b, f"{fast:.1f}", f"{slow:.1f}",
                         f"{slow / fast:.1f}x"))
    for b in (4, 16, 32):
        fast, slow = _metric_case(b, 256)
        print(row.format("mIoU+nIoU+Pd+Fa update+compute", b, f"{fast:.1f}", f"{slow:.1f}",
                         f"{slow / fast:.1f}x"))


if __name__ == "__main__":
    main()
