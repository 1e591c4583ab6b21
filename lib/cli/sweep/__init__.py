"""`train-anywhere sweep`: one notebook per grid cell, on an engine that already exists.

    train-anywhere sweep optimizer_study --grid OPTIMIZER=sgd,adam --grid SEED=0,1 \\
        -p SMOKE True -p SAMPLE_DATA True -p EPOCHS 2 --out runs/study --on local --jobs 2

Layout of `--out DIR`:

    DIR/sweep.json                 what was asked (workload, platform, grid, parameters)
    DIR/cells/<cell>/cell.json     one cell: its notebook and parameters
    DIR/cells/<cell>/notebook.ipynb  the executed notebook (or the one pushed, remotely)
    DIR/cells/<cell>/DONE.json     the cell finished (a re-run skips it) ...
    DIR/cells/<cell>/FAILED.json   ... or failed, with its one-line error (a re-run retries)

Each cell's OUT_DIR is `DIR/cells/<cell>/run`, except for GRID workloads, whose notebook keeps
one folder per grid run itself (lib/workloads: the contract): their cells share `DIR`, so the
workload's own summary (the optimizer study's results.csv, summary.md, figures) covers them
all. The backends (`local`, `slurm`, `kaggle`, `colab`: one module each) only decide where
`execute_cell` runs.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lib import workloads as contract
from lib.base import atomic
from lib.cli.params import (
    UsageError,
    absolute_paths,
    check_folder,
    check_platform,
    check_workload,
    closest,
    collect_overrides,
    parameters,
    parse_value,
    resolve_params,
)

BACKENDS = ("local", "slurm", "kaggle", "colab")
SWEEP = "sweep.json"
CELL, DONE, FAILED = "cell.json", "DONE.json", "FAILED.json"


class BackendError(RuntimeError):
    """The engine refused or failed (credentials, quota, network): one line, exit 1."""


@dataclass(frozen=True)
class Cell:
    """One grid cell: its values and its folder under DIR/cells."""

    name: str
    values: dict
    dir: Path

    @property
    def done(self) -> bool:
        return (self.dir / DONE).exists()

    def spec(self) -> dict:
        return json.loads((self.dir / CELL).read_text())


def parse_grid(items: list[str] | None, workload: str) -> dict[str, list]:
    """`--grid NAME=v1,v2` (repeatable) -> {NAME: [v1, v2]}, names checked, order kept."""
    known = {p.name for p in parameters(workload)}
    grid: dict[str, list] = {}
    for item in items or []:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise UsageError(f"--grid {item!r} is not NAME=v1,v2,...; e.g. --grid SEED=0,1,2.")
        if name not in known:
            raise UsageError(f"unknown parameter {name}{closest(name, known)} in --grid for "
                             f"{workload}; see `train-anywhere params {workload}`.")
        if name in grid:
            raise UsageError(f"--grid {name} is given twice; list its values once: "
                             f"--grid {name}=a,b,c.")
        grid[name] = list(dict.fromkeys(parse_value(v) for v in values.split(",")))
    if not grid:
        raise UsageError("no --grid given; e.g. --grid SEED=0,1,2 (repeat --grid for more "
                         "parameters).")
    return grid


def cell_name(values: dict) -> str:
    return "__".join(f"{k.lower()}={v}" for k, v in values.items())


def plan(args, only: set[str] | None = None) -> tuple[dict, list[Cell]]:
    """Check everything (every cell's parameters too), write sweep.json and the cells (only
    those named in `only`, when given: `sweep --plan` runs a plan's cells backend by backend)."""
    workload = check_workload(args.workload)
    platform = check_platform(args.platform)
    if args.on not in BACKENDS:
        raise UsageError(f"unknown backend --on {args.on}; expected one of "
                         f"{', '.join(BACKENDS)}.")
    base = collect_overrides(args.param)
    if "OUT_DIR" in base:
        raise UsageError("give the sweep's folder with --out DIR, not -p OUT_DIR.")
    grid = parse_grid(args.grid, workload)
    clash = sorted(set(grid) & set(base))
    if clash:
        raise UsageError(f"{clash[0]} is both in --grid and -p; keep it in one of them.")
    out = check_folder("--out", Path(args.out).expanduser().resolve())
    if isinstance(base.get("DATA_DIR"), str) and args.on not in ("kaggle", "colab"):
        check_folder("-p DATA_DIR", Path(base["DATA_DIR"]).expanduser().resolve())
    shared = contract.get(workload).grid  # the workload keeps one folder per grid run
    remote = args.on in ("kaggle", "colab")
    # Remote cells get their paths as given (they name the remote machine's folders).
    sweep = {"workload": workload, "platform": platform, "grid": grid,
             "params": base if remote else absolute_paths(base), "shared_out": shared}
    old = out / SWEEP
    if old.exists():
        before = json.loads(old.read_text())
        if {k: before.get(k) for k in ("workload", "grid", "params")} != {
                k: sweep[k] for k in ("workload", "grid", "params")}:
            raise UsageError(f"{out} already holds a different sweep (see {old}); use a new "
                             "--out, or repeat that sweep's command to resume it.")
    cells, first_cfg = [], None
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        name = cell_name(values)
        cdir = out / "cells" / name
        params = {**sweep["params"], **values}
        if not remote:
            params["OUT_DIR"] = str(out if shared else cdir / "run")
        params, cfg = resolve_params(workload, platform, params)
        first_cfg = first_cfg or cfg
        if only is None or name in only:
            cells.append((Cell(name, values, cdir), params))
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(old, json.dumps(sweep, indent=1, default=str))
    for cell, params in cells:
        cell.dir.mkdir(parents=True, exist_ok=True)
        spec = {"workload": workload, "platform": platform, "name": cell.name,
                "values": cell.values, "params": params, "shared_out": shared,
                "epochs": getattr(first_cfg, "epochs", None)}
        atomic.write_text(cell.dir / CELL, json.dumps(spec, indent=1, default=str))
    sweep["config"] = first_cfg
    return sweep, [c for c, _ in cells]


def add_sweep_parser(sub, param_help: str) -> None:
    p = sub.add_parser(
        "sweep", help="a grid of runs, one notebook per cell, then the summary",
        description="Run WORKLOAD's notebook once per cell of the --grid (each in its own "
                    "folder under --out, finished cells skipped, so re-running the same "
                    "command resumes), then write the summary table and figures.")
    p.add_argument("workload", metavar="WORKLOAD", nargs="?")
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2",
                   help="a grid axis (repeatable), e.g. --grid OPTIMIZER=sgd,adam --grid SEED=0,1")
    p.add_argument("--plan", metavar="PLAN.json",
                   help="run the cells of `train-anywhere plan WORKLOAD --grid ...`'s plan.json "
                        "on the backends it names (its workload, grid and -p; -p here adds)")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help=param_help + " (the same in every cell)")
    p.add_argument("--platform", default=None,
                   help="which platform's notebook (default: local; kaggle_p100 with "
                        "--on kaggle, colab_t4 with --on colab)")
    p.add_argument("--out", required=True, metavar="DIR", help="the sweep's folder")
    p.add_argument("--on", default="local", metavar="BACKEND",
                   help=f"where the cells run: {', '.join(BACKENDS)} (default local)")
    g = p.add_argument_group("local")
    g.add_argument("--jobs", type=int, default=1,
                   help="cells at once: worker processes, Slurm array tasks or Colab VMs "
                        "(default 1)")
    g = p.add_argument_group("slurm (through submitit: one job array)")
    g.add_argument("--partition", help="Slurm partition")
    g.add_argument("--gpus", type=int, default=None, help="GPUs per cell")
    g.add_argument("--time", type=int, default=None, metavar="MINUTES",
                   help="time limit per cell in minutes (also Kaggle's and colab exec's)")
    g.add_argument("--max-requeues", type=int, default=3, metavar="N",
                   help="times a cell may hit --time and requeue itself to go on from its "
                        "checkpoint (default 3; preemptions do not count)")
    g.add_argument("--cluster", default="slurm", choices=("slurm", "local", "debug"),
                   help="submitit's executor: slurm, or local/debug to try the array here")
    g = p.add_argument_group("kaggle (kernels push / status / output)")
    g.add_argument("--max-running", type=int, default=2,
                   help="kernels running at once (Kaggle's GPU concurrency limit)")
    g.add_argument("--quota-hours", type=float, default=30.0,
                   help="weekly GPU quota left, to compare with the grid's estimate")
    g.add_argument("--hours-per-cell", type=float, default=None,
                   help="estimated GPU hours per cell (checked against --quota-hours)")
    g = p.add_argument_group("colab (google-colab-cli)")
    g.add_argument("--gpu", default="T4", choices=("T4", "L4", "A100"),
                   help="the Colab VM's accelerator (default T4)")
    p.add_argument("--poll", type=float, default=30.0, metavar="SECONDS",
                   help="how often remote backends ask for status (default 30)")
    p.set_defaults(fn=sweep_command)


DEFAULT_PLATFORM = {"local": "local", "slurm": "local", "kaggle": "kaggle_p100",
                    "colab": "colab_t4"}


def sweep_command(args, only: set[str] | None = None) -> int:
    if getattr(args, "plan", None) and only is None:
        return args.follow_plan(args)  # lib.cli.plan.follow (wired by lib.cli.main)
    if args.workload is None:
        raise UsageError("give the WORKLOAD to sweep, or --plan PLAN.json (from `train-anywhere "
                         "plan WORKLOAD --grid ...`).")
    if args.platform is None:
        args.platform = DEFAULT_PLATFORM.get(args.on, "local")
    sweep, cells = plan(args, only)
    out = Path(args.out).expanduser().resolve()
    todo = [c for c in cells if not c.done]
    print(f"sweep {sweep['workload']} on {args.on}: {len(cells)} cells, "
          f"{len(cells) - len(todo)} finished, {len(todo)} to run -> {out}", flush=True)
    t0 = time.perf_counter()
    if todo:
        from importlib import import_module

        backend = import_module(f"lib.cli.sweep.{args.on}")
        try:
            backend.run(todo, args, out)
        except BackendError as exc:
            print(f"train-anywhere sweep: {exc}", file=sys.stderr)
            return 1
    failed = [c for c in cells if not c.done]
    for c in failed:
        reason = "did not finish"
        if (c.dir / FAILED).exists():
            reason = json.loads((c.dir / FAILED).read_text()).get("error", reason)
        print(f"cell {c.name} failed: {reason}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(cells)} cells failed; the grid's state is kept in {out}: "
              "run the same command again to retry them.", file=sys.stderr)
        return 1
    from lib.cli.sweep.report import report

    print(f"all {len(cells)} cells finished ({time.perf_counter() - t0:.0f}s this time)")
    print(report(out))
    return 0

