"""What is left to train in a folder, read without torch: a run folder, a grid's folder of
runs or a sweep's folder (a workload with parameters: grid.py). Imports nothing of the sweep,
so that `report` (lib/cli/sweep/report.py) can re-plan with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from lib.cli.params import UsageError
from lib.cli.plan.speeds import Target, full_samples, params_of, run_samples, settings_of
from lib.runs.identity import timed_sessions
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
    request: dict | None = None  # a workload's -p pairs and --grid items, for `sweep --plan`
    params: dict = field(default_factory=dict)  # the experiment's parameters (lower-case)
    model: dict | None = None  # the model config its sessions recorded (None: not recorded)

    def target(self) -> Target:
        """What a speed must have timed to count for this work (lib.cli.plan.speeds)."""
        return Target(self.workload, {**self.params, **{k: v for k, v in self.settings.items()
                                                         if v is not None}},
                      self.samples, self.model)


def from_folder(folder: Path, epochs: int | None = None) -> Work:
    """The epochs each run under `folder` has left: EPOCHS of its newest session (or
    `epochs`, what -p EPOCHS asks of it) less the epochs its metrics.jsonl holds; a sweep's
    folder: each unfinished cell's."""
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
        target = epochs or rows[-1].get("epochs") or 0
        name = "." if run_dir == folder else str(run_dir.relative_to(folder))
        runs[name] = max(0, target - len(read_jsonl(run_dir / "metrics.jsonl")))
    rows = found[0][1]
    model = next(((r.get("timed") or {}).get("model") for r in reversed(rows)
                  if (r.get("timed") or {}).get("model") is not None), None)
    return Work(workload, settings, runs, run_samples(found[0][0]), str(folder),
                folder=folder, params=params_of(found[0][0])[1], model=model)


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
    params = {k.lower(): v for k, v in spec.get("params", {}).items()}
    return Work(spec["workload"], settings, runs,
                samples or full_samples(spec["workload"], settings), str(folder), cells,
                folder=folder, params={**params, "workload": spec["workload"]})


def nothing_left(work: Work) -> None:
    if not any(work.runs.values()):
        more = (f"train-anywhere plan {work.origin} -p EPOCHS N" if work.folder else
                "a larger -p EPOCHS N")
        raise UsageError(f"nothing left to train in {work.origin}: every run has trained its "
                         f"EPOCHS; to plan more epochs: {more}.")
