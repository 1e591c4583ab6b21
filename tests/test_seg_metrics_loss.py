"""SLS loss and the IRSTD metrics (mIoU, nIoU, Pd, Fa) on hand-built masks with known answers."""

import math

import pytest
import torch

from bench.bench_seg import random_batch, reference_loss, reference_metrics, reference_sls
from lib.losses.sls import SLSLoss, sls_loss, soft_iou_loss
from lib.losses.warmup import warmup_length
from lib.training.metrics_seg import IoUMetric, PdFaMetric, SegMetrics, select_prediction

S = 32  # image side of the hand-built cases
PIXELS = 4 * S * S


def _box(mask: torch.Tensor, y: int, x: int, h: int, w: int) -> None:
    mask[0, y : y + h, x : x + w] = 1


def _case_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Four images: a hit, a miss, a false alarm, two targets (one hit) -- see test below."""
    gt, pred = torch.zeros(4, 1, S, S), torch.zeros(4, 1, S, S)
    _box(gt[0], 5, 5, 3, 3), _box(pred[0], 5, 6, 3, 3)  # hit: centroid 1 px away, IoU 6/12
    _box(gt[1], 20, 20, 2, 2)  # miss: nothing predicted
    _box(gt[2], 4, 4, 2, 2), _box(pred[2], 4, 4, 2, 2)  # exact hit ...
    _box(pred[2], 25, 25, 1, 5)  # ... plus a 5-pixel false alarm far away
    _box(gt[3], 2, 2, 2, 2), _box(gt[3], 20, 10, 3, 3)  # two targets in one image
    _box(pred[3], 21, 11, 3, 3)  # only the second one found (centroid 1.4 px off)
    logits = torch.where(pred > 0, 4.0, -4.0)
    return logits, gt


def _run(metric, logits, gt, batch: int) -> dict[str, float]:
    metric.reset()
    for i in range(0, len(logits), batch):
        metric.update(logits[i : i + batch], gt[i : i + batch])
    return metric.compute()


def test_hand_built_cases_have_the_known_answers():
    logits, gt = _case_batch()
    result = _run(SegMetrics(), logits, gt, batch=4)
    # intersections 6, 0, 4, 4; unions 12, 4, 9, 18 -> mIoU 14/43; per image 1/2, 0, 4/9, 4/18
    assert result["mIoU"] == pytest.approx(100 * 14 / 43)
    assert result["nIoU"] == pytest.approx(100 * (0.5 + 0 + 4 / 9 + 4 / 18) / 4, rel=1e-6)
    assert result["Pd"] == pytest.approx(100 * 3 / 5)  # targets: 1 + 1 + 1 + 2, found 3
    assert result["Fa"] == pytest.approx(1e6 * 5 / PIXELS)  # only the 1x5 bar is unmatched
    assert result["Fa_all"] == result["Fa"]  # its area (5) is no matched component's (9, 4, 9)


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_any_batch_size_gives_the_batch_4_numbers(batch):
    logits, gt = _case_batch()
    logits, gt = torch.cat([logits, logits.flip(0)]), torch.cat([gt, gt.flip(0)])
    expected = _run(SegMetrics(), logits, gt, batch=4)
    assert _run(SegMetrics(), logits, gt, batch=batch) == pytest.approx(expected, rel=1e-6)


def test_empty_image_counts_as_perfect_and_adds_only_pixels():
    logits, gt = _case_batch()
    empty_logit, empty_gt = torch.full((1, 1, S, S), -4.0), torch.zeros(1, 1, S, S)
    base = _run(SegMetrics(), logits, gt, batch=4)
    more = _run(SegMetrics(), torch.cat([logits, empty_logit]), torch.cat([gt, empty_gt]), 1)
    assert more["mIoU"] == pytest.approx(base["mIoU"])  # no pixel in the union
    assert more["nIoU"] == pytest.approx((4 * base["nIoU"] + 100) / 5, rel=1e-6)
    assert more["Pd"] == pytest.approx(base["Pd"])
    assert more["Fa"] == pytest.approx(base["Fa"] * 4 / 5)  # same false pixels, more pixels


def test_only_empty_images_give_perfect_iou_and_undefined_pd():
    result = _run(SegMetrics(), torch.full((2, 1, S, S), -1.0), torch.zeros(2, 1, S, S), 2)
    assert result["mIoU"] == 100 and result["nIoU"] == 100 and result["Fa"] == 0
    assert math.isnan(result["Pd"])


@pytest.mark.parametrize(("shift", "hit"), [(2, True), (3, False)])
def test_pd_matches_centroids_closer_than_3_px(shift, hit):
    gt, pred = torch.zeros(1, 1, S, S), torch.zeros(1, 1, S, S)
    _box(gt[0], 10, 10, 2, 2), _box(pred[0], 10, 10 + shift, 2, 2)
    result = _run(PdFaMetric(), torch.where(pred > 0, 1.0, -1.0), gt, 1)
    assert result["Pd"] == (100 if hit else 0)
    assert result["Fa"] == (0 if hit else pytest.approx(1e6 * 4 / (S * S)))


def test_diagonal_pixels_are_one_component():
    gt, pred = torch.zeros(1, 1, S, S), torch.zeros(1, 1, S, S)
    gt[0, 0, 10, 10] = gt[0, 0, 11, 11] = 1  # touching corners: one target under 8-connectivity
    pred[0, 0, 10, 10] = pred[0, 0, 11, 11] = 1
    result = _run(PdFaMetric(), torch.where(pred > 0, 1.0, -1.0), gt, 1)
    assert result == {"Pd": 100.0, "Fa": 0.0, "Fa_all": 0.0}


def test_one_prediction_cannot_match_two_targets():
    gt, pred = torch.zeros(1, 1, S, S), torch.zeros(1, 1, S, S)
    gt[0, 0, 10, 10] = gt[0, 0, 10, 13] = 1  # two targets 3 px apart
    pred[0, 0, 10, 11:13] = 1  # one component between them, 1.5 px from each
    result = _run(PdFaMetric(), torch.where(pred > 0, 1.0, -1.0), gt, 1)
    assert result == {"Pd": 50.0, "Fa": 0.0, "Fa_all": 0.0}


def _pd_fa(pred: torch.Tensor, gt: torch.Tensor, batch: int = 1) -> dict[str, float]:
    return _run(PdFaMetric(), torch.where(pred > 0, 1.0, -1.0), gt, batch)


# The official Fa (ying-fu/MSHNet utils/metric.py, PD_FA at threshold 0) sums the areas of the
# predicted components whose area is not the area of a matched component of the same image,
# and divides by size * size * images. Fa_all sums every unmatched component.
def test_official_fa_drops_false_alarms_of_a_matched_components_area():
    gt, pred = torch.zeros(1, 1, S, S), torch.zeros(1, 1, S, S)
    _box(gt[0], 10, 10, 2, 2), _box(pred[0], 10, 10, 2, 2)  # matched, area 4
    _box(pred[0], 20, 20, 2, 2)  # false alarm of area 4: the official count leaves it out
    _box(pred[0], 2, 25, 1, 3)  # false alarm of area 3: counted by both
    result = _pd_fa(pred, gt)
    assert result["Pd"] == 100
    assert result["Fa"] == pytest.approx(1e6 * 3 / (S * S))
    assert result["Fa_all"] == pytest.approx(1e6 * (4 + 3) / (S * S))


def test_official_fa_drops_every_single_pixel_alarm_beside_a_one_pixel_hit():
    gt, pred = torch.zeros(1, 1, S, S), torch.zeros(1, 1, S, S)
    gt[0, 0, 16, 16] = pred[0, 0, 16, 16] = 1  # a one-pixel target, found
    for y, x in ((2, 2), (2, 30), (30, 2)):  # three isolated one-pixel false alarms
        pred[0, 0, y, x] = 1
    assert _pd_fa(pred, gt) == {"Pd": 100.0, "Fa": 0.0, "Fa_all": pytest.approx(1e6 * 3 / S**2)}


def test_official_fa_compares_areas_within_an_image_only():
    gt, pred = torch.zeros(2, 1, S, S), torch.zeros(2, 1, S, S)
    _box(gt[0], 10, 10, 2, 2), _box(pred[0], 10, 10, 2, 2)  # image 0: a hit of area 4
    gt[1, 0, 5, 5] = 1  # image 1: its target missed ...
    _box(pred[1], 20, 20, 2, 2)  # ... and a false alarm of area 4, counted: no hit in image 1
    for batch in (1, 2):
        result = _pd_fa(pred, gt, batch)
        assert result["Pd"] == 50
        assert result["Fa"] == result["Fa_all"] == pytest.approx(1e6 * 4 / (2 * S * S))


def test_official_fa_with_two_hits_keeps_only_areas_neither_hit_has():
    gt, pred = torch.zeros(1, 1, S, S), torch.zeros(1, 1, S, S)
    _box(gt[0], 2, 2, 2, 2), _box(pred[0], 2, 2, 2, 2)  # hit of area 4
    _box(gt[0], 10, 10, 2, 3), _box(pred[0], 10, 10, 2, 3)  # hit of area 6
    _box(pred[0], 20, 2, 2, 3)  # false, area 6: dropped by the official count
    _box(pred[0], 20, 20, 1, 5)  # false, area 5: counted
    result = _pd_fa(pred, gt)
    assert result["Pd"] == 100
    assert result["Fa"] == pytest.approx(1e6 * 5 / (S * S))
    assert result["Fa_all"] == pytest.approx(1e6 * (6 + 5) / (S * S))


def test_metrics_agree_with_the_per_sample_reference():
    logits, gt = random_batch(6, 64, seed=3)
    result = _run(SegMetrics(), logits, gt, batch=4)
    reference = reference_metrics(logits, gt)  # its Fa counts every unmatched pixel
    reference["Fa_all"] = reference.pop("Fa")
    assert {k: v for k, v in result.items() if k != "Fa"} == pytest.approx(reference, rel=1e-6)


def test_warm_up_scores_the_full_scale_head_and_later_the_fused_map():
    logits, gt = _case_batch()
    wrong = -logits
    output = (wrong, [logits, logits[..., ::2, ::2]])
    metric = SegMetrics(warm_epochs=2)
    assert _run(metric, output, gt, 4)["mIoU"] < 1  # before set_epoch: the fused map
    metric.set_epoch(1)
    assert _run(metric, output, gt, 4)["mIoU"] == pytest.approx(100 * 14 / 43)
    metric.set_epoch(2)
    assert select_prediction(output, metric.warm) is wrong
    assert _run(SegMetrics(warm=True), output, gt, 4)["mIoU"] == pytest.approx(100 * 14 / 43)


def test_the_default_phase_is_the_official_six_warm_up_epochs():
    # main.py with --warm-epoch 5 trains 0-based epochs with the warm-up while epoch <= 5
    loss, metric = SLSLoss(), SegMetrics()
    phases = []
    for epoch in range(8):
        loss.set_epoch(epoch)
        metric.set_epoch(epoch)
        assert metric.warm == loss.warm
        phases.append(loss.warm)
    assert phases == [True] * 6 + [False] * 2
    assert warmup_length(5) == warmup_length(5, "official") == 6
    assert warmup_length(5, "paper") == 5 and warmup_length(0, "paper") == 0
    with pytest.raises(ValueError, match="warm-up rule 'text' is unknown"):
        warmup_length(5, "text")


def test_metrics_built_from_the_losss_phase_follow_its_warm_up():
    loss = SLSLoss(warm_epochs=1)
    loss.set_epoch(0)
    assert SegMetrics(warm=loss.warm).warm
    loss.set_epoch(1)
    assert not SegMetrics(warm=loss.warm).warm


def test_iou_state_stays_a_tensor_until_compute():
    logits, gt = _case_batch()
    metric = IoUMetric()
    metric.update(logits, gt)
    assert isinstance(metric.counts, torch.Tensor) and metric.counts.dtype == torch.int64


def test_a_target_of_another_size_is_rejected():
    with pytest.raises(ValueError, match="does not match prediction"):
        SegMetrics().update(torch.zeros(2, 1, 8, 8), torch.zeros(2, 1, 16, 16))


# ---------------------------------------------------------------- SLS loss


def _disc(cy: float, cx: float, r: float, size: int = 64) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    return (((yy - cy) ** 2 + (xx - cx) ** 2) <= r * r).float()[None, None]


def _logit(mask: torch.Tensor) -> torch.Tensor:
    return 30 * (2 * mask - 1)  # sigmoid saturates: a confident prediction of `mask`


def test_sls_is_near_zero_for_a_perfect_prediction():
    target = torch.cat([_disc(20, 30, 3), _disc(40, 12, 5)])
    assert sls_loss(_logit(target), target).item() < 1e-4


def test_sls_grows_for_shifted_or_rescaled_targets():
    target = _disc(30, 30, 4)
    perfect = sls_loss(_logit(target), target).item()
    shifted = sls_loss(_logit(_disc(30, 34, 4)), target).item()
    far = sls_loss(_logit(_disc(30, 42, 4)), target).item()
    bigger = sls_loss(_logit(_disc(30, 30, 6)), target).item()
    smaller = sls_loss(_logit(_disc(30, 30, 2)), target).item()
    assert perfect < 1e-4 < shifted < far
    assert min(bigger, smaller) > 0.3


def test_scale_weight_punishes_a_wrong_size_more_than_plain_iou():
    target = _disc(30, 30, 4)
    bigger = _logit(_disc(30, 30, 6))
    # same centre: the extra over 1 - IoU comes from the scale weight omega < 1 and from the
    # centre distance, whose (official, unnormalised) moments grow with the predicted area
    assert sls_loss(bigger, target) > soft_iou_loss(bigger, target) + 0.05


def test_gradients_are_finite_on_an_empty_mask():
    logit = torch.randn(3, 1, 32, 32, requires_grad=True)
    target = torch.zeros(3, 1, 32, 32)
    target[1, 0, 5:8, 5:8] = 1  # one image with a target, two empty ones
    for loss in (sls_loss(logit, target), soft_iou_loss(logit, target)):
        (grad,) = torch.autograd.grad(loss, logit)
        assert torch.isfinite(loss) and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_vectorised_loss_equals_the_per_sample_reference():
    logit, target = random_batch(5, 64, seed=1)
    assert sls_loss(logit, target).item() == pytest.approx(reference_sls(logit, target).item(),
                                                           rel=1e-5)
    scales = [logit[..., :: 2**k, :: 2**k] for k in range(4)]
    expected = reference_loss((logit, scales), target).item()
    assert SLSLoss(warm_epochs=0)((logit, scales), target).item() == pytest.approx(expected,
                                                                                    rel=1e-5)


def test_warm_up_trains_only_the_full_scale_head_with_soft_iou():
    logit, target = random_batch(2, 32, seed=2)
    fused = torch.zeros_like(logit, requires_grad=True)
    scales = [logit.clone().requires_grad_(), torch.zeros(2, 1, 16, 16)]
    loss = SLSLoss(warm_epochs=3)
    loss.set_epoch(2)
    value = loss((fused, scales), target)
    assert value.item() == pytest.approx(soft_iou_loss(logit, target).item())
    value.backward()
    assert fused.grad is None and scales[0].grad is not None
    loss.set_epoch(3)
    assert not loss.warm


def test_loss_is_float32_for_bfloat16_logits():
    logit, target = random_batch(2, 32)
    value = sls_loss(logit.bfloat16(), target)
    assert value.dtype == torch.float32 and torch.isfinite(value)


def test_loss_under_autocast_matches_float32():
    logit, target = random_batch(3, 64, seed=4)
    scales = [logit[..., :: 2**k, :: 2**k] for k in range(4)]
    loss = SLSLoss(warm_epochs=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = loss((logit, scales), target)
    assert mixed.item() == pytest.approx(loss((logit, scales), target).item(), rel=1e-6)
