"""`train-anywhere report OUT_DIR`: the results of a finished run, study or sweep, as text.

Nothing trains. A sweep (DIR/sweep.json) gets one row per cell; the optimizer study (run
folders with DONE.json, also when swept) gets its own summary (lib.study_plots.report:
results.csv, summary.md, curves and bars); a plain run folder gets its last epoch and
`curves.png`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from lib.cli import UsageError, headline
from lib.metrics import read_jsonl


def _figures_closed(fn):
    def wrapped(*args, **kwargs):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        try:
            return fn(*args, **kwargs)
        finally:
            plt.close("all")
    return wrapped


@_figures_closed
def study(out: Path, dataset=None, noise_mode=None, label_noise=None) -> str:
    from lib.study_plots import report as study_report

    try:
        rep = study_report(out, dataset, noise_mode, label_noise)
    except ValueError as exc:
        raise UsageError(str(exc).strip().splitlines()[-1]) from None
    written = "\n".join(f"  {k:<12} {v}" for k, v in rep.paths.items())
    return f"{rep.table}\n{len(rep.rows)} runs; written:\n{written}"


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def sweep(out: Path) -> str:
    spec = json.loads((out / "sweep.json").read_text())
    cells = sorted((out / "cells").glob("*/cell.json"))
    if spec.get("shared_out"):
        from lib.sweep import config_for

        cfg = config_for(json.loads(cells[0].read_text()))
        return study(out, cfg.dataset, cfg.noise_mode, cfg.label_noise)
    header = [*spec["grid"], "metric", "value", "epochs", "status"]
    rows, csv_rows = [], []
    for path in cells:
        cell = json.loads(path.read_text())
        run_dir = path.parent / "run"
        metric, runs = headline(run_dir) if run_dir.exists() else ("", [])
        last = runs[0][1] if runs else {}
        value = last.get(metric)
        status = "done" if (path.parent / "DONE.json").exists() else "not finished"
        row = [*(cell["values"][k] for k in spec["grid"]), metric or "-",
               f"{value:.4f}" if isinstance(value, float) else "-", last.get("epoch", "-"), status]
        rows.append(row)
        csv_rows.append(dict(zip(header, row, strict=True)))
    with open(out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(csv_rows)
    table = _table(header, rows)
    (out / "summary.md").write_text(table + "\n")
    return f"{table}\n{len(rows)} cells; written:\n  {out / 'summary.csv'}\n  {out / 'summary.md'}"


@_figures_closed
def runs(out: Path) -> str:
    from lib.plots import training_curves

    metric, found = headline(out)
    rows = []
    for label, last in found:
        run_dir = out if label == "." else out / label
        history = read_jsonl(run_dir / "metrics.jsonl")
        keys = tuple(m for m in ("loss", "accuracy", "mIoU")
                     if any(f"test_{m}" in r or f"train_{m}" in r for r in history))
        training_curves(history, run_dir / "curves.png", metrics=keys or ("loss",))
        value = last.get(metric)
        rows.append([label, last.get("epoch"), f"{value:.4f}" if isinstance(value, float)
                     else "-", last.get("device", "-"), str(run_dir / "curves.png")])
    return _table(["run", "epochs", metric or "metric", "device", "curves"], rows)


def report(out: Path) -> str:
    out = Path(out)
    if (out / "sweep.json").exists():
        return sweep(out)
    if any(out.glob("*/DONE.json")) or (out / "results.csv").exists():
        return study(out)
    if any(out.rglob("metrics.jsonl")):
        return runs(out)
    raise UsageError(f"{out} holds no finished run (no sweep.json, DONE.json or metrics.jsonl); "
                     "pass the --out of a finished run or sweep.")
