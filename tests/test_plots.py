"""Figures a reader understands at notebook width: titles, units, whole epochs, legends."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from PIL import Image  # noqa: E402

from lib.plots import confusion_matrix, image_grid, save, training_curves  # noqa: E402

HISTORY = [{"epoch": e, "train_loss": 1 / e, "test_loss": 1.2 / e, "test_accuracy": 0.5 + e / 20,
            "test_mIoU": 10.0 * e, "test_nIoU": 9.0 * e, "test_Pd": 50.0, "test_Fa": 8e5 / e}
           for e in range(1, 7)]


def _tick_values(ax) -> list[float]:
    lo, hi = ax.get_xlim()
    return [t for t in ax.get_xticks() if lo <= t <= hi]


def test_training_curves_have_titles_units_and_whole_epochs():
    fig = training_curves(HISTORY, title="Fashion-MNIST CNN", sample=True)
    loss, acc = fig.axes
    assert fig._suptitle.get_text() == "Fashion-MNIST CNN (synthetic sample)"
    assert (loss.get_ylabel(), acc.get_ylabel()) == ("loss", "accuracy (%)")
    assert loss.get_xlabel() == acc.get_xlabel() == "epoch"
    assert all(float(t).is_integer() for t in _tick_values(loss)), _tick_values(loss)
    assert max(acc.lines[0].get_ydata()) == pytest.approx(80.0)  # percent, not a fraction
    assert [t.get_text() for t in acc.get_legend().get_texts()] == ["test"]


def test_many_metrics_wrap_into_rows_readable_at_notebook_width():
    fig = training_curves(HISTORY, metrics=("loss", "mIoU", "nIoU", "Pd", "Fa"))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 5 and fig.get_size_inches()[0] <= 13
    assert len({round(ax.get_position().y0, 3) for ax in shown}) == 2  # two rows of panels
    assert shown[-1].get_ylabel() == "Fa, false-alarm pixels (x1e-6)"
    assert "synthetic" not in fig._suptitle.get_text()


def test_confusion_matrix_has_a_title_a_colour_bar_and_readable_cells():
    matrix = np.array([[50, 2, 0], [3, 40, 7], [0, 9, 1]])
    fig = confusion_matrix(matrix, ["a", "b", "c"], title="best checkpoint", sample=True)
    ax, bar = fig.axes
    assert ax.get_title() == "best checkpoint (synthetic sample)"
    assert bar.get_ylabel() == "count"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class")
    cells = {t.get_text(): t for t in ax.texts}
    assert to_rgba(cells["50"].get_color()) == to_rgba("white")  # on the darkest blue
    assert to_rgba(cells["2"].get_color()) == to_rgba("black")
    assert min(t.get_fontsize() for t in ax.texts) >= 8
    assert confusion_matrix(matrix, list("abc")).axes[0].get_title() == (
        "confusion matrix (112 test examples)")


def test_image_grids_say_when_they_show_the_sample_and_saved_figures_keep_their_title(tmp_path):
    images = torch.zeros(3, 1, 8, 8)
    fig = image_grid(images, ["a", "b", "c"], cols=3, title="training images", sample=True)
    assert fig.get_suptitle() == "training images (synthetic sample)"
    assert [ax.get_title() for ax in fig.axes[:3]] == ["a", "b", "c"]
    assert image_grid(images, ["a", "b", "c"], sample=True).get_suptitle() == (
        "examples (synthetic sample)")
    assert image_grid(images, ["a", "b", "c"]).get_suptitle() == ""
    save(fig, tmp_path / "grid.png")  # the title travels with the file
    assert Image.open(tmp_path / "grid.png").text["Title"] == "training images (synthetic sample)"
    matrix = confusion_matrix(np.eye(2, dtype=int), ["a", "b"], tmp_path / "cm.png", sample=True)
    assert Image.open(tmp_path / "cm.png").text["Title"] == matrix.axes[0].get_title()
