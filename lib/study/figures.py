"""Figures of an optimizer study, and `report`: collect, summarise, plot, save.

Curves: the mean over seeds per optimizer against epoch, with a band of ± one sample
standard deviation (no band for a single seed). Bars: best and final test accuracy per
optimizer, mean ± std, each seed's value drawn as a dot (three seeds are few; show them).

numpy and matplotlib are imported where a figure is drawn: `train-anywhere report` reads a
study through `summary`, which draws only a figure older than its runs' records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lib.plots import current, save, titled
from lib.runs.identity import read_config
from lib.runs.records import read_jsonl
from lib.study.grid import (
    MARKER,
    collect_results,
    format_summary,
    setting_tag,
    summarise,
    write_summary,
)
from lib.training.optim import OPTIMIZERS

_TITLES = {"test_accuracy": "test accuracy (%)", "train_loss": "training loss",
           "test_loss": "test loss", "lr": "learning rate"}


def _color(optimizer: str):
    import matplotlib.pyplot as plt

    names = list(OPTIMIZERS)
    i = names.index(optimizer) if optimizer in names else len(names)
    return plt.get_cmap("tab10")(i)


def _label(row: dict, settings: int) -> str:
    """The optimizer name, plus the setting when the figure mixes several."""
    if settings == 1:
        return row["optimizer"]
    tag = setting_tag(row["dataset"], row["noise_mode"], row["label_noise"])
    return f"{row['optimizer']} {tag}"


def curve_stats(histories: Sequence[list[dict]], key: str):
    """(epochs, mean, std) of `key` over runs, on the epochs every run has (std 0 for one)."""
    import numpy as np

    common = set.intersection(*({r["epoch"] for r in h if key in r} for h in histories))
    epochs = sorted(common)
    values = np.array([[{r["epoch"]: r[key] for r in h}[e] for e in epochs] for h in histories],
                      dtype=float)
    std = values.std(axis=0, ddof=1) if len(histories) > 1 else np.zeros(len(epochs))
    return np.array(epochs), values.mean(axis=0), std


def _groups(rows: Sequence[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["dataset"], r["noise_mode"], r["label_noise"], r["optimizer"])
        groups.setdefault(key, []).append(r)
    return groups


def plot_curves(out_dir: Path, rows: Sequence[dict],
                keys: Sequence[str] = ("test_accuracy", "train_loss"),
                path: Path | None = None, sample: bool = False):
    """One panel per metric key from each run's metrics.jsonl; returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    groups = _groups(rows)
    settings = len({k[:3] for k in groups})
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.8), squeeze=False)
    for (*_, optimizer), rs in groups.items():
        runs = (Path(out_dir) / r["run"] / "metrics.jsonl" for r in rs)
        histories = [h for h in map(read_jsonl, runs) if h]
        for ax, key in zip(axes[0], keys, strict=True):
            if not histories or not all(any(key in rec for rec in h) for h in histories):
                continue
            epochs, mean, std = curve_stats(histories, key)
            scale = 100.0 if key.endswith("accuracy") else 1.0
            color = _color(optimizer)
            ax.plot(epochs, mean * scale, color=color, marker="o" if len(epochs) <= 20 else None,
                    label=f"{_label(rs[0], settings)} ({len(histories)} seeds)")
            if len(histories) > 1:
                ax.fill_between(epochs, (mean - std) * scale, (mean + std) * scale,
                                color=color, alpha=0.2, linewidth=0)
    banded = any(len(rs) > 1 for rs in groups.values())
    for ax, key in zip(axes[0], keys, strict=True):
        ax.set(xlabel="epoch", ylabel=_TITLES.get(key, key), title=_TITLES.get(key, key))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.lines:
            handles, labels = ax.get_legend_handles_labels()
            if banded:
                handles.append(Patch(color="gray", alpha=0.2))
                labels.append("band: mean ± 1 std over seeds")
            ax.legend(handles, labels, fontsize=8)
    fig.suptitle(titled("mean over seeds per optimizer", sample))
    fig.tight_layout()
    save(fig, path)
    return fig


def plot_bars(summary: Sequence[dict], rows: Sequence[dict], path: Path | None = None,
              sample: bool = False):
    """Best and final test accuracy (%) per optimizer: bars = mean, whiskers = std, dots = seeds."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    settings = len({(s["dataset"], s["noise_mode"], s["label_noise"]) for s in summary})
    groups = _groups(rows)
    fig, ax = plt.subplots(figsize=(3.6 + 1.3 * len(summary), 3.8))  # + the legend beside
    x = np.arange(len(summary))
    for offset, stat, alpha in ((-0.2, "best", 1.0), (0.2, "final", 0.55)):
        means = [100 * s[f"{stat}_mean"] for s in summary]
        stds = [0.0 if np.isnan(s[f"{stat}_std"]) else 100 * s[f"{stat}_std"] for s in summary]
        ax.bar(x + offset, means, 0.38, yerr=stds, capsize=3, alpha=alpha, label=stat,
               color=[_color(s["optimizer"]) for s in summary])
        for xi, s in zip(x, summary, strict=True):
            key = (s["dataset"], s["noise_mode"], s["label_noise"], s["optimizer"])
            dots = [100 * r[f"{stat}_test_accuracy"] for r in groups.get(key, [])]
            ax.scatter([xi + offset] * len(dots), dots, s=10, color="black", zorder=3)
    ax.set_xticks(x, [_label(s, settings) for s in summary], rotation=20 if settings > 1 else 0)
    ax.set(ylabel="test accuracy (%)",
           title=titled("best (solid) and final (faded) test accuracy", sample))
    ax.grid(axis="y", alpha=0.3)
    ax.legend([Patch(color="gray"), Patch(color="gray", alpha=0.55),
               Line2D([], [], color="black", marker="_", linestyle="none", markersize=10),
               Line2D([], [], color="black", marker=".", linestyle="none")],
              ["best: bar = mean over seeds", "final: bar = mean over seeds",
               "whisker: ± 1 std over seeds", "dot: one seed"], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not on them
    fig.tight_layout()
    save(fig, path)
    return fig


@dataclass
class StudyReport:
    rows: list[dict]  # results.csv rows of the selected setting
    summary: list[dict]  # mean/std per optimizer (all settings in OUT_DIR)
    table: str  # the summary as Markdown
    figures: dict = field(default_factory=dict)  # "curves", "bars" -> matplotlib Figure
    paths: dict = field(default_factory=dict)  # what was written, by name


def _matches(row: dict, dataset, noise_mode, label_noise) -> bool:
    return ((dataset is None or row["dataset"] == dataset)
            and (noise_mode is None or row["noise_mode"] == noise_mode)
            and (label_noise is None or abs(row["label_noise"] - label_noise) < 1e-9))


def report(out_dir: Path, dataset: str | None = None, noise_mode: str | None = None,
           label_noise: float | None = None,
           keys: Sequence[str] = ("test_accuracy", "train_loss"), sample: bool | None = False,
           stale_only: bool = False) -> StudyReport:
    """Collect results.csv, write summary.{csv,md}, and plot the selected setting.

    Figures go to OUT_DIR/curves-<setting>.png and bars-<setting>.png (setting e.g.
    `cifar10-sym0.2`, or `all` when nothing is selected). Works on any OUT_DIR that holds
    finished runs, whichever process or machine made them. With `stale_only`, a figure saved
    after every selected run's metrics.jsonl and DONE.json last changed is kept as it is (not
    drawn, not in `figures`); without it (a notebook shows them inline) both are drawn.
    `sample` None: read from the selected runs' config.json (any trained on the sample marks
    the table and titles as the synthetic sample's, as the notebook's own report did).
    """
    out_dir = Path(out_dir)
    rows = collect_results(out_dir)
    chosen = [r for r in rows if _matches(r, dataset, noise_mode, label_noise)]
    if not chosen and any(out_dir.rglob("STOPPED.json")):  # a session stopped before its limit
        return StudyReport([], summarise(rows), "No run of this setting has finished yet: the "
                           "grid stopped before the session limit (see above for how to "
                           "continue).", paths={"results": out_dir / "results.csv"})
    if not chosen:
        raise ValueError(f"OUT_DIR {str(out_dir)!r} has no finished run for dataset={dataset}, "
                         f"noise_mode={noise_mode}, label_noise={label_noise} "
                         f"({len(rows)} finished runs in all); run the grid first or point "
                         "OUT_DIR at the study's folder.")
    summary = summarise(rows)
    if sample is None:
        sample = any((read_config(out_dir / r["run"]) or {}).get("sample_data") for r in chosen)
    csv_path, md_path = write_summary(out_dir, summary, sample)
    partial = None in (dataset, noise_mode, label_noise)
    tag = "all" if partial else setting_tag(dataset, noise_mode, label_noise)
    paths = {"results": out_dir / "results.csv", "summary_csv": csv_path, "summary_md": md_path,
             "curves": out_dir / f"curves-{tag}.png", "bars": out_dir / f"bars-{tag}.png"}
    chosen_summary = [s for s in summary if _matches(s, dataset, noise_mode, label_noise)]
    records = [out_dir / r["run"] / name for r in chosen for name in ("metrics.jsonl", MARKER)]
    draw = {"curves": lambda: plot_curves(out_dir, chosen, keys, paths["curves"], sample),
            "bars": lambda: plot_bars(chosen_summary, chosen, paths["bars"], sample)}
    figures = {name: drawn() for name, drawn in draw.items()
               if not (stale_only and current(paths[name], *records))}
    return StudyReport(chosen, summary, format_summary(summary, sample), figures, paths)


def summary(out_dir: Path, cfg=None) -> str:
    """The optimizer study's `summary` (lib/workloads: the contract): the table of every
    finished run in `out_dir` (at cfg's dataset, noise_mode and label_noise, all of them
    without cfg), with the files it wrote; a figure is drawn only when older than its runs'
    records, and the synthetic sample is named when the runs trained on it. Here, not in
    the workload's module, so that `report` reads a study without importing torch."""
    where = (cfg.dataset, cfg.noise_mode, cfg.label_noise) if cfg else (None, None, None)
    rep = report(out_dir, *where, sample=None, stale_only=True)
    written = "\n".join(f"  {k:<12} {v}" for k, v in rep.paths.items())
    return f"{rep.table}\n{len(rep.rows)} runs; written:\n{written}"
