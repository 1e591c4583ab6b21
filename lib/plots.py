"""Figures a notebook shows inline and saves beside the run: curves, image grids, matrices."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt


def training_curves(history: list[dict], path: Path | None = None,
                    metrics: tuple[str, ...] = ("loss", "accuracy")):
    """One panel per metric, train_<m> and test_<m> against epoch; saved to `path`."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.6), squeeze=False)
    epochs = [r["epoch"] for r in history]
    for ax, m in zip(axes[0], metrics, strict=True):
        for split in ("train", "test"):
            key = f"{split}_{m}"
            if any(key in r for r in history):
                ax.plot(epochs, [r.get(key, float("nan")) for r in history], marker="o",
                        label=split)
        ax.set(xlabel="epoch", title=m)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def image_grid(images, titles: list[str], path: Path | None = None, cols: int = 8,
               cmap: str = "gray"):
    """Show (N, C, H, W) images in a grid with one title each."""
    n = len(images)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(1.6 * cols, 1.8 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, img, title in zip(axes.flat, images, titles, strict=False):
        img = img.detach().cpu()
        shown = img[0] if img.shape[0] == 1 else img.permute(1, 2, 0).clamp(0, 1)
        ax.imshow(shown.numpy(), cmap=cmap)  # numpy: matplotlib's copy=False would warn
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def confusion_matrix(matrix, classes, path: Path | None = None):
    """Heat map of a (K, K) count matrix, rows = true class, columns = prediction."""
    k = len(classes)
    matrix = matrix.numpy() if hasattr(matrix, "numpy") else matrix  # a torch tensor
    fig, ax = plt.subplots(figsize=(1 + 0.5 * k, 1 + 0.5 * k))
    ax.imshow(matrix, cmap="Blues")
    ax.set(xticks=range(k), yticks=range(k), xlabel="predicted", ylabel="true")
    ax.set_xticklabels(classes, rotation=90, fontsize=7)
    ax.set_yticklabels(classes, fontsize=7)
    for (i, j), v in _cells(matrix):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=6)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def _cells(matrix):
    m = matrix.tolist()
    return [((i, j), v) for i, row in enumerate(m) for j, v in enumerate(row)]
