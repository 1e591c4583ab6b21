"""Bookkeeping of a grid of runs: folders, finished markers, results.csv, the summary.

Every run lives in `OUT_DIR/<dataset>-<optimizer>-seed<s>-<sym|asym><noise>/` (the
`lib.runs.folder.RunFolder` folder: checkpoints, metrics.jsonl, ...). A run that completed writes
`DONE.json` holding its result row; that marker is the source of truth. `results.csv` is
rebuilt from all markers (merged with rows already in the file) by every `collect_results`,
so runs made by separate papermill invocations, in any order or in parallel, end up in one
table, and collecting twice changes nothing.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from lib.base import atomic
from lib.data.samples import NOTE
from lib.training.optim import OPTIMIZERS

MARKER = "DONE.json"
RESULTS = "results.csv"
# One row per run; the types are used to read results.csv back.
FIELDS: dict[str, type] = {
    "dataset": str, "optimizer": str, "seed": int, "noise_mode": str, "label_noise": float,
    "realised_noise": float, "best_test_accuracy": float, "final_test_accuracy": float,
    "best_epoch": int, "epochs": int, "wall_time_s": float, "lr": float,
    "weight_decay": float, "run": str,
}


def _noise_tag(noise_mode: str, label_noise: float) -> str:
    return f"{'sym' if noise_mode == 'symmetric' else 'asym'}{float(label_noise):g}"


def setting_tag(dataset: str, noise_mode: str, label_noise: float) -> str:
    """`<dataset>-<sym|asym><noise>`, e.g. cifar10-sym0.2: what one notebook run covers."""
    return f"{dataset}-{_noise_tag(noise_mode, label_noise)}"


@dataclass(frozen=True)
class GridCell:
    """One cell of the grid; its `name` is the run's folder under OUT_DIR."""

    dataset: str
    optimizer: str
    seed: int
    label_noise: float
    noise_mode: str = "symmetric"

    @property
    def name(self) -> str:
        tag = _noise_tag(self.noise_mode, self.label_noise)
        return f"{self.dataset}-{self.optimizer}-seed{self.seed}-{tag}"

    @property
    def setting(self) -> str:
        return setting_tag(self.dataset, self.noise_mode, self.label_noise)

    def dir(self, out_dir: Path) -> Path:
        return Path(out_dir) / self.name


def row_key(row: dict) -> tuple:
    """What identifies a run in results.csv (the GridCell fields)."""
    return (row["dataset"], row["optimizer"], int(row["seed"]), row["noise_mode"],
            round(float(row["label_noise"]), 6))


def plan_runs(dataset: str, optimizers: Sequence[str], seeds: Sequence[int],
              label_noise: float, noise_mode: str = "symmetric") -> list[GridCell]:
    """The grid OPTIMIZERS x SEEDS (optimizer-major, duplicates dropped); the names and
    values were validated with the config."""
    names = list(dict.fromkeys(optimizers))
    return [GridCell(dataset, o, int(s), float(label_noise), noise_mode)
            for o in names for s in dict.fromkeys(seeds)]


def read_marker(run_dir: Path) -> dict | None:
    path = Path(run_dir) / MARKER
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_finished(run_dir: Path, epochs: int | None = None) -> bool:
    """True when the run wrote its marker (with at least `epochs` epochs, if given)."""
    marker = read_marker(run_dir)
    return marker is not None and (epochs is None or int(marker["epochs"]) >= epochs)


def run_status(run_dir: Path, epochs: int | None = None) -> str:
    """'finished', 'partial' (has metrics or checkpoints: it resumes) or 'new'."""
    run_dir = Path(run_dir)
    if is_finished(run_dir, epochs):
        return "finished"
    ckpts = run_dir / "checkpoints"
    started = (run_dir / "metrics.jsonl").exists() or (ckpts.is_dir() and any(ckpts.iterdir()))
    return "partial" if started else "new"


def _finite(values: Iterable) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def run_result(spec: GridCell, history: list[dict], *, realised_noise: float, lr: float,
               weight_decay: float, wall_time_s: float | None = None,
               acc_key: str = "test_accuracy", time_key: str = "seconds") -> dict:
    """The results.csv row of a run from its epoch history.

    Wall time defaults to the sum of the records' `time_key` (seconds per epoch), which
    counts every epoch once even when the run was interrupted and resumed.
    """
    if not history or acc_key not in history[-1]:
        keys = sorted(history[-1]) if history else []
        raise ValueError(f"run {spec.name}: the history has no {acc_key!r} (last record "
                         f"keys: {keys}); pass acc_key= the name of the test accuracy.")
    accs = [r.get(acc_key) for r in history]
    best_i = max(range(len(accs)), key=lambda i: _finite([accs[i]]) or [-math.inf])
    wall = wall_time_s if wall_time_s is not None else sum(
        _finite(r.get(time_key) for r in history))
    return {
        "dataset": spec.dataset, "optimizer": spec.optimizer, "seed": spec.seed,
        "noise_mode": spec.noise_mode, "label_noise": spec.label_noise,
        "realised_noise": float(realised_noise), "best_test_accuracy": float(accs[best_i]),
        "final_test_accuracy": float(accs[-1]), "best_epoch": int(history[best_i]["epoch"]),
        "epochs": int(history[-1]["epoch"]), "wall_time_s": float(wall), "lr": float(lr),
        "weight_decay": float(weight_decay), "run": spec.name,
    }


def mark_finished(run_dir: Path, row: dict) -> Path:
    """Write the run's DONE.json marker (its result row); return its path."""
    path = Path(run_dir) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(row, indent=2, sort_keys=True) + "\n")
    return path


def _typed(row: dict) -> dict:
    out = {}
    for name, kind in FIELDS.items():
        value = row.get(name)
        out[name] = None if value in (None, "") else kind(float(value) if kind is int else value)
    return out


def read_results(path: Path) -> list[dict]:
    """Rows of a results.csv (typed), or [] when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [_typed(r) for r in csv.DictReader(f)]


def _order(row: dict) -> tuple:
    known = list(OPTIMIZERS)
    opt = row["optimizer"]
    rank = known.index(opt) if opt in known else len(known)
    return (row["dataset"], row["noise_mode"], float(row["label_noise"]), rank, opt,
            int(row["seed"]))


def merge_rows(old: Iterable[dict], new: Iterable[dict]) -> list[dict]:
    """`old` updated by `new` (same run key: the new row wins), in a stable sorted order."""
    merged = {row_key(r): _typed(r) for r in old}
    merged.update({row_key(r): _typed(r) for r in new})
    return sorted(merged.values(), key=_order)


def write_results(path: Path, rows: Sequence[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(FIELDS), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if r.get(k) is None else r[k]) for k in FIELDS} for r in rows)
    atomic.write_text(Path(path), buf.getvalue())


@contextmanager
def _lock(out_dir: Path):
    """An exclusive lock on OUT_DIR/.results.lock where the OS and filesystem offer one."""
    try:
        import fcntl
    except ImportError:  # Windows: markers still make the next collect complete
        yield
        return
    with open(Path(out_dir) / ".results.lock", "a") as f:
        with suppress(OSError):  # some network/FUSE mounts have no locks: best effort
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def collect_results(out_dir: Path) -> list[dict]:
    """Merge every run's DONE.json into OUT_DIR/results.csv (rewritten) and return the rows."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _lock(out_dir):
        markers = [m for d in sorted(out_dir.iterdir()) if d.is_dir()
                   for m in [read_marker(d)] if m is not None]
        rows = merge_rows(read_results(out_dir / RESULTS), markers)
        write_results(out_dir / RESULTS, rows)
    return rows


def finish_run(out_dir: Path, spec: GridCell, history: list[dict], **result_kw) -> dict:
    """After `fit`: the row (see `run_result`), its DONE.json, results.csv updated."""
    row = run_result(spec, history, **result_kw)
    mark_finished(spec.dir(out_dir), row)
    collect_results(out_dir)
    return row


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; NaN for a single value)."""
    vals = _finite(values)
    if not vals:
        return math.nan, math.nan
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))


def summarise(rows: Sequence[dict]) -> list[dict]:
    """Mean and std over seeds per (dataset, noise_mode, label_noise, optimizer)."""
    groups: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=_order):
        groups.setdefault(row_key(r)[:2] + row_key(r)[3:], []).append(r)
    out = []
    for (dataset, optimizer, mode, noise), rs in groups.items():
        best, best_sd = _mean_std([r["best_test_accuracy"] for r in rs])
        final, final_sd = _mean_std([r["final_test_accuracy"] for r in rs])
        out.append({
            "dataset": dataset, "optimizer": optimizer, "noise_mode": mode,
            "label_noise": noise, "n_seeds": len(rs), "seeds": [r["seed"] for r in rs],
            "realised_noise": _mean_std([r["realised_noise"] for r in rs])[0],
            "best_mean": best, "best_std": best_sd, "final_mean": final, "final_std": final_sd,
            "epochs": min(r["epochs"] for r in rs),
            "wall_time_s": _mean_std([r["wall_time_s"] for r in rs])[0],
        })
    return out


def _pm(mean: float, std: float, scale: float = 100.0) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean * scale:.2f}" if math.isnan(std) else f"{mean * scale:.2f} ± {std * scale:.2f}"


def format_summary(summary: Sequence[dict], sample: bool = False) -> str:
    """A Markdown table: accuracies in percent, mean ± sample std over seeds; with `sample`,
    each dataset is named as the synthetic sample of it."""
    lines = ["| dataset | noise (realised) | optimizer | seeds | best test acc % | "
             "final test acc % | epochs | wall time / run |", "|---|---|---|---|---|---|---|---|"]
    for s in summary:
        noise = f"{s['noise_mode'][:3]} {s['label_noise']:g} ({s['realised_noise']:.3f})"
        dataset = f"{s['dataset']} ({NOTE})" if sample else s["dataset"]
        lines.append(f"| {dataset} | {noise} | {s['optimizer']} | {s['n_seeds']} | "
                     f"{_pm(s['best_mean'], s['best_std'])} | "
                     f"{_pm(s['final_mean'], s['final_std'])} | {s['epochs']} | "
                     f"{s['wall_time_s'] / 60:.1f} min |")
    return "\n".join(lines)


def write_summary(out_dir: Path, summary: Sequence[dict], sample: bool = False
                  ) -> tuple[Path, Path]:
    """OUT_DIR/summary.csv (numbers) and summary.md (the formatted table, see
    `format_summary`)."""
    out_dir = Path(out_dir)
    cols = list(summary[0]) if summary else ["optimizer"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**s, "seeds": " ".join(map(str, s["seeds"]))} for s in summary)
    atomic.write_text(out_dir / "summary.csv", buf.getvalue())
    atomic.write_text(out_dir / "summary.md", format_summary(summary, sample) + "\n")
    return out_dir / "summary.csv", out_dir / "summary.md"
