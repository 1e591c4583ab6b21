"""What is left to train, read without torch: a run folder (or a grid's or sweep's folder of
runs), or a workload with parameters (`-p`, as `run` takes them) and a `--grid` (as `sweep`).

A workload whose notebook fans out over list parameters (the optimizer study's OPTIMIZERS and
SEEDS, used when OPTIMIZER / SEED are None) is one run per combination, as its notebook trains
them; each `--grid` cell of it fans out the same way.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from lib.cli.params import UsageError, closest, collect_overrides, parameters
from lib.cli.plan.speeds import full_samples, run_samples, settings_of
from lib.cli.speed import timed_sessions
from lib.runs.records import read_jsonl


@dataclass
class Work:
    """The runs left (name -> epochs), their workload and settings, what an epoch holds."""

    workload: str
    settings: dict
    runs: dict  # name -> epochs left
    samples: int | None  # training samples per epoch (None: unknown)
    origin: str  # what was planned, for the plan's header
    cells: dict = field(default_factory=dict)  # run name -> the sweep cell it belongs to
    folder: Path | None = None  # the run folder planned, where plan.json goes


def _fan_out(values: dict) -> list[tuple[str, dict]]:
    """(name, values) of each run a workload's notebook trains for these parameter values."""
    axes = {k: v for k, v in values.items() if isinstance(v, list) and k.endswith("S")
            and k[:-1] in values and values[k[:-1]] is None}
    if not axes:
        return [("", {})]
    return [("-".join(f"{k[:-1].lower()}={v}" for k, v in zip(axes, combo, strict=True)),
             dict(zip([k[:-1] for k in axes], combo, strict=True)))
            for combo in itertools.product(*axes.values())]


def from_workload(workload: str, pairs, grid_items) -> Work:
    """The runs `train-anywhere run WORKLOAD -p ...` (or `sweep --grid ...`) would train."""
    from lib.cli.sweep import cell_name, parse_grid

    known = {p.name: p.default for p in parameters(workload)}
    overrides = collect_overrides(pairs)
    for name in overrides:
        if name not in known:
            raise UsageError(f"unknown parameter {name}{closest(name, known)} for {workload}; "
                             f"see `train-anywhere params {workload}`.")
    grid = parse_grid(grid_items, workload) if grid_items else {}
    base = {**known, **overrides}
    runs, cells = {}, {}
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        cell = cell_name(values) if values else ""
        for sub, _ in _fan_out({**base, **values}):
            name = "__".join(n for n in (cell, sub) if n) or workload
            runs[name] = int(values.get("EPOCHS", base.get("EPOCHS") or 0))
            cells[name] = cell
    settings = {k.lower(): base.get(k.upper()) for k in ("dataset", "smoke", "sample_data")}
    said = " ".join(f"-p {k} {v}" for k, v in overrides.items())
    said += "".join(f" --grid {g}" for g in grid_items or [])
    return Work(workload, settings, runs, full_samples(workload, settings),
                f"{workload} {said}".strip(), cells)


def from_folder(folder: Path) -> Work:
    """The epochs each run under `folder` has left: EPOCHS of its newest session less the
    epochs its metrics.jsonl holds; a sweep's folder: each unfinished cell's."""
    folder = Path(folder)
    if (folder / "sweep.json").exists():
        return _from_sweep(folder)
    found = timed_sessions(folder)
    if not found:
        raise UsageError(f"{folder} holds no run that trained (no sessions.jsonl under it); "
                         "pass the --out of a run, or plan a workload: train-anywhere plan "
                         "WORKLOAD -p EPOCHS N.")
    workload, settings = settings_of(found[0][0])
    runs = {}
    for run_dir, rows in found:
        target = rows[-1].get("epochs") or 0
        name = "." if run_dir == folder else str(run_dir.relative_to(folder))
        runs[name] = max(0, target - len(read_jsonl(run_dir / "metrics.jsonl")))
    return Work(workload, settings, runs, run_samples(found[0][0]), str(folder),
                folder=folder)


def _from_sweep(folder: Path) -> Work:
    spec = json.loads((folder / "sweep.json").read_text())
    runs, cells = {}, {}
    settings = {k: spec.get("params", {}).get(k.upper()) for k in ("dataset", "smoke",
                                                                      "sample_data")}
    for path in sorted((folder / "cells").glob("*/cell.json")):
        cell = json.loads(path.read_text())
        if (path.parent / "DONE.json").exists():
            continue
        epochs = int(cell.get("epochs") or cell["params"].get("EPOCHS") or 0)
        done = len(read_jsonl(path.parent / "run" / "metrics.jsonl"))
        runs[cell["name"]] = max(0, epochs - done)
        cells[cell["name"]] = cell["name"]
    samples = next((run_samples(p.parent) for p in sorted(folder.rglob("metrics.jsonl"))), None)
    return Work(spec["workload"], settings, runs,
                samples or full_samples(spec["workload"], settings), str(folder), cells,
                folder=folder)


def nothing_left(work: Work) -> None:
    if not any(work.runs.values()):
        raise UsageError(f"nothing left to train in {work.origin}: every run has trained its "
                         "EPOCHS; raise EPOCHS (-p EPOCHS N) to plan more.")
