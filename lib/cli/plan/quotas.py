"""Quotas as data (quotas.toml beside this module, each figure with its source and date), the
user's overrides (`--quotas FILE`, `--quota NAME=HOURS[/PERIOD]`) and Kaggle's hours left as
its installed client reports them (`KaggleApi.quota_view`, kaggle-cli PR #1029) -> the
planner's `Pool`s and `Platform`s for a plan starting at a given time.
"""

from __future__ import annotations

import calendar
import copy
import re
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lib.cli.params import UsageError, closest
from lib.cli.plan.solve import PERIOD_HOURS, Platform, Pool
from lib.runtime.clock import Clock

DATA = Path(__file__).with_name("quotas.toml")
PERIODS = ("day", "week", "month")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
QUOTA = re.compile(r"^(?P<hours>\d+(?:\.\d+)?)\s*h?(?:\s*/\s*(?P<period>day|week|month))?$")


def load(user_file: Path | None = None) -> dict:
    """{"pools": {...}, "platforms": {...}}: the shipped data, with `user_file` merged over it
    (a table of the same name updated field by field; a new one added)."""
    data = tomllib.loads(DATA.read_text())
    if user_file is None:
        return data
    path = Path(user_file).expanduser()
    try:
        mine = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--quotas {user_file}: no such file; give a TOML file with "
                         "[platforms.NAME] and [pools.NAME] tables (docs: Plan your hours).")\
            from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--quotas {user_file} is not valid TOML ({exc}); fix that line.")\
            from None
    merged = copy.deepcopy(data)
    for kind in ("pools", "platforms"):
        for name, table in (mine.get(kind) or {}).items():
            merged[kind].setdefault(name, {}).update(table, source=table.get(
                "source", f"your file {path.name}"), date=table.get("date", "yours"))
    for name, table in (mine.get("platforms") or {}).items():
        pool = table.get("pool")
        if pool is not None and pool not in merged["pools"]:
            raise UsageError(f"--quotas {user_file}: platform {name} names pool {pool!r}"
                             f"{closest(pool, merged['pools'])}, which no [pools.NAME] "
                             "defines; name one that does, or add its [pools] table.")
    for name, table in merged["platforms"].items():
        table.setdefault("pool", name)
        merged["pools"].setdefault(table["pool"], {"concurrent": 1, "source":
                                                   table.get("source", ""), "date": "yours"})
    return merged


def parse_quota(item: str, data: dict) -> tuple[str, float | None, str | None]:
    """`--quota NAME=18h`, `NAME=4h/day` or `NAME=none` -> (platform, hours, period)."""
    name, sep, value = item.partition("=")
    if not sep or not name or not value:
        raise UsageError(f"--quota {item!r} is not NAME=HOURS; e.g. --quota kaggle_t4x2=18h "
                         "or --quota colab_t4=3h/day.")
    check_platform(name, data)
    if value.strip().lower() in ("none", "unlimited"):
        return name, None, None
    m = QUOTA.match(value.strip().lower())
    if not m:
        raise UsageError(f"--quota {item!r}: {value!r} is not a number of hours; expected e.g. "
                         f"{name}=18h or {name}=4h/day (a period: {', '.join(PERIODS)}).")
    return name, float(m["hours"]), m["period"]


def check_platform(name: str, data: dict) -> str:
    if name not in data["platforms"]:
        known = sorted(data["platforms"])
        raise UsageError(f"unknown platform {name!r}{closest(name, known)}; expected one of "
                         f"{', '.join(known)}, or add it with --quotas FILE.")
    return name


def override(data: dict, items: list[str] | None) -> dict:
    """`data` with each --quota applied to the pool of the platform it names."""
    data = copy.deepcopy(data)
    for item in items or []:
        name, hours, period = parse_quota(item, data)
        pool = data["pools"][data["platforms"][name]["pool"]]
        had = pool.get("period")
        pool.pop("left", None)
        if hours is None:
            pool.pop("hours", None)
            pool.pop("period", None)
        else:
            pool["hours"] = hours
            pool["period"] = period or pool.get("period") or "week"
        assumed = "" if period or had or hours is None else " (a week: no period given)"
        pool["source"], pool["date"] = f"--quota {item}{assumed}", "given"
        pool.pop("assumption", None)
    return data


def unused_quotas(items: list[str] | None, data: dict, usable: list[str]) -> list[str]:
    """One note per --quota whose platform the plan cannot use (no speed measured there)."""
    out = []
    for item in items or []:
        name = item.partition("=")[0]
        if name not in usable:
            out.append(f"NOTE: --quota {item} changes nothing: {name} has no speed for this "
                       "work (see its line under speeds), so the plan leaves it out.")
    return out


def next_reset(spec: str | None, period: str, now: datetime) -> datetime:
    """The first reset after `now` (aware; computed in UTC) of a period starting at `spec`,
    UTC: "sat 00:00" (week), "00:00" (day), "1 00:00" (month; a day past a month's end is
    its last day: "31 00:00" is 30 November's midnight). A spec that does not fit its period
    is one line (UsageError)."""
    now = now.astimezone(UTC)
    words = (spec or "").strip().lower().split()
    clock = words[-1] if words else "00:00"
    day = words[0] if len(words) == 2 else None
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", clock)
    if not m or int(m[1]) > 23 or int(m[2]) > 59 or len(words) > 2 or (
            period == "day" and day) or (period == "week" and day and day[:3] not in WEEKDAYS)\
            or (period == "month" and day and not (day.isdigit() and 1 <= int(day) <= 31)):
        expected = {"day": '"HH:MM"', "week": '"sat 00:00" (a weekday, HH:MM)',
                    "month": '"1 00:00" (a day of the month 1-31, HH:MM)'}[period]
        raise UsageError(f"reset {spec!r} does not fit a {period}ly quota; expected "
                         f"{expected}, UTC.")
    at = now.replace(hour=int(m[1]), minute=int(m[2]), second=0, microsecond=0)
    if period == "day":
        return at if at > now else at + timedelta(days=1)
    if period == "week":
        weekday = WEEKDAYS.index(day[:3]) if day else 5
        at += timedelta(days=(weekday - now.weekday()) % 7)
        return at if at > now else at + timedelta(days=7)
    wanted = int(day) if day else 1

    def in_month(year: int, month: int) -> datetime:
        return at.replace(year=year, month=month,
                          day=min(wanted, calendar.monthrange(year, month)[1]))

    here = in_month(now.year, now.month)
    if here > now:
        return here
    return in_month(now.year + now.month // 12, now.month % 12 + 1)


def kaggle_left(data: dict, now: datetime, ask=None) -> list[str]:
    """Set the Kaggle pools' hours left and next reset from the installed client
    (`ask()` -> its quota_view response; default: the authenticated client); one note per
    pool it could or could not tell. Without credentials: the published weekly quota."""
    pools = {"GPU": "kaggle_gpu", "TPU": "kaggle_tpu"}
    if all(data["pools"].get(p, {}).get("source", "--quota").startswith("--quota")
           for p in pools.values()):
        return []  # no Kaggle pool, or each one given by --quota: nothing to ask
    try:
        if ask is None:
            from lib.cli.kaggle_api import client

            ask = client().quota_view
        response = ask()
    except Exception as exc:  # no client, no credentials, no network: the published figure
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [f"Kaggle's hours left: the published weekly quota (the kaggle client could "
                f"not tell: {line})"]
    notes = []
    for label, pool_name in pools.items():
        quota, pool = getattr(response, f"{label.lower()}_quota", None), data["pools"].get(
            pool_name)
        if quota is None or pool is None or pool.get("source", "").startswith("--quota"):
            continue
        total = quota.total_time_allowed.total_seconds() / 3600
        used = quota.time_used.total_seconds() / 3600
        pool.update(hours=total, left=max(0.0, total - used), source="the kaggle client's "
                    "quota (kaggle quota)", date=now.strftime("%Y-%m-%d %H:%M UTC"))
        refresh = getattr(response, "quota_refresh_time", None)
        if refresh is not None:  # kagglesdk gives it without a zone: it is UTC (not local)
            refresh = refresh if refresh.tzinfo else refresh.replace(tzinfo=UTC)
            pool["reset_at"] = refresh.astimezone(UTC).isoformat()
        pool.pop("assumption", None)
        notes.append(f"Kaggle {label}: {pool['left']:.1f} of {total:g} h left this week "
                     "(the kaggle client)")
    return notes


def build(data: dict, names: list[str], now: datetime) -> tuple[list[Platform], dict]:
    """The planner's platforms (`names`) and their pools, for a plan starting `now`."""
    platforms, pools = [], {}
    for name in names:
        table = data["platforms"][name]
        limit = table.get("session_hours")
        margin = Clock(0.0, limit).margin_s / 3600 if limit else 0.0
        platforms.append(Platform(name, table["pool"], limit, margin, bool(table.get("paid"))))
        spec = data["pools"][table["pool"]]
        period = spec.get("period") if spec.get("hours") is not None else None
        first, left = 0.0, spec.get("left")
        if period:
            reset = (datetime.fromisoformat(spec["reset_at"]) if spec.get("reset_at")
                     else next_reset(spec.get("reset"), period, now))
            if reset <= now:  # the client's refresh is before the plan starts: a new
                left = None   # period began since, with all its hours; the next reset
                while reset <= now:  # is a whole period after it (what the plan says too)
                    reset += timedelta(hours=PERIOD_HOURS[period])
                spec.pop("left", None)
                spec["reset_at"] = reset.isoformat()
            first = (reset - now).total_seconds() / 3600
        pools[table["pool"]] = Pool(table["pool"], spec.get("hours"), period, first,
                                    left, int(spec.get("concurrent", 1)))
    return platforms, pools


def described(data: dict, name: str) -> dict:
    """What the plan says of a platform's limits: figures, source, date, assumption."""
    table = data["platforms"][name]
    pool = data["pools"][table["pool"]]
    return {"platform": name, "pool": table["pool"], "session_hours": table.get("session_hours"),
            "accelerator": table.get("accelerator"), "backend": table.get("backend"),
            "hours": pool.get("hours"), "period": pool.get("period"),
            "left": pool.get("left"), "reset": pool.get("reset_at") or pool.get("reset"),
            "concurrent": pool.get("concurrent", 1),
            "source": f"{table.get('source', '')}; quota: {pool.get('source', '')}",
            "date": pool.get("date") or table.get("date"),
            "assumption": pool.get("assumption")}
