"""Progress that reads well wherever a run is watched: a bar, plain lines, an epoch row.

Where the run is shown decides the bar (`bar_kind`):
* a Jupyter kernel (Jupyter, Colab, Kaggle, papermill) with ipywidgets: one widget bar, whose
  updates are widget messages, never new cell outputs;
* a Jupyter kernel without ipywidgets: no bar (tqdm's text bar would add an output, and a
  warning, at every refresh); the epoch lines say how far it is;
* a terminal: tqdm's text bar, redrawn in place;
* anything else (a pipe, a log file, a worker process): no bar, so a log holds one line per
  epoch and no stream of carriage returns.
A run's lines (`Lines`) are one output in a notebook, a line each elsewhere.
"""

from __future__ import annotations

import os
import sys

# A front end that runs the notebook elsewhere (`train-anywhere run`) names a file here: every
# run line (resumed from, nothing to do, stopped before the limit, warnings) is appended to it
# too, so the terminal shows what the notebook says (lib/cli/execute.py tails it).
RUN_LINES_ENV = "TA_RUN_LINES"


class NoBar:
    """The bar where none is shown."""

    def update(self, n=1):
        pass

    def set_postfix(self, *a, **k):
        pass

    def close(self):
        pass


def in_kernel() -> bool:
    """True inside a Jupyter kernel (notebook, Colab, Kaggle, papermill), not plain IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def has_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def bar_kind() -> str:
    """'widget', 'text' or 'none' (see the module docstring)."""
    if in_kernel():
        return "widget" if has_widgets() else "none"
    stream = sys.stderr
    return "text" if hasattr(stream, "isatty") and stream.isatty() else "none"


def bar(total: int, desc: str = "training", unit: str = "batch"):
    """A progress bar of `total` steps suited to where the run is shown, or a `NoBar`."""
    kind = bar_kind()
    if kind == "none":
        return NoBar()
    if kind == "widget":
        from tqdm.notebook import tqdm

        return tqdm(total=total, desc=desc, unit=unit, mininterval=1.0)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, mininterval=1.0, dynamic_ncols=True)


def write(message: str) -> None:
    """Print a line without breaking a text bar drawn on the terminal."""
    if bar_kind() == "text":
        from tqdm import tqdm

        tqdm.write(message)
    else:
        print(message, flush=True)


class Lines:
    """The lines one run reports (resume, epoch rows, warnings). In a kernel they are one
    output, updated in place: papermill stores every printed flush as an output of its own,
    so printing an epoch row at a time would add an output an epoch. Elsewhere: printed."""

    def __init__(self) -> None:
        self.text = ""
        self.handle = None

    def write(self, message: str) -> None:
        if path := os.environ.get(RUN_LINES_ENV):
            with open(path, "a") as f:
                f.write(message.replace("\n", " ") + "\n")
        if not in_kernel():
            write(message)
            return
        from IPython.display import display

        self.text += message + "\n"
        shown = {"text/plain": self.text}
        if self.handle is None:
            self.handle = display(shown, raw=True, display_id=True)
        else:
            self.handle.update(shown, raw=True)


_SHORT = {"accuracy": "acc", "balanced_accuracy": "bal_acc"}
_HIDDEN = {"epoch", "lr", "seconds", "samples_per_s", "train_samples", "xla_compiles",
           "xla_repeat_compiles",
           "compile_seconds",
           "test_Fa_all"}  # MSHNet's secondary Fa: in metrics.jsonl and the results table


def _column(item: tuple) -> int:
    """Train before test, the loss first: however the record's keys were ordered (a record
    read back from metrics.jsonl has them sorted)."""
    key = item[0]
    return (0 if key == "train_loss" else 1 if key.startswith("train_") else
            2 if key == "test_loss" else 3)


# The one convention for scores a user reads (epoch rows, the terminal, results tables,
# plots): these metrics are shown in percent; metrics.jsonl keeps what was recorded. Name ->
# factor from the recorded value (accuracy is recorded as a fraction, the IRSTD scores as %).
PERCENT = {"accuracy": 100.0, "balanced_accuracy": 100.0, "mIoU": 1.0, "nIoU": 1.0, "Pd": 1.0}


def metric_name(key: str) -> str:
    """`test_accuracy` -> `accuracy`: the metric without its split."""
    split, _, name = key.partition("_")
    return name if split in ("train", "test") else key


def shown(key: str, value) -> str:
    """A recorded score as a user reads it: `87.10%` for a percent metric (`PERCENT`),
    else the number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    factor = PERCENT.get(metric_name(key))
    return f"{value * factor:.2f}%" if factor else _number(float(value))


def best_record(records: list[dict], key: str) -> dict | None:
    """The epoch record with the best `key`: the highest score, the lowest loss (the
    checkpoint a run keeps as best.pt by the same rule, lib.training.loop)."""
    scored = [r for r in records if isinstance(r.get(key), (int, float))]
    if not scored:
        return None
    pick = min if "loss" in key else max
    return pick(scored, key=lambda r: r[key])


def _number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):  # nan, inf
        return str(value)
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def eta_hours(record: dict, epochs: int) -> float:
    """Hours the epochs after `record`'s take at its pace; a compile time it paid (once per
    session) is not counted again."""
    per_epoch = record.get("seconds", 0.0) - record.get("compile_seconds", 0.0)
    return max(epochs - record["epoch"], 0) * per_epoch / 3600


def format_hours(h: float) -> str:
    return f"{h * 60:.1f} min" if h < 1 else f"{h:.1f} h"


def rate(per_s: float) -> str:
    """A rate as a row shows it: whole numbers from 10 up (705), two significant digits below
    (9.4, 0.3, 0.034), so a real model's slow sample epoch never reads 0."""
    return f"{per_s:.0f}" if per_s >= 10 else f"{per_s:.2g}"


def epoch_line(record: dict, epochs: int, eta: str | None = None,
               note: str | None = None) -> str:
    """`epoch 3/14  train_loss 0.412  test_acc 87.10%  705 samples/s  ETA 4.1 min`: the row of
    a notebook's epoch and of `train-anywhere run`'s (the ETA from `record` unless given); a
    `note` (e.g. `synthetic sample`) follows the numbers in brackets."""
    eta = format_hours(eta_hours(record, epochs)) if eta is None else eta
    parts = [f"epoch {record['epoch']}/{epochs}"]
    for key, value in sorted(record.items(), key=_column):
        if key in _HIDDEN or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        split, _, name = key.partition("_")
        label = f"{split}_{_SHORT.get(name, name)}" if split in ("train", "test") else key
        parts.append(f"{label} {shown(key, value)}")
    if note:
        parts.append(f"({note})")
    if "samples_per_s" in record:
        parts.append(f"{rate(record['samples_per_s'])} samples/s")
    parts.append(f"ETA {eta}")
    return "  ".join(parts)
