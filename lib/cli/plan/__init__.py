"""`train-anywhere plan`: where, in how many sessions, and by when the work left finishes.

    train-anywhere plan runs/fashion                       # a run folder: its epochs left
    train-anywhere plan mshnet -p EPOCHS 400               # a workload with parameters
    train-anywhere plan optimizer_study --grid SEED=0,1    # a grid, as `sweep` takes it
    train-anywhere plan runs/fashion --quota kaggle_t4x2=18h --quotas mine.toml --horizon 14d

This module only gathers the inputs (work.py: what is left; speeds.py: seconds per epoch
with their sources; quotas.py: the limits with theirs) and shows the output: one table, the
same as JSON (`--json`; plan.json), and the picture (picture.py; plan.png), both written
beside the run. The plan itself is solve.py's pure function. Bad input is one line, exit 2.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lib.base import atomic
from lib.cli.params import UsageError, collect_overrides, workloads

HORIZON = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>h|d|w)$")
UNIT_HOURS = {"h": 1.0, "d": 24.0, "w": 168.0}


def parse_horizon(text: str) -> float:
    m = HORIZON.match(text.strip().lower())
    if not m or float(m["n"]) <= 0:
        raise UsageError(f"--horizon {text!r} is not a duration; expected e.g. 36h, 14d or 2w.")
    return float(m["n"]) * UNIT_HOURS[m["unit"]]


def parse_start(text: str | None) -> datetime:
    if text is None:
        now = datetime.now(UTC).replace(second=0, microsecond=0)
        return now + timedelta(minutes=1)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--start {text!r} is not a date and time; expected ISO 8601, e.g. "
                         "2026-12-01T09:00.") from None
    # A time with an offset is that instant, planned and shown in UTC; one without is UTC.
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def gather(args):
    """(work, quota data, notes) for the command's arguments."""
    from lib.cli.plan import grid, quotas, work

    data = quotas.override(quotas.load(Path(args.quotas) if args.quotas else None), args.quota)
    target = Path(args.target).expanduser()
    if args.target in workloads():
        found = grid.from_workload(args.target, args.param, args.grid)
    elif target.is_dir():
        asked = dict(collect_overrides(args.param))
        if args.grid or set(asked) - {"EPOCHS"}:
            raise UsageError(f"--grid and -p other than EPOCHS describe a workload, not the run "
                             f"folder {target}: its settings are its own; -p EPOCHS N plans it "
                             "to N epochs.")
        found = work.from_folder(target.resolve(), grid.epochs_of(asked["EPOCHS"])
                                 if "EPOCHS" in asked else None)
    else:
        raise UsageError(f"{args.target!r} is neither a workload ({', '.join(workloads())}) "
                         "nor a run folder; pass one of them.")
    work.nothing_left(found)
    return found, data


def make(args) -> dict:
    """The plan as plan.json holds it (see `to_json`)."""
    from lib.cli.plan import quotas, solve, speeds

    found, data = gather(args)
    horizon, start = parse_horizon(args.horizon), parse_start(args.start)
    names = sorted(data["platforms"])
    if args.platforms:
        names = [quotas.check_platform(n.strip(), data) for n in args.platforms.split(",")]
    notes = []
    if not args.no_kaggle_client and any(data["platforms"][n]["pool"].startswith("kaggle")
                                         for n in names):
        notes = quotas.kaggle_left(data, start)
    under = Path(args.measured).expanduser() if args.measured else (found.folder or Path("runs"))
    speed, elsewhere = speeds.speeds(found.target(), {n: data["platforms"][n] for n in names},
                                     under)
    usable = [n for n in names if speed[n].seconds]
    if not usable:
        raise Unmeasured(found, speed, elsewhere, speeds.unused_figures(
            found.target(), {n: data["platforms"][n] for n in names}))
    platforms, pools = quotas.build(data, usable, start)
    runs = [solve.Run(name, epochs, {n: speed[n].seconds for n in usable})
            for name, epochs in sorted(found.runs.items()) if epochs]
    longest = max(platforms, key=lambda p: p.cap)
    if all(speed[p.name].seconds / 3600 > p.cap for p in platforms):
        raise UsageError(
            f"an epoch takes longer than any session on {', '.join(usable)} (the shortest "
            f"epoch {min(speed[n].seconds for n in usable) / 3600:.2f} h; the longest session "
            f"{longest.cap:.2f} h, on {longest.name}, less the notebooks' margin): training "
            "resumes mid-epoch from its checkpoints (CHECKPOINT_MINUTES), but the planner "
            "plans whole epochs in a session; plan on a platform with longer sessions "
            "(--quotas FILE).")
    try:
        chosen = solve.choose(runs, platforms, pools, horizon)
    except solve.Infeasible as exc:
        raise UsageError(f"the plan cannot finish within --horizon {args.horizon}: {exc} on "
                         f"{', '.join(usable)} with their quotas; give a longer --horizon, more "
                         "hours (--quota NAME=HOURS) or another platform (--quotas FILE).")\
            from None
    notes += quotas.unused_quotas(args.quota, data, usable)
    paid = [n for n in chosen["plan"].used if data["platforms"][n].get("paid")]
    if paid and any(not data["platforms"][n].get("paid") for n in usable):
        notes.append(f"NOTE: the free platforms cannot finish within --horizon {args.horizon}: "
                     f"this plan uses {', '.join(paid)}, which bill by the hour (elsewhere "
                     "paid platforms are only the faster alternative).")
    return to_json(chosen, found, data, speed, pools, start, horizon, notes, elsewhere)


class Unmeasured(UsageError):
    """No planned platform has a speed: what is known of each (`lines`, printed before the
    one-line error) and the one command that measures the rest (the error)."""

    def __init__(self, found, speed: dict, elsewhere: list[dict], figures: list[str]):
        self.lines = [f"no speed yet for {found.origin} on any of {', '.join(sorted(speed))}:",
                      *speed_lines({n: vars(s) | {"seconds_per_epoch": s.seconds}
                                    for n, s in speed.items()}, elsewhere), *figures]
        first = speed["local"] if "local" in speed else next(iter(speed.values()))
        super().__init__(f"no platform has a speed for {found.origin}; measure it here first "
                         f"(a few real-size steps, minutes): {first.source}")


def _sessions(plan, found, data, start: datetime) -> list[dict]:
    return [{"run": s.run, "cell": found.cells.get(s.run, ""), "platform": s.platform,
             "backend": data["platforms"][s.platform].get("backend"),
             "start": (start + timedelta(hours=s.start)).isoformat(),
             "end": (start + timedelta(hours=s.end)).isoformat(),
             "start_hours": round(s.start, 4), "end_hours": round(s.end, 4),
             "epochs": s.epochs} for s in plan.sessions]


def _summary(plan, start: datetime) -> dict:
    return {"finish": (start + timedelta(hours=plan.finish)).isoformat(),
            "finish_hours": round(plan.finish, 4), "hours": round(plan.hours(), 4),
            "platforms": list(plan.used), "sessions": len(plan.sessions),
            # "milp": laid out from solve.py's MILP (milp.py); "list": the list schedule.
            # bound_hours: no plan on these platforms finishes sooner (None: not proven).
            "search": plan.search,
            "bound_hours": None if plan.bound is None else round(plan.bound, 4)}


def to_json(chosen, found, data, speed, pools, start, horizon, notes,
            elsewhere=()) -> dict:
    from lib.cli.plan import quotas

    plan = chosen["plan"]
    resets = []
    for pool in pools.values():
        if pool.period is None:
            continue
        i = 0  # period 0 ends at the first reset
        while pool.period_end(i) <= min(plan.finish, horizon):
            resets.append({"pool": pool.name, "at": (start + timedelta(
                hours=pool.period_end(i))).isoformat(), "platforms": sorted(
                    n for n, t in data["platforms"].items() if t["pool"] == pool.name)})
            i += 1
    out = {"version": 1, "origin": found.origin, "workload": found.workload,
           "request": found.request, "folder": str(found.folder) if found.folder else None,
           "settings": found.settings, "samples_per_epoch": found.samples,
           "start": start.isoformat(), "horizon_hours": horizon,
           "epochs": sum(found.runs.values()), "runs": found.runs,
           **_summary(plan, start), "sessions": _sessions(plan, found, data, start),
           "resets": resets,
           "speeds": {n: {"seconds_per_epoch": s.seconds, "kind": s.kind, "source": s.source}
                      for n, s in speed.items()},
           "measured_elsewhere": list(elsewhere),
           "limits": {n: quotas.described(data, n) for n in plan.used},
           "alternatives": {}, "notes": notes}
    for kind in ("faster", "cheaper"):
        alt = chosen.get(kind)
        if alt is not None:
            out["alternatives"][kind] = {**_summary(alt, start),
                                         "sessions": _sessions(alt, found, data, start)}
    return out


def hours(h: float) -> str:
    """Hours as the table shows them: two decimals, or three figures below 0.1 h (a short
    plan's session is never "0.00")."""
    return f"{h:.2f}" if h >= 0.1 or h == 0 else f"{h:.3g}"


def when(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime("%a %d %b %H:%M")


def speed_lines(found: dict, elsewhere: list[dict]) -> list[str]:
    """Each platform's seconds per epoch and where the figure came from (or the command that
    measures it), then each device measured that is none of the platforms'."""
    lines = ["speeds (seconds per epoch):"]
    for name, s in sorted(found.items()):
        shown = f"{s['seconds_per_epoch']:.1f} s" if s["seconds_per_epoch"] else "unmeasured"
        said = s["source"] if s["kind"] != "unmeasured" else f"measure it: {s['source']}"
        lines.append(f"  {name}: {shown} ({said})")
    for e in elsewhere:
        lines.append(f"  not counted for any platform planned: {e['device']}: "
                     f"{e['seconds_per_epoch']:.1f} s ({e['source']})")
    return lines


def table(plan: dict) -> str:
    """The plan as text: its sessions in one table, then the speeds, limits and options."""
    lines = [f"plan for {plan['origin']}: {plan['epochs']} epochs of {len(plan['runs'])} "
             f"run(s), from {when(plan['start'])} UTC",
             "| # | run | platform | epochs | start (UTC) | end (UTC) | hours |",
             "|---|---|---|---|---|---|---|"]
    for i, s in enumerate(plan["sessions"], 1):
        lines.append(f"| {i} | {s['run']} | {s['platform']} | {s['epochs']} | "
                     f"{when(s['start'])} | {when(s['end'])} | "
                     f"{hours(s['end_hours'] - s['start_hours'])} |")
    lines.append(f"| total | | {', '.join(plan['platforms'])} | {plan['epochs']} | | "
                 f"finishes {when(plan['finish'])} | {hours(plan['hours'])} |")
    if plan.get("bound_hours") is not None:
        lines.append(f"planned by: {plan['search']} (the MILP proves it finishes within "
                     f"{plan['finish_hours'] - plan['bound_hours']:.2f} h of the best possible)")
    lines += speed_lines(plan["speeds"], plan.get("measured_elsewhere", []))
    lines.append("limits:")
    for name, q in sorted(plan["limits"].items()):
        quota = (f"{q['hours']:g} h a {q['period']}" if q["hours"] is not None else "no quota")
        left = f", {q['left']:.1f} h left" if q.get("left") is not None else ""
        cap = f"{q['session_hours']:g} h sessions" if q["session_hours"] else "no session limit"
        assumed = f"; assumed: {q['assumption']}" if q.get("assumption") else ""
        lines.append(f"  {name}: {cap}, {quota}{left} ({q['source']}, {q['date']}{assumed})")
    for kind, alt in plan["alternatives"].items():
        lines.append(f"{kind}: on {', '.join(alt['platforms'])}, finishes {when(alt['finish'])}"
                     f" UTC, {hours(alt['hours'])} h in {alt['sessions']} sessions")
    lines += plan["notes"]
    return "\n".join(lines)


def write(plan: dict, folder: Path) -> tuple[Path, Path]:
    """plan.json and plan.png in `folder` (created); their paths."""
    from lib.cli.plan.picture import timeline

    folder.mkdir(parents=True, exist_ok=True)
    atomic.write_text(folder / "plan.json", json.dumps(plan, indent=1, default=str) + "\n")
    import matplotlib.pyplot as plt

    fig = timeline(plan, folder / "plan.png")
    plt.close(fig)
    return folder / "plan.json", folder / "plan.png"


def cmd_plan(args) -> int:
    try:
        plan = make(args)
    except Unmeasured as exc:
        print("\n".join(exc.lines))
        raise
    target = Path(args.target).expanduser()
    folder = Path(args.out).expanduser() if args.out else (
        target if target.is_dir() and args.target not in workloads() else
        Path("runs") / args.target)
    json_path, png = write(plan, folder.resolve())
    if args.json:
        print(json.dumps(plan, indent=1, default=str))
        return 0
    print(table(plan))
    print(f"written:\n  {json_path}\n  {png}")
    return 0


def add_plan_parser(sub, param_help: str) -> None:
    p = sub.add_parser(
        "plan", help="where, in how many sessions and by when the work left finishes",
        description="Plan the epochs left (a run folder, or a workload with -p and --grid) over "
                    "the platforms' session limits and quotas, from measured speeds; print the "
                    "sessions in one table and write plan.json and plan.png beside the run.")
    p.add_argument("target", metavar="RUN_FOLDER|WORKLOAD")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help=param_help)
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2",
                   help="a grid axis (repeatable), as `sweep` takes it")
    p.add_argument("--quota", action="append", metavar="PLATFORM=HOURS[/PERIOD]",
                   help="a quota you know (repeatable), e.g. kaggle_t4x2=18h, colab_t4=3h/day, "
                        "local=none")
    p.add_argument("--quotas", metavar="FILE",
                   help="a TOML file of your own machines, cluster or limits (the shape of "
                        "lib/cli/plan/quotas.toml)")
    p.add_argument("--platforms", metavar="A,B", help="plan only on these platforms")
    p.add_argument("--horizon", default="14d", help="finish within this long (default 14d)")
    p.add_argument("--start", metavar="ISO", help="when the plan starts (default: now, UTC)")
    p.add_argument("--measured", metavar="DIR",
                   help="where your runs' sessions.jsonl are read for speeds (default: the "
                        "run folder, or runs/)")
    p.add_argument("--out", metavar="DIR", help="where plan.json and plan.png go (default: "
                                                "the run folder, or runs/WORKLOAD)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--no-kaggle-client", action="store_true",
                   help="do not ask the kaggle client for the hours left")
    p.set_defaults(fn=cmd_plan)
