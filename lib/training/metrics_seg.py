"""Infrared small-target metrics: dataset-level IoU ("mIoU"), nIoU, Pd and Fa.

All follow the Metric protocol (reset / update(output, target) / compute -> dict of floats).
A prediction is ``logit > 0``, a target pixel is ``target > 0.5``. Units match the papers:
mIoU, nIoU and Pd in percent, Fa (the official code's count) and Fa_all (every unmatched
predicted pixel) in units of 1e-6. Every number is a sum over images divided
at the end, so results do not depend on the batch size (the official Pd/Fa needs batch 1).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import ndimage

from lib.losses.warmup import OFFICIAL_WARMUP

# 8-connectivity inside each image and none across the batch axis, so one scipy call labels a
# whole batch and components never join two images.
_STRUCTURE = np.zeros((3, 3, 3), dtype=bool)
_STRUCTURE[1] = True


def select_prediction(output, warm: bool = False) -> torch.Tensor:
    """The logit map to score: ``scales[0]`` in warm-up, else ``fused``; tensors pass through."""
    if isinstance(output, torch.Tensor):
        return output
    fused, scales = output
    return scales[0] if warm else fused


def _as_masks(logit: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary (B, H, W) prediction and target masks."""
    b, (h, w) = logit.shape[0], logit.shape[-2:]
    if target.numel() != logit.numel():
        raise ValueError(
            f"target shape {tuple(target.shape)} does not match prediction {tuple(logit.shape)}; "
            "expected one (B, 1, H, W) mask per image at the prediction's size"
        )
    return (logit > 0).reshape(b, h, w), (target > 0.5).reshape(b, h, w)


class IoUMetric:
    """mIoU = sum_i |P_i & G_i| / sum_i |P_i | G_i| over the set; nIoU = mean_i IoU_i.

    An image with neither prediction nor target scores IoU 1 (nothing to find, nothing found);
    the same rule gives mIoU 100 for a set without targets or predictions. State stays on the
    output's device until ``compute``.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.counts = None  # int64 device [intersection, union] pixels (MPS has no f64)
        self.iou_sum = None  # float32 device scalar, sum of per-image IoU
        self.images = 0  # a Python int: batch sizes are known on the host without a sync

    def update(self, output, target: torch.Tensor) -> None:
        pred, gt = _as_masks(select_prediction(output), target)
        inter = (pred & gt).sum((1, 2))
        union = (pred | gt).sum((1, 2))
        iou = torch.where(union > 0, inter / union.clamp(min=1), 1.0).float()
        counts = torch.stack([inter.sum(), union.sum()])
        if self.counts is None:
            self.counts, self.iou_sum = counts, iou.sum()
        else:
            self.counts, self.iou_sum = self.counts + counts, self.iou_sum + iou.sum()
        self.images += iou.numel()

    def compute(self) -> dict[str, float]:
        if self.counts is None:
            return {"mIoU": float("nan"), "nIoU": float("nan")}
        inter, union = self.counts.tolist()
        miou = inter / union if union else 1.0
        return {"mIoU": 100 * miou, "nIoU": 100 * float(self.iou_sum) / self.images}


def _components(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Connected components of a (B, H, W) bool array: image index, centroid (y, x), area."""
    labels, n = ndimage.label(masks, structure=_STRUCTURE)
    flat = labels.ravel()
    on = np.flatnonzero(flat)  # only target/prediction pixels: masks are sparse
    lab = flat[on] - 1
    b, y, x = np.unravel_index(on, masks.shape)
    area = np.bincount(lab, minlength=n)
    image = np.zeros(n, dtype=int)
    image[lab] = b  # a component lies inside one image, any of its pixels names it
    centre = np.stack([np.bincount(lab, y, n), np.bincount(lab, x, n)], axis=1) / area[:, None]
    return image, centre, area


def match_targets(
    pred: np.ndarray, gt: np.ndarray, max_distance: float = 3.0
) -> tuple[int, int, int, int]:
    """Greedy matching of target and predicted components of (B, H, W) bool masks.

    Targets are visited in raster order; each takes the first (raster-order) unused predicted
    component of its image whose centroid is closer than ``max_distance`` px, as the official
    code does. Returns (targets, matched targets, false-alarm pixels as the official code counts
    them, pixels of all unmatched predicted components). The official count (utils/metric.py,
    PD_FA.update) leaves out every unmatched component whose area equals the area of a matched
    component of the same image.
    """
    g_img, g_xy, _ = _components(gt)
    p_img, p_xy, p_area = _components(pred)
    close = (g_img[:, None] == p_img[None, :]) & (
        np.linalg.norm(g_xy[:, None, :] - p_xy[None, :, :], axis=-1) < max_distance
    )
    used = np.zeros(len(p_img), dtype=bool)
    for row in close:  # one step per target (a handful per image), not per sample
        free = np.flatnonzero(row & ~used)
        if free.size:
            used[free[0]] = True
    matched_areas = set(zip(p_img[used].tolist(), p_area[used].tolist(), strict=True))
    unmatched = np.flatnonzero(~used)
    official = sum(int(p_area[j]) for j in unmatched
                   if (int(p_img[j]), int(p_area[j])) not in matched_areas)
    return len(g_img), int(used.sum()), official, int(p_area[~used].sum())


class PdFaMetric:
    """Pd = matched targets / targets (percent); Fa = false-alarm pixels / pixels (x1e-6).

    "Fa" counts false-alarm pixels as the official code (utils/metric.py) does, for the table
    beside the paper: unmatched predicted components, except those whose area equals a matched
    component's area in the same image. "Fa_all" counts every unmatched predicted pixel. Both
    divide by all pixels scored, as the official code's size * size * images. Pd is the
    official value of one evaluation (its test mode); the official training log is not copied,
    as its target counter is never reset and so divides by the targets of every evaluation so far.
    Connected components need scipy.ndimage.label, so ``update`` copies the binary masks to the
    CPU (one host sync per evaluation batch; acceptable for the test set, never in training).
    """

    def __init__(self, max_distance: float = 3.0) -> None:
        self.max_distance = max_distance
        self.reset()

    def reset(self) -> None:
        self.targets = self.matched = self.false_pixels = self.all_false_pixels = self.pixels = 0

    def update(self, output, target: torch.Tensor) -> None:
        pred, gt = _as_masks(select_prediction(output), target)
        n, hit, false, every = match_targets(pred.cpu().numpy(), gt.cpu().numpy(),
                                             self.max_distance)
        self.targets, self.matched = self.targets + n, self.matched + hit
        self.false_pixels += false
        self.all_false_pixels += every
        self.pixels += pred.numel()

    def compute(self) -> dict[str, float]:
        pd = 100 * self.matched / self.targets if self.targets else float("nan")
        if not self.pixels:
            return {"Pd": pd, "Fa": float("nan"), "Fa_all": float("nan")}
        return {"Pd": pd, "Fa": 1e6 * self.false_pixels / self.pixels,
                "Fa_all": 1e6 * self.all_false_pixels / self.pixels}


class SegMetrics:
    """mIoU, nIoU, Pd and Fa of an MSHNet output ``(fused, scales)`` or a bare logit map.

    In the warm-up (``warm=True``, or ``set_epoch(e)`` with ``e < warm_epochs``, by default the
    official 6 epochs as `SLSLoss`) it scores ``scales[0]``, the head the warm-up loss trains,
    as the official evaluation does; otherwise ``fused``. With a loop that builds fresh metrics
    per evaluation, pass the loss's phase: ``lambda: [SegMetrics(warm=loss.warm)]``.
    """

    def __init__(self, warm: bool = False, warm_epochs: int = OFFICIAL_WARMUP,
                 max_distance: float = 3.0):
        self.warm_epochs = warm_epochs
        self.warm = warm
        self.parts = (IoUMetric(), PdFaMetric(max_distance))

    def set_epoch(self, epoch: int) -> None:
        self.warm = epoch < self.warm_epochs

    def reset(self) -> None:
        for part in self.parts:
            part.reset()

    def update(self, output, target: torch.Tensor) -> None:
        logit = select_prediction(output, self.warm).detach()
        for part in self.parts:
            part.update(logit, target)

    def compute(self) -> dict[str, float]:
        return {k: v for part in self.parts for k, v in part.compute().items()}
