"""Figures a notebook shows inline and saves beside the run: curves, image grids, matrices.

matplotlib (and torch) is imported by the functions that draw, not by this module:
`train-anywhere report` reads `titled` and `current` here and, when every figure is current,
draws nothing and should not pay matplotlib's import (bench/bench_report.py).
"""

from __future__ import annotations

from pathlib import Path

from lib.data.samples import NOTE as SAMPLE_NOTE

# metric -> (y-axis label with its unit, factor from the recorded value to that unit)
AXES = {
    "loss": ("loss", 1.0),
    "accuracy": ("accuracy (%)", 100.0),
    "balanced_accuracy": ("balanced accuracy (%)", 100.0),
    "mIoU": ("mIoU (%)", 1.0),
    "nIoU": ("nIoU (%)", 1.0),
    "Pd": ("Pd, targets found (%)", 1.0),
    "Fa": ("Fa, false-alarm pixels (x1e-6)", 1.0),
}


def titled(title: str, sample: bool) -> str:
    """`title`, its first line marked as made from the synthetic sample when it is."""
    first, *rest = title.split("\n")
    return "\n".join([f"{first} ({SAMPLE_NOTE})" if sample else first, *rest])


def current(figure: Path, *records: Path) -> bool:
    """True when `figure` was saved after every one of `records` (the files it is drawn
    from) last changed: redrawing it would show the same. False when any is missing."""
    try:
        drawn = Path(figure).stat().st_mtime
        return all(drawn >= Path(r).stat().st_mtime for r in records)
    except FileNotFoundError:
        return False


def figure_title(fig) -> str:
    """The figure's title: its suptitle, else its first panel's title."""
    return fig.get_suptitle() or next((ax.get_title() for ax in fig.axes if ax.get_title()), "")


def save(fig, path: Path | None) -> None:
    """Save `fig` as a PNG at `path` (if given) with its title in the PNG's Title field, so a
    saved figure says what it shows, and whether it comes from the sample, on its own."""
    if path is not None:
        fig.savefig(path, dpi=100, metadata={"Title": figure_title(fig)})


def _grid(n: int, cols: int = 3, width: float = 4.2, height: float = 3.3):
    """A figure of `n` panels, at most `cols` a row (readable at notebook width)."""
    import matplotlib.pyplot as plt

    cols = min(cols, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def training_curves(history: list[dict], path: Path | None = None,
                    metrics: tuple[str, ...] = ("loss", "accuracy"), title: str | None = None,
                    sample: bool = False):
    """One panel per metric, train_<m> and test_<m> against epoch; saved to `path`.

    Units and scale per metric come from `AXES`; epochs are whole numbers on the x axis.
    """
    from matplotlib.ticker import MaxNLocator

    fig, axes = _grid(len(metrics))
    epochs = [r["epoch"] for r in history]
    for ax, m in zip(axes, metrics, strict=True):
        label, factor = AXES.get(m, (m, 1.0))
        for split in ("train", "test"):
            key = f"{split}_{m}"
            if any(key in r for r in history):
                ax.plot(epochs, [factor * r.get(key, float("nan")) for r in history],
                        marker="o", label=split)
        ax.set(xlabel="epoch", ylabel=label, title=label.split(" (")[0])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(titled(title or "training curves", sample))
    fig.tight_layout()
    save(fig, path)
    return fig


def image_grid(images, titles: list[str], path: Path | None = None, cols: int = 8,
               cmap: str = "gray", title: str | None = None, sample: bool = False):
    """Show (N, C, H, W) images in a grid with one title each, under `title` (marked when
    the images come from the synthetic sample)."""
    import matplotlib.pyplot as plt

    n = len(images)
    rows = (n + cols - 1) // cols
    heading = 0.3 * (title or "").count("\n") + (0.3 if title or sample else 0.0)
    fig, axes = plt.subplots(rows, cols, figsize=(1.6 * cols, 1.8 * rows + heading),
                             squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, img, name in zip(axes.flat, images, titles, strict=False):
        img = img.detach().cpu()
        shown = img[0] if img.shape[0] == 1 else img.permute(1, 2, 0).clamp(0, 1)
        ax.imshow(shown.numpy(), cmap=cmap)  # numpy: matplotlib's copy=False would warn
        ax.set_title(name, fontsize=8)
    if title or sample:
        fig.suptitle(titled(title or "examples", sample), fontsize=10)
    fig.tight_layout()
    save(fig, path)
    return fig


def _event_labels(dataset) -> list[int]:
    """Every recording's label without framing it (tonic keeps them in `targets`)."""
    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        base = _event_labels(dataset.dataset)
        return [base[i] for i in dataset.indices]
    return [int(t) for t in dataset.dataset.targets]


def _folder_made(path: Path | None) -> Path | None:
    """`path`, its folder created (example figures are drawn before the run folder exists)."""
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return path


def _event_picture(frames, start: int = 0, stop: int | None = None):
    import torch

    from lib.data.events import frame_picture

    return torch.from_numpy(frame_picture(frames, start, stop)).permute(2, 0, 1)


def event_examples(dataset, classes: list[str], n: int = 8, path: Path | None = None,
                   sample: bool = False):
    """Figure of the first recording of up to `n` classes of an event dataset
    (lib.data.events), events summed over time (ON red, OFF blue); returns (figure, first
    shown recording's frames). `sample` marks the title."""
    import torch

    first: dict[int, int] = {}
    for i, label in enumerate(_event_labels(dataset)):
        first.setdefault(label, i)
    shown = sorted(first.items())[:n]
    frames = [dataset[i][0] for _, i in shown]
    fig = image_grid(torch.stack([_event_picture(f) for f in frames]),
                     [classes[label][:16] for label, _ in shown], _folder_made(path),
                     cols=min(len(shown), 8), sample=sample,
                     title="one recording per class, events summed over time (ON red, OFF blue)")
    return fig, frames[0]


def event_time_strip(frames, n: int = 8, path: Path | None = None, sample: bool = False):
    """Figure of one recording (T, 2, H, W) cut into `n` consecutive slices of frames;
    `sample` marks the title."""
    import torch

    t = frames.shape[0]
    n = min(n, t)
    slices = [(round(k * t / n), round((k + 1) * t / n)) for k in range(n)]
    pictures = torch.stack([_event_picture(frames, a, b) for a, b in slices])
    titles = [f"frame {a}" if b - a == 1 else f"frames {a}-{b - 1}" for a, b in slices]
    return image_grid(pictures, titles, _folder_made(path), cols=n, sample=sample,
                      title="the first recording over time")


def confusion_matrix(matrix, classes, path: Path | None = None, title: str | None = None,
                     sample: bool = False):
    """Heat map of a (K, K) count matrix, rows = true class, columns = prediction; each cell
    shows its count, in white on dark cells."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    k = len(classes)
    matrix = matrix.numpy() if hasattr(matrix, "numpy") else np.asarray(matrix)  # a tensor
    size = min(9.0, 1.8 + 0.42 * k)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(matrix, cmap="Blues", vmin=0)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="count")
    bar.locator = MaxNLocator(integer=True)  # counts: no 0.2, 0.4 ticks on a small test set
    bar.update_ticks()
    ax.set(xticks=range(k), yticks=range(k), xlabel="predicted class", ylabel="true class",
           title=titled(title or f"confusion matrix ({int(matrix.sum())} test examples)", sample))
    ax.set_xticklabels(classes, rotation=90, fontsize=8)
    ax.set_yticklabels(classes, fontsize=8)
    dark = matrix.max() / 2 if matrix.size else 0
    font = max(5, min(10, round(100 / k)))
    for (i, j), v in _cells(matrix):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=font,
                color="white" if v > dark else "black")
    fig.tight_layout()
    save(fig, path)
    return fig


def _cells(matrix):
    m = matrix.tolist()
    return [((i, j), v) for i, row in enumerate(m) for j, v in enumerate(row)]


def firing_rates(stats: dict, path: Path | None = None, sample: bool = False):
    """Mamba-Spike's front end: each layer's firing rate and share of silent neurons."""
    import matplotlib.pyplot as plt

    layers = sorted({k.split("_")[0] for k in stats})
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, key, title, unit in (
            (axes[0], "rate", "firing rate", "spikes per neuron per time step"),
            (axes[1], "silent", "silent neurons", "share that never spike")):
        values = [stats[f"{layer}_{key}"] for layer in layers]
        ax.bar(layers, values, color="tab:red" if key == "rate" else "tab:gray")
        ax.set(title=title, xlabel="front-end layer", ylabel=unit,
               ylim=(0, max(1e-3, 1.15 * max(values))))
        for x, v in enumerate(values):
            ax.text(x, v, f"{v:.3f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle(titled("Spiking front end on the test set", sample))
    fig.tight_layout()
    save(fig, path)
    return fig
