"""Plans checked by an oracle that shares no code with the planner (issue 59): the quota
periods are computed here from the raw figures (a start, a reset's weekday and hour, the hours
a period and the hours left) with datetime arithmetic, not with solve.py's `Pool.quota`,
`period_of` or `period_end`, nor quotas.py's `next_reset`; the expected finishes and bounds
are worked out by hand in each test's comment. A mistake in the planner's own periods is then
visible (the rule checker of tests/test_plan.py shares them, so it cannot see one)."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from lib.cli.main import main
from lib.cli.plan import quotas
from lib.cli.plan.solve import Platform, Pool, Run, plans

START = datetime(2026, 12, 1, 9, tzinfo=UTC)  # a Tuesday


def resets_after(start: datetime, weekday: int | None, hour: int, until_days: int = 60):
    """Every reset after `start` for the next `until_days`: daily at `hour` (weekday None) or
    weekly on `weekday` (Monday 0) at `hour`, UTC. Walks the days one by one."""
    day = start.replace(hour=hour, minute=0, second=0, microsecond=0)
    out = []
    for _ in range(until_days + 1):
        if day > start and (weekday is None or day.weekday() == weekday):
            out.append(day)
        day += timedelta(days=1)
    return out


def oracle(sessions, start, resets, hours, first_left=None, cap=None, concurrent=1):
    """The rules broken by `sessions` ((start, end) datetimes) of one pool: a session across a
    reset, over its cap, more hours in a period than its quota (the first: `first_left`), more
    than `concurrent` at once."""
    out = []
    edges = [start, *resets]
    used = Counter()
    for a, b in sessions:
        period = sum(1 for r in resets if r <= a)
        if any(a < r < b for r in resets):
            out.append(f"{a:%a %d %H:%M}-{b:%a %d %H:%M} crosses a reset")
        if cap is not None and (b - a).total_seconds() / 3600 > cap + 1e-6:
            out.append(f"{a:%a %d %H:%M}: {(b - a)} over the {cap} h cap")
        used[period] += (b - a).total_seconds() / 3600
        if sum(1 for c, d in sessions if c <= a < d) > concurrent:
            out.append(f"{a:%a %d %H:%M}: more than {concurrent} at once")
    for period, h in sorted(used.items()):
        quota = first_left if period == 0 and first_left is not None else hours
        if h > quota + 1e-6:
            out.append(f"period from {edges[period]:%a %d %b %H:%M}: {h:.2f} h over {quota} h")
    return out


def absolute(plan, name=None):
    return [(START + timedelta(hours=s.start), START + timedelta(hours=s.end))
            for s in plan.sessions if name is None or s.platform == name]


def test_kaggles_hours_left_are_all_the_first_week_gets():
    """2 h left of 30 until Saturday 5 Dec 00:00 (87 h after the start): 2 one-hour epochs
    then, and the other 10 in one session from that Saturday: finished 97 h from the start."""
    data = quotas.load()
    quotas.kaggle_left(data, START, ask=lambda: SimpleNamespace(
        quota_refresh_time=datetime(2026, 12, 5), tpu_quota=None, gpu_quota=SimpleNamespace(
            time_used=timedelta(hours=28), total_time_allowed=timedelta(hours=30))))
    platforms, pools = quotas.build(data, ["kaggle_t4x2"], START)
    best = plans([Run("r", 12, {"kaggle_t4x2": 3600.0})], platforms, pools, 24 * 14)[0]
    saturdays = resets_after(START, 5, 0)
    assert saturdays[0] == datetime(2026, 12, 5, tzinfo=UTC)
    assert oracle(absolute(best), START, saturdays, 30.0, first_left=2.0, cap=11.75,
                  concurrent=2) == []
    assert best.finish == pytest.approx(97.0)


def test_a_weekly_reset_falls_on_its_weekday():
    """3 h a week from Wednesday 00:00 UTC, 7 one-hour epochs: 3 from Tuesday 09:00 (the 15 h
    before Wednesday 2 Dec), 3 from that Wednesday 00:00, 1 from Wednesday 9 Dec 00:00: the
    finish is the 9th at 01:00."""
    data = quotas.load()
    data["platforms"]["lab"] = {"pool": "lab", "accelerator": "H100", "source": "t", "date": "t"}
    data["pools"]["lab"] = {"hours": 3.0, "period": "week", "reset": "wed 00:00",
                            "concurrent": 1, "source": "t", "date": "t"}
    platforms, pools = quotas.build(data, ["lab"], START)
    best = plans([Run("r", 7, {"lab": 3600.0})], platforms, pools, 24 * 28)[0]
    wednesdays = resets_after(START, 2, 0)
    assert wednesdays[0] == datetime(2026, 12, 2, tzinfo=UTC)
    assert oracle(absolute(best), START, wednesdays, 3.0) == []
    assert START + timedelta(hours=best.finish) == datetime(2026, 12, 9, 1, tzinfo=UTC)


def test_a_daily_quota_given_without_a_period_stays_daily():
    """--quota colab_t4=3h on Colab's daily pool: 3 h each UTC day, used day after day (9
    one-hour epochs: 3 on each of 3 days)."""
    data = quotas.override(quotas.load(), ["colab_t4=3h"])
    platforms, pools = quotas.build(data, ["colab_t4"], START)
    best = plans([Run("r", 9, {"colab_t4": 3600.0})], platforms, pools, 24 * 14)[0]
    assert oracle(absolute(best), START, resets_after(START, None, 0), 3.0) == []
    days = Counter(a.date() for a, _ in absolute(best))
    assert len(days) == 3  # a week's 3 h would take three weeks
    assert START + timedelta(hours=best.finish) == datetime(2026, 12, 3, 3, tzinfo=UTC)


def test_a_machine_measured_like_another_platform_takes_its_speed(tmp_path):
    """[platforms.lab] like = "local": the sessions recorded as local (30 min an epoch) are
    lab's speed; 6 epochs in 2 h jobs (less the 12 min margin: 3 epochs each)."""
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"experiment": {"workload": "fashion_mnist"}}))
    row = {"platform": "local", "device": "cuda", "accelerator": "RTX 4090", "devices": 1,
           "epochs_trained": 2, "seconds_per_epoch": 1800.0, "samples_per_s": 33.3}
    (run / "sessions.jsonl").write_text(json.dumps(row) + "\n")
    mine = tmp_path / "mine.toml"
    mine.write_text('[platforms.lab]\nlike = "local"\naccelerator = "my box"\n'
                    'session_hours = 2.0\n')
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", "fashion_mnist", "-p", "EPOCHS", "6", "--quotas", str(mine),
                   "--platforms", "lab", "--measured", str(tmp_path / "runs"), "--json",
                   "--no-kaggle-client", "--start", START.isoformat(), "--out",
                   str(tmp_path / "p")])
    assert rc == 0, err.getvalue()
    plan = json.loads(out.getvalue())
    assert [(s["epochs"], datetime.fromisoformat(s["end"]) - datetime.fromisoformat(s["start"]))
            for s in plan["sessions"]] == [(3, timedelta(hours=1.5))] * 2


def test_sweep_plan_runs_a_cell_where_most_of_its_epochs_are_ties_by_name():
    from lib.cli.plan.follow import assignments

    sessions = [("a", "kaggle_t4x2", 3), ("a", "colab_t4", 2), ("a", "colab_t4", 2),
                ("b", "local", 2), ("b", "colab_t4", 2), ("c", "local", 1)]
    plan = {"sessions": [{"cell": c, "platform": p, "epochs": e} for c, p, e in sessions]}
    # by hand: a: colab 4 > kaggle 3; b: a tie of 2, colab_t4 before local; c: local
    assert assignments(plan) == {"a": "colab_t4", "b": "colab_t4", "c": "local"}


def test_the_milps_bound_is_the_best_finish_where_that_is_known():
    """14 one-hour epochs, 4 h a day from a reset 24 h after the start (4 h left before it),
    one session at once: 4 a day, the last 2 on the fourth day: 72 + 2 = 74 h, and no plan
    finishes sooner, so the proven bound is 74 h too."""
    pools = {"p": Pool("p", 4.0, "day", 24.0, 4.0)}
    best = plans([Run("r", 14, {"p": 3600.0})], [Platform("p", "p", 12.0)], pools, 24 * 7)[0]
    assert best.finish == pytest.approx(74.0)
    assert best.bound == pytest.approx(74.0, abs=1e-3)
