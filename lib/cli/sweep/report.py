"""`train-anywhere report OUT_DIR`: the results of a finished run, study or sweep, as text.

Nothing trains. A sweep (DIR/sweep.json) gets one row per cell; a GRID workload's folder (the
optimizer study's, also when swept) gets the workload's own `summary` (lib/workloads: the
contract); a plain run folder gets its last epoch and `curves.png`. The workload and its
headline metric are read from the folder's config.json.

What it needs of a workload comes from its card (`lib.workloads.card`: read from the module's
source), never from importing it: a workload's module imports torch, and reading a finished
run should take a fraction of a second (bench/bench_report.py).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from lib import workloads as contract
from lib.base.progress import best_record, shown
from lib.cli.execute import headline, session_notebooks
from lib.cli.params import UsageError
from lib.plots import current, training_curves  # matplotlib only when one draws
from lib.runs import compile_cache
from lib.runs.identity import read_config
from lib.runs.records import read_jsonl


def _figures_closed(fn):
    """`fn` with matplotlib's figures closed after it, drawn off-screen (Agg), when it drew
    any (a report whose figures are current imports no matplotlib)."""
    def wrapped(*args, **kwargs):
        if (matplotlib := sys.modules.get("matplotlib")) is not None:
            matplotlib.use("Agg")
        before = os.environ.get("MPLBACKEND")
        os.environ["MPLBACKEND"] = "Agg"  # what matplotlib takes when first imported
        try:
            return fn(*args, **kwargs)
        finally:
            if before is None:
                os.environ.pop("MPLBACKEND", None)
            else:
                os.environ["MPLBACKEND"] = before
            if (plt := sys.modules.get("matplotlib.pyplot")) is not None:
                plt.close("all")
    return wrapped


def workload_of(out: Path) -> str | None:
    """The workload whose runs `out` holds, from the nearest config.json under it (None: a
    folder from before config.json named it)."""
    for path in sorted(Path(out).rglob("config.json"), key=lambda p: len(p.parts)):
        config = read_config(path.parent) or {}
        name = config.get("experiment", config).get("workload")
        if name in contract.names():
            return name
    return None


def _first_score(out: Path) -> str:
    """A run's headline when its workload is unknown: the first test_ score it records."""
    last = next((r[-1] for p in sorted(out.rglob("metrics.jsonl")) if (r := read_jsonl(p))), {})
    return next((k for k in last if k.startswith("test_") and k != "test_loss"), "test_loss")


@_figures_closed
def summary(out: Path, workload: str, cfg=None) -> str:
    """A GRID workload's own summary of `out` (at cfg's settings, when given)."""
    try:
        return contract.card(workload).summarise()(out, cfg)
    except ValueError as exc:
        raise UsageError(str(exc).strip().splitlines()[-1]) from None


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def sweep(out: Path) -> str:
    spec = json.loads((out / "sweep.json").read_text())
    cells = sorted((out / "cells").glob("*/cell.json"))
    if spec.get("shared_out"):
        return summary(out, spec["workload"], _settings(out, cells))
    metric = contract.card(spec["workload"]).headline
    header = [*spec["grid"], "metric", "value", "epochs", "status"]
    rows, csv_rows = [], []
    for path in cells:
        cell = json.loads(path.read_text())
        run_dir = path.parent / "run"
        runs = headline(run_dir, metric)[1] if run_dir.exists() else []
        last = runs[0][1] if runs else {}
        value = last.get(metric)
        status = "done" if (path.parent / "DONE.json").exists() else "not finished"
        row = [*(cell["values"][k] for k in spec["grid"]), metric if runs else "-",
               shown(metric, value), last.get("epoch", "-"), status]
        rows.append(row)
        csv_rows.append(dict(zip(header, row, strict=True)))
    with open(out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(csv_rows)
    table = _table(header, rows)
    (out / "summary.md").write_text(table + "\n")
    return f"{table}\n{len(rows)} cells; written:\n  {out / 'summary.csv'}\n  {out / 'summary.md'}"


def _settings(out: Path, cells: list[Path]):
    """The validated settings the first finished cell of a shared-folder sweep trained with
    (its run's config.json), as the summary's `cfg`; None (every run) when none finished."""
    for path in cells:
        done = path.parent / "DONE.json"
        labels = json.loads(done.read_text()).get("runs", []) if done.exists() else []
        for label in labels:
            config = read_config(out / label)
            if config:
                return SimpleNamespace(**{k.lower(): v for k, v in config.items()})
    return None


@_figures_closed
def runs(out: Path, metric: str) -> str:
    metric, found = headline(out, metric)
    rows, notebooks, caches = [], [], []
    for label, last in found:
        run_dir = out if label == "." else out / label
        caches += [f"  {'' if label == '.' else label + ': '}{line}"
                   for line in compile_cache.describe(run_dir)]
        history = read_jsonl(run_dir / "metrics.jsonl")
        keys = tuple(m for m in ("loss", "accuracy", "mIoU")
                     if any(f"test_{m}" in r or f"train_{m}" in r for r in history))
        if not current(run_dir / "curves.png", run_dir / "metrics.jsonl"):
            training_curves(history, run_dir / "curves.png", metrics=keys or ("loss",))
        best = best_record(history, metric) or {}
        rows.append([label, last.get("epoch"),
                     f"{shown(metric, best.get(metric))} (epoch {best.get('epoch', '-')})",
                     shown(metric, last.get(metric)), last.get("device", "-"),
                     str(run_dir / "curves.png")])
        notebooks += [str(p) for p in session_notebooks(run_dir)]
    table = _table(["run", "epochs", f"best {metric or 'metric'}", "last epoch", "device",
                    "curves"], rows)
    kept = "\n".join(f"  {p}" for p in notebooks) or "  none (run in Jupyter or by papermill)"
    cached = ("\ncompile cache (compiled graphs the next session loads):\n" + "\n".join(caches)
              if caches else "")
    return f"{table}\nexecuted notebooks, one per session that trained:\n{kept}{cached}"


def report(out: Path) -> str:
    """The results of `out`, then what its sessions measured per platform (lib.cli.speed),
    then its plan.json beside what ran and a re-plan of what is left (lib.cli.plan.compare)."""
    from lib.cli.plan.compare import report as planned  # plan.json beside what ran
    from lib.cli.speed import table

    text, timed, plan = results(Path(out)), table(Path(out)), planned(Path(out))
    return "\n\n".join(part for part in (text, timed, plan) if part)


def results(out: Path) -> str:
    if (out / "sweep.json").exists():
        return sweep(out)
    if any(out.rglob("metrics.jsonl")) or any(out.glob("*/DONE.json")):
        workload = workload_of(out)
        if workload is None:
            return runs(out, _first_score(out))
        card = contract.card(workload)
        return summary(out, workload) if card.grid else runs(out, card.headline)
    raise UsageError(f"{out} holds no finished run (no sweep.json, DONE.json or metrics.jsonl); "
                     "pass the --out of a finished run or sweep.")
