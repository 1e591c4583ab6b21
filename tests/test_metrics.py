"""Epoch metrics: values worked out by hand, accumulated over
batches, models that return (logits, extras)."""

import math

import pytest
import torch

from lib.training.metrics import Accuracy, ConfusionMatrix


def _logits(preds, k=3):
    return torch.nn.functional.one_hot(torch.tensor(preds), k).float()


def test_accuracy_is_correct_over_seen_across_batches():
    acc = Accuracy(3)
    assert math.isnan(acc.compute()["accuracy"])
    acc.update(_logits([0, 1, 2, 2]), torch.tensor([0, 1, 1, 2]))  # 3 of 4
    acc.update((_logits([1, 1]), "extras"), torch.tensor([0, 1]))  # 1 of 2, tuple output
    assert acc.compute()["accuracy"] == pytest.approx(4 / 6)
    acc.reset()
    acc.update(_logits([2]), torch.tensor([2]))
    assert acc.compute()["accuracy"] == 1.0


def test_confusion_matrix_rows_are_targets_and_balanced_accuracy_averages_classes():
    cm = ConfusionMatrix(3)
    assert cm.matrix().equal(torch.zeros(3, 3, dtype=torch.long))
    cm.update(_logits([0, 1, 2, 2, 0]), torch.tensor([0, 1, 1, 2, 2]))
    assert cm.matrix().tolist() == [[1, 0, 0], [0, 1, 1], [1, 0, 1]]
    assert cm.matrix().dtype == torch.long
    assert cm.compute()["balanced_accuracy"] == (1 + 0.5 + 0.5) / 3
