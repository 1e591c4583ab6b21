"""The plan's picture: a timeline of sessions per platform over days, each quota's resets
marked; a plain matplotlib figure in lib/plots.py's style (its `save`: a PNG whose Title field
says what it shows), made without torch."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path


def timeline(plan: dict, path: Path | None = None):
    """Draw plan.json's `sessions` (one row per platform and concurrent session, a bar per
    session labelled with its run's epochs) and `resets` (dotted lines); the figure."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from lib.plots import save

    sessions = plan["sessions"]
    start = datetime.fromisoformat(plan["start"])
    rows: list[tuple[str, int]] = []  # (platform, lane)
    lane_free: dict[tuple[str, int], float] = {}
    placed = []
    for s in sorted(sessions, key=lambda s: (s["platform"], s["start_hours"])):
        lane = 0
        while lane_free.get((s["platform"], lane), -1.0) > s["start_hours"] + 1e-9:
            lane += 1
        lane_free[(s["platform"], lane)] = s["end_hours"]
        if (s["platform"], lane) not in rows:
            rows.append((s["platform"], lane))
        placed.append((s, (s["platform"], lane)))
    rows.sort()
    runs = sorted({s["run"] for s in sessions})
    colours = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.55 * max(2, len(rows))))
    for s, row in placed:
        y = rows.index(row)
        left = mdates.date2num(start + timedelta(hours=s["start_hours"]))
        width = (s["end_hours"] - s["start_hours"]) / 24
        ax.barh(y, width, left=left, height=0.7, color=colours(runs.index(s["run"]) % 20),
                edgecolor="black", linewidth=0.5)
        if len(runs) <= 12:
            ax.text(left + width / 2, y, f"{s['epochs']}", ha="center", va="center",
                    fontsize=7)
    end = start + timedelta(hours=max(plan["finish_hours"], 1.0))
    for reset in plan.get("resets", []):
        when = datetime.fromisoformat(reset["at"])
        if when > end:
            continue
        for y, (platform, _) in enumerate(rows):
            if platform in reset["platforms"]:
                ax.plot([when, when], [y - 0.45, y + 0.45], ls=":", color="firebrick", lw=1.2)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], ls=":", color="firebrick", label="quota resets")]
    handles += [Patch(facecolor=colours(i % 20), edgecolor="black", linewidth=0.5, label=run)
                for i, run in enumerate(runs if len(runs) <= 8 else [])]  # colour -> run
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([p if lane == 0 else f"{p} ({lane + 1})" for p, lane in rows])
    ax.invert_yaxis()
    hours = (end - start).total_seconds() / 3600
    ax.xaxis.set_major_locator(  # about ten ticks: hours within two days, else days
        mdates.HourLocator(interval=max(1, -(-int(hours) // 10))) if hours <= 48 else
        mdates.DayLocator(interval=max(1, -(-int(hours / 24) // 10))))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%a %d %b\n%H:%M"))
    ax.set_xlim(start, end)
    ax.set_xlabel("UTC; each bar a session, labelled with the epochs it trains")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    n = len(sessions)
    finish = plan["finish"][:16].replace("T", " ")
    ax.set_title(f"Plan: {plan['origin']}\n{plan['epochs']} epochs in {n} "
                 f"session{'' if n == 1 else 's'}, finishes {finish} UTC", fontsize=10)
    fig.tight_layout()
    save(fig, path)
    return fig


def caption(plan: dict, platform: str) -> str:
    """The plan in one sentence, as the plan guide says it under its picture (docs/build.py
    writes it there from the plan.json it draws)."""
    from datetime import datetime

    speed = plan["speeds"][platform]
    finish = datetime.fromisoformat(plan["finish"]).strftime("%a %d %b %H:%M")
    return (f"At {speed['seconds_per_epoch']:,.0f} s an epoch (the project's H100 figure), the "
            f"{plan['epochs']} epochs are {plan['hours']:.1f} h of work, in "
            f"{len(plan['sessions'])} sessions finishing {finish} UTC "
            f"({plan['finish_hours']:.1f} h after the start; the solver's bound: no plan "
            f"finishes before {plan['bound_hours']:.1f} h).")
