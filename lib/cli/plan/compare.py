"""`report`'s view of a plan: plan.json beside what actually ran (each run's sessions.jsonl),
and a new plan for what is left from the speeds measured since. Read without torch, matplotlib
or the network (the published quotas; the Kaggle client is not asked), and imports nothing
of the sweep, whose report calls it.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lib.cli.plan.quotas as quotas  # modules by name: no import of the package, which
import lib.cli.plan.solve as solve  # reaches the sweep (whose report imports this)
import lib.cli.plan.speeds as speeds
import lib.cli.plan.work as work
from lib.cli.params import UsageError
from lib.runs.identity import read_sessions
from lib.runs.records import read_jsonl


def _folder(out: Path, run: str, cell: str) -> Path:
    for candidate in (out / "cells" / cell / "run", out / "cells" / run / "run", out / run):
        if candidate.is_dir():
            return candidate
    return out


def beside(out: Path, plan: dict) -> list[str]:
    """One row per planned run: where and how many epochs planned, where they ran."""
    planned: dict[str, Counter] = {}
    for s in plan["sessions"]:
        planned.setdefault(s["run"], Counter())[s["platform"]] += s["epochs"]
    lines = [f"the plan ({out / 'plan.json'}: made for {plan['origin']}, to finish "
             f"{plan['finish'][:16].replace('T', ' ')} UTC) beside what ran:",
             "| run | planned (epochs) | ran (epochs) | epochs done |", "|---|---|---|---|"]
    cells = {s["run"]: s.get("cell", "") for s in plan["sessions"]}
    for run, counts in sorted(planned.items()):
        folder = _folder(out, run, cells[run])
        ran = Counter()
        for row in read_sessions(folder):
            ran[row.get("platform", "?")] += row.get("epochs_trained") or 0
        said = ", ".join(f"{p} {n}" for p, n in sorted(counts.items()))
        did = ", ".join(f"{p} {n}" for p, n in sorted(ran.items()) if n) or "nothing yet"
        lines.append(f"| {run} | {said} | {did} | {len(read_jsonl(folder / 'metrics.jsonl'))} |")
    return lines


def replan(out: Path, plan: dict) -> list[str]:
    """The work left under `out`, planned again from the speeds measured there."""
    try:
        left = work.from_folder(out)
        work.nothing_left(left)
    except UsageError as exc:
        return [f"re-plan: none ({str(exc).split(';')[0]})"]
    data = quotas.load()
    names = sorted(set(plan.get("speeds", {})) & set(data["platforms"])) or sorted(
        data["platforms"])
    found, _ = speeds.speeds(left.target(), {n: data["platforms"][n] for n in names}, out)
    for name, old in plan.get("speeds", {}).items():  # what the plan knew, unless measured now
        if name in found and found[name].kind != "measured" and old.get("seconds_per_epoch"):
            found[name] = speeds.Speed(name, old["seconds_per_epoch"], old["kind"],
                                       old["source"])
    usable = [n for n in names if found[n].seconds]
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    platforms, pools = quotas.build(data, usable, now)
    runs = [solve.Run(r, e, {n: found[n].seconds for n in usable})
            for r, e in sorted(left.runs.items()) if e]
    try:
        best = solve.choose(runs, platforms, pools, plan.get("horizon_hours", 24 * 14))["plan"]
    except solve.Infeasible as exc:
        return [f"re-plan: what is left does not fit the plan's horizon ({exc})"]
    finish = (now + timedelta(hours=best.finish)).strftime("%a %d %b %H:%M")
    lines = [f"re-planned from the speeds measured so far: {sum(left.runs.values())} epochs "
             f"left, {len(best.sessions)} sessions on {', '.join(best.used)}, finishing "
             f"{finish} UTC ({best.hours():.1f} h):"]
    lines += [f"  {s.run} on {s.platform}: {s.epochs} epochs, "
              f"{found[s.platform].seconds:.1f} s each ({found[s.platform].kind})"
              for s in best.sessions[:10]]
    if len(best.sessions) > 10:
        lines.append(f"  ... and {len(best.sessions) - 10} more sessions")
    return lines


def report(out: Path) -> str:
    """"" when `out` holds no plan.json; else the plan beside what ran, and the re-plan."""
    path = Path(out) / "plan.json"
    if not path.exists():
        return ""
    try:
        plan = json.loads(path.read_text())
    except json.JSONDecodeError:
        return f"{path} is not JSON: run `train-anywhere plan` again to remake it."
    return "\n".join(beside(Path(out), plan) + replan(Path(out), plan))
