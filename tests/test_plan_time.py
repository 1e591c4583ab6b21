"""`train-anywhere plan` keeps time in UTC whatever the machine's zone (issue 59, finding 5):
each check runs with TZ set to UTC, UTC-8 (Los Angeles, in December) and UTC+5:30 (Kolkata),
through `time.tzset`, so a time read or computed in local time shows in two of the three.
The expected instants are written out here by hand, not computed by the planner's code."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from lib.cli.main import main
from lib.cli.params import UsageError
from lib.cli.plan import quotas

ZONES = ("UTC", "America/Los_Angeles", "Asia/Kolkata")
# Mamba-Spike at the project's H100 figure (52 min an epoch) on a machine of yours: 1 h jobs,
# 2 h a day from 00:00 UTC.
LAB = ('[platforms.lab]\naccelerator = "H100"\nbackend = "slurm"\nsession_hours = 1.0\n'
       '[pools.lab]\nhours = 2.0\nperiod = "day"\nreset = "00:00"\n')


@pytest.fixture(params=ZONES)
def zone(request, monkeypatch):
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    assert time.localtime(0).tm_gmtoff == {"UTC": 0, "America/Los_Angeles": -8 * 3600,
                                           "Asia/Kolkata": 19800}[request.param]
    yield request.param
    monkeypatch.undo()
    time.tzset()


def cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", *args])
    return rc, out.getvalue(), err.getvalue()


def kaggle_says(refresh) -> SimpleNamespace:
    return SimpleNamespace(quota_refresh_time=refresh, tpu_quota=None, gpu_quota=SimpleNamespace(
        time_used=timedelta(hours=28), total_time_allowed=timedelta(hours=30)))


def test_kaggles_refresh_time_without_a_zone_is_utc(zone):
    start = datetime(2026, 12, 1, 9, tzinfo=UTC)
    data = quotas.load()
    quotas.kaggle_left(data, start, ask=lambda: kaggle_says(datetime(2026, 12, 5, 0, 0)))
    assert data["pools"]["kaggle_gpu"]["reset_at"] == "2026-12-05T00:00:00+00:00"
    _, pools = quotas.build(data, ["kaggle_t4x2"], start)
    assert pools["kaggle_gpu"].first_reset == 87.0  # Tue 09:00 -> Sat 00:00, by hand
    assert pools["kaggle_gpu"].left == 2.0


def test_a_refresh_before_the_start_is_a_new_week_not_a_reset_at_the_start(zone):
    start = datetime(2026, 12, 1, 9, tzinfo=UTC)
    data = quotas.load()
    refresh = datetime(2026, 11, 28, 0, 0)  # Saturday, before the plan starts
    quotas.kaggle_left(data, start, ask=lambda: kaggle_says(refresh))
    _, pools = quotas.build(data, ["kaggle_t4x2"], start)
    assert pools["kaggle_gpu"].first_reset == 87.0  # the next Saturday 00:00, 5 Dec
    assert pools["kaggle_gpu"].left is None  # the 2 h left were last week's
    assert data["pools"]["kaggle_gpu"]["reset_at"] == "2026-12-05T00:00:00+00:00"


def test_a_start_with_an_offset_is_planned_and_shown_in_utc(zone, tmp_path):
    mine = tmp_path / "mine.toml"
    mine.write_text(LAB)
    rc, out, err = cli("mamba_spike", "-p", "EPOCHS", "5", "--quotas", str(mine),
                       "--platforms", "lab", "--no-kaggle-client", "--measured",
                       str(tmp_path / "none"), "--start", "2026-12-01T20:00+05:30", "--json",
                       "--out", str(tmp_path / "p"))
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["start"] == "2026-12-01T14:30:00+00:00"
    assert [r["at"] for r in plan["resets"]][:2] == ["2026-12-02T00:00:00+00:00",
                                                      "2026-12-03T00:00:00+00:00"]
    for s in plan["sessions"]:  # each inside one UTC day: never across 00:00 UTC
        begin, end = (datetime.fromisoformat(s[k]) for k in ("start", "end"))
        assert begin.utcoffset() == end.utcoffset() == timedelta(0)
        assert end.date() == begin.date() or end.time() == datetime.min.time()
    rc, text, _ = cli("mamba_spike", "-p", "EPOCHS", "5", "--quotas", str(mine), "--platforms",
                      "lab", "--no-kaggle-client", "--measured", str(tmp_path / "none"),
                      "--start", "2026-12-01T20:00+05:30", "--out", str(tmp_path / "p"))
    assert "from Tue 01 Dec 14:30 UTC" in text


@pytest.mark.parametrize("now, expected", [
    (datetime(2026, 11, 5, 12, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)),  # 30 days
    (datetime(2026, 11, 30, 1, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC)),
    (datetime(2027, 2, 1, tzinfo=UTC), datetime(2027, 2, 28, tzinfo=UTC)),
])
def test_a_monthly_reset_on_the_31st_is_each_months_last_day(zone, now, expected):
    assert quotas.next_reset("31 00:00", "month", now) == expected


def test_a_reset_that_does_not_fit_its_period_is_one_line(zone, tmp_path):
    with pytest.raises(UsageError, match=r"reset 'sat 00:00' does not fit a monthly quota"):
        quotas.next_reset("sat 00:00", "month", datetime(2026, 12, 1, tzinfo=UTC))
    mine = tmp_path / "mine.toml"
    mine.write_text(LAB.replace('period = "day"\nreset = "00:00"',
                                'period = "month"\nreset = "sat 00:00"'))
    rc, _, err = cli("mamba_spike", "-p", "EPOCHS", "5", "--quotas", str(mine), "--platforms",
                     "lab", "--no-kaggle-client", "--out", str(tmp_path / "p"))
    assert rc == 2 and err.count("\n") == 1 and "expected \"1 00:00\"" in err, err
    assert os.environ["TZ"] == zone
