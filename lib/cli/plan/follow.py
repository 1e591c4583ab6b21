"""`train-anywhere sweep --plan PLAN.json`: a plan's grid cells run on the backends it names.

A cell runs whole on one backend, the one of the platform where the plan puts most of its
epochs (a cell the plan splits across platforms then finishes later than printed: said in
one line) (a backend chains that platform's sessions itself: the Kaggle backend pushes the cell
again with its output attached, Colab's uploads the partial run, Slurm requeues it); the
cells are run backend by backend through the sweep's own code (lib/cli/sweep), in the same
--out, and the plan is kept there as plan.json for `report` to set beside what ran. A cell
planned on a platform no backend reaches (Studio Lab, Paperspace...) is named, with the
notebook to open there, and left to run by hand; a backend that cannot start (its tool
missing) is one line, and the other backends' cells still run.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

from lib.base import atomic
from lib.cli.params import UsageError
from lib.runtime.platforms import PLATFORMS


def read_plan(path: str | Path) -> dict:
    try:
        plan = json.loads(Path(path).expanduser().read_text())
    except FileNotFoundError:
        raise UsageError(f"--plan {path}: no such file; make one with `train-anywhere plan "
                         "WORKLOAD --grid NAME=V1,V2` (it writes plan.json).") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--plan {path} is not JSON ({exc}); pass the plan.json that "
                         "`train-anywhere plan` wrote.") from None
    if not isinstance(plan, dict) or "sessions" not in plan:
        raise UsageError(f"--plan {path} is not a plan (no sessions); pass the plan.json that "
                         "`train-anywhere plan` wrote.")
    return plan


def assignments(plan: dict) -> dict[str, str]:
    """cell -> the platform where the plan puts most of its epochs (ties: the name first)."""
    epochs: dict[str, Counter] = {}
    for s in plan["sessions"]:
        epochs.setdefault(s["cell"], Counter())[s["platform"]] += s["epochs"]
    return {cell: min(c, key=lambda p: (-c[p], p)) for cell, c in sorted(epochs.items())}


def split_cells(plan: dict) -> list[str]:
    """The cells the plan puts on more than one platform (sweep --plan runs each on one)."""
    where: dict[str, set] = {}
    for s in plan["sessions"]:
        where.setdefault(s["cell"], set()).add(s["platform"])
    return sorted(cell for cell, platforms in where.items() if len(platforms) > 1)


def follow(args) -> int:
    from lib.cli.sweep import sweep_command

    plan = read_plan(args.plan)
    request = plan.get("request") or {}
    if not request.get("grid"):
        raise UsageError(f"--plan {args.plan} plans {plan.get('origin')}, not a grid's cells; "
                         "plan a grid with `train-anywhere plan WORKLOAD --grid NAME=V1,V2`.")
    if args.workload not in (None, plan["workload"]):
        raise UsageError(f"--plan {args.plan} is a plan for {plan['workload']}, not "
                         f"{args.workload}; leave WORKLOAD out (the plan names it).")
    if args.grid:
        raise UsageError("--grid comes from the plan with --plan; leave it out.")
    args.workload, args.grid = plan["workload"], request["grid"]
    args.param = [list(p) for p in request.get("params", [])] + (args.param or [])
    groups: dict[tuple[str, str], list[str]] = {}
    by_hand: dict[str, list[str]] = {}
    for cell, platform in assignments(plan).items():
        backend = (plan.get("limits", {}).get(platform) or {}).get("backend")
        if backend is None:
            by_hand.setdefault(platform, []).append(cell)
        else:  # a platform of your own (--quotas FILE) runs the local notebook
            notebook = platform if platform in PLATFORMS else "local"
            groups.setdefault((backend, notebook), []).append(cell)
    out = Path(args.out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    kept = out / "plan.json"
    if Path(args.plan).expanduser().resolve() != kept:
        if kept.exists() and json.loads(kept.read_text()) != plan:
            shutil.copy2(kept, out / "plan-before.json")  # the earlier plan, kept
        atomic.write_text(kept, json.dumps(plan, indent=1) + "\n")
    rc = 0
    if split := split_cells(plan):
        print(f"plan: {len(split)} cell(s) planned across platforms ({', '.join(split)}) run "
              "whole on their majority platform, so they finish later than planned: "
              f"`train-anywhere report {args.out}` re-plans from what ran", flush=True)
    for (backend, notebook), cells in sorted(groups.items()):
        print(f"plan: {len(cells)} cell(s) on {backend} ({notebook}): {', '.join(cells)}",
              flush=True)
        args.on, args.platform = backend, notebook
        try:
            rc = max(rc, sweep_command(args, only=set(cells)))
        except UsageError as exc:  # one backend that cannot start stops none of the others
            print(f"plan: the {len(cells)} cell(s) on {backend} did not start: {exc}",
                  file=sys.stderr, flush=True)
            rc = max(rc, 2)
    for platform, cells in sorted(by_hand.items()):
        print(f"plan: {len(cells)} cell(s) planned on {platform}, which no sweep backend "
              f"reaches ({', '.join(cells)}): open notebooks/{platform}/{plan['workload']}.ipynb"
              " there with each cell's parameters.", file=sys.stderr)
        rc = max(rc, 1)
    return rc
