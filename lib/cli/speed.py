"""`train-anywhere report`'s table of where a run trained and how fast, read without torch.

Each session's row of sessions.jsonl (lib.runs.folder) ends with how fast it trained: its
epochs, seconds per epoch (torch.compile's once-off time left out) and samples per second.
Per platform, the table gives what the user's own sessions measured there and, from it, what
the epochs still to train (EPOCHS of the newest session, less the epochs metrics.jsonl holds)
would take on each: a measured answer to "where do I continue this run?".
"""

from __future__ import annotations

from pathlib import Path

from lib.base.progress import rate
from lib.cli.execute import fmt_duration
from lib.runs.identity import timed_sessions
from lib.runs.records import read_jsonl


def epochs_left(runs: list[tuple[Path, list[dict]]]) -> int:
    """The epochs the runs still have to train: EPOCHS of each run's newest session, less
    the epochs its metrics.jsonl holds."""
    left = 0
    for folder, rows in runs:
        target = rows[-1].get("epochs") or 0
        left += max(0, target - len(read_jsonl(folder / "metrics.jsonl")))
    return left


def where(row: dict) -> str:
    """The platform a session was run as, and the device it really ran on where that is not
    the platform's accelerator ("colab_t4 on this CPU (AMD EPYC ...)"): a speed belongs to the
    device that ran (lib/cli/plan/speeds.py). A row from before devices were recorded: its
    platform."""
    from lib.cli.plan.quotas import load
    from lib.cli.plan.speeds import device_label, runs_on

    platform = row.get("platform", "?")
    table = load()["platforms"].get(platform)
    if not row.get("device") or table is None or runs_on(table.get("accelerator"), platform,
                                                         row):
        return platform
    return f"{platform} on {device_label(row)}"


def per_platform(runs: list[tuple[Path, list[dict]]]) -> dict[str, dict]:
    """platform (and the device, where not its accelerator: `where`) -> sessions, epochs
    timed, seconds per epoch and samples/s (each weighted by the epochs a session trained)."""
    out: dict[str, dict] = {}
    for _, rows in runs:
        for row in rows:
            epochs = row.get("epochs_trained") or 0
            if not epochs or row.get("seconds_per_epoch") is None:
                continue  # a session from before these fields, or one that ended in epoch 1
            p = out.setdefault(where(row), {"sessions": 0, "epochs": 0,
                                                           "seconds": 0.0, "samples": 0.0})
            p["sessions"] += 1
            p["epochs"] += epochs
            p["seconds"] += row["seconds_per_epoch"] * epochs
            p["samples"] += (row.get("samples_per_s") or 0.0) * epochs
    for p in out.values():
        p["per_epoch"] = p["seconds"] / p["epochs"]
        p["samples_per_s"] = p["samples"] / p["epochs"]
    return out


def table(out: Path) -> str:
    """The Markdown table for `out` (a run, a grid or a sweep); "" when no session was timed."""
    runs = timed_sessions(out)
    measured = per_platform(runs)
    if not measured:
        return ""
    left = epochs_left(runs)
    head = f"the {left} epochs left would take" if left else "epochs left"
    lines = ["measured per platform (your sessions, sessions.jsonl):",
             f"| platform | sessions | epochs timed | s / epoch | samples / s | {head} |",
             "|---|---|---|---|---|---|"]
    for name, p in sorted(measured.items(), key=lambda kv: kv[1]["per_epoch"]):
        eta = fmt_duration(left * p["per_epoch"]) if left else "none: finished"
        lines.append(f"| {name} | {p['sessions']} | {p['epochs']} | {p['per_epoch']:.1f} | "
                     f"{rate(p['samples_per_s'])} | {eta} |")
    return "\n".join(lines)
