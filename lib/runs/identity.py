"""Which experiment a run folder holds, and whether this session may train in it.

A run folder's `config.json` records, once, the experiment it holds: every parameter that
changes what is computed (`RunConfig.identity`). A session whose experiment differs from a
folder that already holds training (checkpoints, metrics or a finished marker) is refused
before anything is read or written, with each changed parameter and the fixes in one line.
`RESUME` says what a session does with a folder that holds training:

- "auto": resume the same experiment, refuse another (the default);
- "new": leave it as it is and start afresh in the first free `fresh-<n>` sub-folder;
- "require": resume, and refuse when there is nothing to resume.

Each session that trains appends what it ran with (device, precision, batch, EPOCHS...) to
`sessions.jsonl`, so settings that may change between sessions are recorded, not overwritten;
a session with nothing left to train leaves the folder as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from lib.base import atomic
from lib.base.errors import ExperimentChanged, OutDirError, how_to_set, new_out_dir
from lib.runtime import environment

CONFIG = "config.json"
SESSIONS = "sessions.jsonl"
FRESH = "fresh-"
_TRAINED = ("metrics.jsonl", "DONE.json")
# The global batch is recorded under its own name; BATCH_SIZE is the per-device parameter.
_LABELS = {"global_batch_size": "BATCH_SIZE x devices (global batch)", "workload": "workload"}


class _Any:
    """An identity value that matches any recorded one: BATCH_SIZE None takes the global
    batch a run already trains with (`lib.session`)."""

    def __repr__(self) -> str:
        return "any"


ANY = _Any()


def holds_training(run_dir: Path) -> bool:
    """True when `run_dir` holds something a run trained or recorded."""
    run_dir = Path(run_dir)
    ckpts = run_dir / "checkpoints"
    return (any((run_dir / name).exists() for name in _TRAINED)
            or (ckpts.is_dir() and any(p.suffix == ".pt" for p in ckpts.iterdir())))


def read_config(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / CONFIG).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def recorded(run_dir: Path, run_settings: frozenset[str]) -> dict | None:
    """The experiment `run_dir` records; folders from before identities are read from the
    parameters their config.json kept."""
    config = read_config(run_dir)
    if config is None:
        return None
    if "experiment" in config:
        return config["experiment"]
    resolved = config.get("resolved", {})
    legacy = {k: v for k, v in config.items() if k not in run_settings and k != "resolved"}
    if "batch_size" in resolved:
        legacy["global_batch_size"] = resolved["batch_size"] * resolved.get("world_size", 1)
    return legacy


def changes(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(name, old, new) of each parameter that differs; names the old record lacks (added
    to the project after it was written) and values `ANY` are not differences."""
    return [(k, old[k], new.get(k)) for k in old
            if new.get(k) is not ANY and old[k] != new.get(k)]


def _label(name: str) -> str:
    return _LABELS.get(name, name.upper())


def describe(diff: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{_label(k)} {old!r} -> {new!r}" for k, old, new in diff)


def check_same(run_dir: Path, identity: dict, run_settings: frozenset[str]) -> None:
    """Refuse, touching nothing, when `run_dir` holds training of another experiment."""
    if not holds_training(run_dir):
        return
    old = recorded(run_dir, run_settings)
    if old is None:
        return  # trained before config.json existed: the checkpoint checks still apply
    diff = changes(old, identity)
    if diff:
        raise ExperimentChanged(
            f"OUT_DIR {str(run_dir)!r} holds a {old.get('workload', identity['workload'])} "
            f"run with other defining parameters: {describe(diff)}. Nothing in it was "
            f"changed. To start afresh, {new_out_dir()}, or {how_to_set('RESUME', 'new')} (a "
            "new sub-folder, the old run kept); to resume that run, restore those values.")


def fresh_folder(out_dir: Path) -> Path:
    """The first `fresh-<n>` sub-folder of `out_dir` that does not exist yet."""
    n = 1
    while (Path(out_dir) / f"{FRESH}{n}").exists():
        n += 1
    return Path(out_dir) / f"{FRESH}{n}"


def resolve(out_dir: Path, runs: list[tuple[Path, dict]], resume: str,
            run_settings: frozenset[str]) -> Path:
    """The folder to train in, after the RESUME rule. `runs` are (run folder relative to
    OUT_DIR, experiment identity): one for a single run ("."), one per cell for a grid."""
    out_dir = Path(out_dir)
    started = [rel for rel, _ in runs if holds_training(out_dir / rel)]
    if resume == "new":
        return fresh_folder(out_dir) if started else out_dir
    if resume == "require" and len(started) < len(runs):
        missing = [str(out_dir / rel) for rel, _ in runs if rel not in started]
        raise OutDirError(
            f"RESUME = \"require\" but {missing[0]!r}"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''} holds no run to "
            "resume. Set OUT_DIR to the folder of the run to resume, or RESUME = \"auto\" to "
            "start it.")
    for rel, identity in runs:
        check_same(out_dir / rel, identity, run_settings)
    return out_dir


def record(run_dir: Path, config: dict, identity: dict) -> None:
    """Write config.json while the folder holds no training yet: the experiment is recorded
    once, before its first step, and never rewritten after."""
    run_dir = Path(run_dir)
    if not holds_training(run_dir):
        text = json.dumps(dict(config, experiment=identity), indent=2, sort_keys=True) + "\n"
        atomic.write_bytes(run_dir / CONFIG, text.encode(), failpoint="experiment.record")


def append_session(run_dir: Path, session: dict) -> None:
    """Add a session that trains in `run_dir` to its sessions.jsonl (what it ran with)."""
    with open(Path(run_dir) / SESSIONS, "a") as f:
        f.write(json.dumps(session, sort_keys=True) + "\n")


def batch_record(run_dir: Path, run_settings: frozenset[str]) -> tuple[int | None, list[dict]]:
    """(the global batch the run in `run_dir` trains with, the rows of the sessions that
    trained it), when it holds training; else (None, [])."""
    if not holds_training(run_dir):
        return None, []
    return (recorded(run_dir, run_settings) or {}).get("global_batch_size"), read_sessions(run_dir)


def read_sessions(run_dir: Path) -> list[dict]:
    """The sessions that trained in `run_dir`, oldest first ([] when none is recorded), each
    row with today's key names (lib.runtime.environment.readable)."""
    try:
        lines = (Path(run_dir) / SESSIONS).read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [environment.readable(json.loads(line)) for line in lines if line.strip()]


def timed_sessions(out: Path) -> list[tuple[Path, list[dict]]]:
    """(run folder, its sessions) of every run under `out` that recorded a session."""
    found = []
    for path in sorted(Path(out).rglob(SESSIONS)):
        rows = read_sessions(path.parent)
        if rows:
            found.append((path.parent, rows))
    return found


def sessions_table(run_dir: Path) -> str:
    """A Markdown table of the sessions that trained the run, one row each: the epochs it
    trained (from its first to the next session's first), where and with what; "" when
    no session is recorded."""
    rows = read_sessions(run_dir)
    if not rows:
        return ""
    done = _epochs(Path(run_dir))
    lines = ["| epochs | platform | device | precision | batch per device x devices |",
             "|---|---|---|---|---|"]
    for row, nxt in zip(rows, rows[1:] + [None], strict=True):
        first = row.get("from_epoch", 1)
        last = nxt.get("from_epoch", first) - 1 if nxt else max(done, first)
        span = f"{first}-{last}" if last > first else f"{first}"
        devices = row.get("devices", row.get("world_size", 1))
        batch = f"{row.get('batch_size', '?')} x {devices}"
        if row.get("accumulation", 1) > 1:  # micro-batches: lib.training.batch
            batch += f" ({row['micro_batch']} per step x {row['accumulation']} accumulated)"
        lines.append(f"| {span} | {row.get('platform', '?')} | {row.get('device', '?')} | "
                     f"{row.get('precision', '?')} | {batch} |")
    return "\n".join(lines)


# Carrying a run over from an earlier session's attached output (Kaggle) ---------------------
CARRY_DEPTH = 4  # levels searched below each attached folder (runs/<workload>/ is two)


def _run_folders(root: Path, depth: int):
    """Folders at most `depth` levels below `root` that record an experiment and hold
    training; symlinks are not followed."""
    if (root / CONFIG).is_file() and holds_training(root):
        yield root
        return
    if depth == 0:
        return
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return
    for child in children:
        yield from _run_folders(child, depth - 1)


def run_folders(root: Path, depth: int = CARRY_DEPTH) -> list[Path]:
    """The run folders (a recorded experiment, training) at most `depth` levels below
    `root`."""
    return list(_run_folders(Path(root), depth))


def _epochs(run_dir: Path) -> int:
    try:
        return sum(1 for line in (run_dir / "metrics.jsonl").open() if line.strip())
    except OSError:
        return 0


def attached_runs(roots: list[Path], workload: str, run_settings: frozenset[str]
                  ) -> list[tuple[Path, dict]]:
    """(folder, recorded experiment) of each attached run folder of `workload`."""
    found = []
    for root in roots:
        for folder in _run_folders(Path(root), CARRY_DEPTH):
            old = recorded(folder, run_settings) or {}
            if old.get("workload") == workload:
                found.append((folder, old))
    return found


def find_attached(roots: list[Path], identity: dict, run_settings: frozenset[str]
                  ) -> tuple[Path | None, list[tuple[Path, list]]]:
    """(the attached run folder of this experiment with the most epochs, or None; the
    attached runs of the same workload with other defining parameters, with their changes)."""
    same, other = [], []
    for folder, old in attached_runs(roots, identity.get("workload"), run_settings):
        diff = changes(old, identity)
        (other.append((folder, diff)) if diff else same.append(folder))
    return max(same, key=_epochs, default=None), other


def copy_in(source: Path, out_dir: Path) -> None:
    """Copy an attached (read-only) run folder into `out_dir`, which holds no training:
    into a hidden sibling first, then moved in checkpoints first, so a kill mid-copy leaves
    either nothing carried or a folder that resumes from what it holds."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.carrying"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, copy_function=shutil.copyfile)  # no read-only modes
    entries = sorted(tmp.iterdir(), key=lambda p: (p.name != "checkpoints", p.name == CONFIG))
    for entry in entries:
        target = out_dir / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(entry, target)
    tmp.rmdir()


def carry_over(out_dir: Path, roots: list[Path], identity: dict,
               run_settings: frozenset[str], how: str) -> str | None:
    """When `out_dir` holds no training, bring in an attached run of the same experiment
    (`roots`: the folders the user attached). Returns the one line to say, or None when
    `out_dir` already holds training. An attached run of a changed experiment is refused
    as RESUME refuses one; nothing found: how to carry a run over (`how`)."""
    if holds_training(out_dir):
        return None
    found, other = find_attached(roots, identity, run_settings)
    if found is not None:
        copy_in(found, out_dir)
        return (f"carried over the run in {found} ({_epochs(found)} epochs) into {out_dir}; "
                "training resumes from its newest checkpoint")
    if other:
        folder, diff = other[0]
        raise ExperimentChanged(
            f"the attached run {str(folder)!r} is a {identity['workload']} run with other "
            f"defining parameters: {describe(diff)}; it was not carried over. To resume it, "
            "restore those values; to start afresh, remove that input from the notebook or "
            "set OUT_DIR to a new folder.")
    return ("no earlier run of this experiment in OUT_DIR or the attached inputs: training "
            f"starts at epoch 1. To continue it in a later session: {how}.")


def carry(out_dir: Path, roots: list[Path], runs: list[tuple[str, dict]],
          run_settings: frozenset[str], how: str, grid: bool) -> str | None:
    """`carry_over_grid` for a grid's `runs`, else `carry_over` for the one run."""
    if grid:
        return carry_over_grid(out_dir, roots, runs, run_settings, how)
    return carry_over(out_dir, roots, runs[0][1], run_settings, how)


def carry_over_grid(out_dir: Path, roots: list[Path], runs: list[tuple[str, dict]],
                    run_settings: frozenset[str], how: str) -> str | None:
    """`carry_over` for a grid (`runs`: each cell's folder relative to OUT_DIR and its
    experiment): every cell whose folder holds no training takes the attached run of its
    experiment, finished or not. An attached cell of a changed experiment (a folder of the
    cell's name with other defining parameters) is refused before anything is copied.
    Returns the one line to say, or None when OUT_DIR's cells hold training and none is
    carried."""
    out_dir = Path(out_dir)
    empty = [(rel, identity) for rel, identity in runs if not holds_training(out_dir / rel)]
    if not empty:
        return None
    attached = attached_runs(roots, empty[0][1].get("workload"), run_settings)
    plan = []
    for rel, identity in empty:
        same = [folder for folder, old in attached if not changes(old, identity)]
        if same:
            plan.append((max(same, key=_epochs), out_dir / rel))
            continue
        for folder, old in attached:
            if folder.name == Path(rel).name:
                raise ExperimentChanged(
                    f"the attached run {str(folder)!r} is the grid's run {rel} with other "
                    f"defining parameters: {describe(changes(old, identity))}; no run was "
                    "carried over. To resume the grid, restore those values; to start afresh, "
                    "remove that input from the notebook or set OUT_DIR to a new folder.")
    for source, target in plan:
        copy_in(source, target)
    if plan:
        finished = sum((source / "DONE.json").is_file() for source, _ in plan)
        sources = sorted({str(source.parent) for source, _ in plan})
        return (f"carried over {len(plan)} of the grid's {len(runs)} runs ({finished} "
                f"finished) from {', '.join(sources)} into {out_dir}; finished runs are "
                "skipped, the others resume from their newest checkpoints")
    if len(empty) < len(runs):
        return None  # this session's OUT_DIR already holds runs of the grid
    return ("no earlier run of this grid in OUT_DIR or the attached inputs: every run starts "
            f"at epoch 1. To continue the grid in a later session: {how}.")
