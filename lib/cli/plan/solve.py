"""The planner: a pure function from (work left, speeds, quotas) to a plan. No torch, no I/O.

Time is in hours from the plan's start. A *pool* is one quota (Kaggle's weekly GPU hours are
shared by its T4 x2 and P100 notebooks): hours per period, when the period resets, how many
sessions may run at once. A *platform* draws on one pool and has a session limit; a session
there trains whole epochs and stops the Kaggle sessions' margin before the limit
(`lib.runtime.clock.Clock.margin_s`: 15 minutes, or a tenth of a short limit).

The rules every plan keeps (tests/test_plan.py checks each on random cases):
- a session never runs past its platform's limit less the margin;
- a session never crosses a reset of its pool, so each period's hours are exact, and a
  period's sessions never use more hours than its quota (the first period: the hours left);
- at most `concurrent` sessions of a pool run at once;
- a run's sessions never overlap (it carries one checkpoint from session to session);
- everything ends within the horizon, or `Infeasible` says which run did not fit.

The search: a list schedule (each step starts the run that can start soonest, on the
platform where it would finish soonest if this session ran there and the rest at its best
speed; among runs that can start at once, the one that loses most by waiting, or the one
with most work: both orders tried) on every subset of the platforms (up to
`SUBSETS_UP_TO`; else the full set, each platform alone and each one left out), keeping the
earliest finish; the other plans found give the cheaper alternative. Then a solver
(milp.py: a MILP over epochs per run, platform and quota period, solved by HiGHS within
the list schedule's finish) proves a lower bound on the finish (`Plan.bound`) and its epochs,
laid out by the list schedule following them, replace the best plan where they finish
sooner (`Plan.search`: "milp"). tests/test_plan.py compares the result with an exhaustive
search of small cases and states the margin it stays within (bench/bench_plan.py: 296 of
297 random small cases equal, the worst 1.143x; the list schedule alone: 291 of 296, 1.33x).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field


def assign(*args, **kwargs):
    """milp.assign, imported when a plan is searched: scipy's import would cost every
    `train-anywhere report` (which imports this module) about 0.6 s (bench/bench_report.py)."""
    from lib.cli.plan.milp import assign as solved

    return solved(*args, **kwargs)

PERIOD_HOURS = {"day": 24.0, "week": 168.0, "month": 720.0}  # a month: 30 days (stated)
RULES = ("regret", "work")  # the list schedule's two orders, both tried
SUBSETS_UP_TO = 4  # every subset of up to this many platforms (15 subsets)
EPS = 1e-9


class Infeasible(ValueError):
    """The work does not fit within the horizon (the message names what is left)."""


@dataclass(frozen=True)
class Pool:
    """One quota: `hours` per `period` (None: unlimited), resetting `first_reset` hours after
    the plan's start and every period after; `left` the hours left before that reset."""

    name: str
    hours: float | None = None
    period: str | None = None  # "day" | "week" | "month" | None
    first_reset: float = 0.0
    left: float | None = None
    concurrent: int = 1

    def period_of(self, t: float) -> int:
        if self.period is None:
            return 0
        if t < self.first_reset - EPS:
            return 0
        return 1 + int(math.floor((t - self.first_reset) / PERIOD_HOURS[self.period] + EPS))

    def period_end(self, index: int) -> float:
        if self.period is None:
            return math.inf
        return self.first_reset + index * PERIOD_HOURS[self.period]

    def quota(self, index: int) -> float:
        if self.hours is None:
            return math.inf
        if index == 0 and self.left is not None:
            return min(self.left, self.hours)
        return self.hours


@dataclass(frozen=True)
class Platform:
    """Where sessions run: its pool and session limit (None: none) less the margin."""

    name: str
    pool: str
    session_hours: float | None = None
    margin_hours: float = 0.0
    paid: bool = False

    @property
    def cap(self) -> float:
        return math.inf if self.session_hours is None else self.session_hours - self.margin_hours


@dataclass(frozen=True)
class Run:
    """What one run has left: `epochs`, and seconds per epoch on each platform it may use."""

    name: str
    epochs: int
    seconds: dict = field(default_factory=dict)  # platform -> seconds per epoch


@dataclass(frozen=True)
class Session:
    run: str
    platform: str
    start: float  # hours from the plan's start
    end: float
    epochs: int


@dataclass
class Plan:
    sessions: list[Session]
    platforms: tuple[str, ...]  # the platforms it was allowed to use
    search: str = "list"  # what produced it: "list" (the list schedule) or "milp" (milp.py)
    bound: float | None = None  # the best plan's: no plan on `platforms` finishes sooner

    @property
    def finish(self) -> float:
        return max((s.end for s in self.sessions), default=0.0)

    def hours(self, platform: str | None = None) -> float:
        return sum(s.end - s.start for s in self.sessions
                   if platform is None or s.platform == platform)

    @property
    def used(self) -> tuple[str, ...]:
        return tuple(sorted({s.platform for s in self.sessions}))


def _schedule(runs: list[Run], platforms: list[Platform], pools: dict[str, Pool],
              horizon: float, rule: str = "regret", allow: dict | None = None) -> Plan | None:
    """One list schedule on `platforms`, runs that can start at the same time taken by
    `rule` ("regret": the one losing most if its best platform went to another first;
    "work": the most work first); None when a run does not fit in the horizon. With `allow`
    ({(run, platform): {pool period: epochs}}, milp.py's answer) a run trains on a platform
    by the end of a period at most the epochs allowed up to that period, and nowhere else."""
    left = {r.name: r.epochs for r in runs}
    done: dict[tuple[str, str], int] = {}
    run_free = {r.name: 0.0 for r in runs}
    lanes = {name: [0.0] * max(1, p.concurrent) for name, p in pools.items()}
    used: dict[tuple[str, int], float] = {}
    sessions: list[Session] = []
    speed = {r.name: {p.name: r.seconds[p.name] / 3600 for p in platforms
                      if r.seconds.get(p.name) and (allow is None or (r.name, p.name) in allow)}
             for r in runs}

    def room(run: str, p: Platform, i: int) -> float:
        """The epochs `allow` leaves `run` on `p` up to period `i` (no `allow`: any)."""
        if allow is None:
            return math.inf
        return sum(e for k, e in allow[(run, p.name)].items() if k <= i) - done.get(
            (run, p.name), 0)

    def earliest(run: str, p: Platform) -> tuple[float, float, float] | None:
        """(start, hours usable, epochs allowed) of the next session of `run` on `p`, or
        None."""
        pool, per_epoch = pools[p.pool], speed[run][p.name]
        t = max(run_free[run], min(lanes[p.pool]))
        while t + per_epoch <= horizon + EPS:
            i = pool.period_of(t)
            usable = min(pool.quota(i) - used.get((pool.name, i), 0.0),
                         pool.period_end(i) - t, p.cap, horizon - t)
            if usable + EPS >= per_epoch and room(run, p, i) >= 1:
                return t, usable, room(run, p, i)
            if pool.period is None:
                return None  # the session cap is below one epoch: never
            t = pool.period_end(i)
        return None

    while any(left.values()):
        best = None
        for r in runs:
            if not left[r.name]:
                continue
            options = []
            for p in platforms:
                if p.name not in speed[r.name]:
                    continue
                found = earliest(r.name, p)
                if found is None:
                    continue
                t, usable, most = found
                per_epoch = speed[r.name][p.name]
                k = min(left[r.name], int(math.floor(usable / per_epoch + EPS)), most)
                # The run's finish if this session trains k epochs here and the rest go on
                # at its best speed anywhere (an optimistic bound: no wait counted).
                alone = t + k * per_epoch + (left[r.name] - k) * min(speed[r.name].values())
                # Laying out the MILP's epochs, a tie goes to the quota that resets first.
                reset = pools[p.pool].period_end(pools[p.pool].period_of(t)) if allow else 0
                options.append((alone, -k, t, reset, p.name, usable, p, most))
            if not options:
                return None
            options.sort(key=lambda o: o[:5])
            alone, _, t, _, _, usable, p, most = options[0]
            work = left[r.name] * min(speed[r.name].values())
            # Regret: what the run loses if its best platform goes to another run first.
            regret = options[1][0] - alone if len(options) > 1 else math.inf
            first = (-regret, -work) if rule == "regret" else (-work, -regret)
            key = (min(o[2] for o in options), *first, r.name)
            if best is None or key < best[0]:
                best = (key, r, t, usable, p, most)
        _, r, t, usable, p, most = best
        per_epoch = speed[r.name][p.name]
        k = min(left[r.name], int(math.floor(usable / per_epoch + EPS)), most)
        done[(r.name, p.name)] = done.get((r.name, p.name), 0) + k
        end = t + k * per_epoch
        pool = pools[p.pool]
        lane = min(range(len(lanes[p.pool])), key=lambda j: (lanes[p.pool][j] > t + EPS, j))
        lanes[p.pool][lane] = end
        i = pool.period_of(t)
        used[(pool.name, i)] = used.get((pool.name, i), 0.0) + (end - t)
        run_free[r.name] = end
        left[r.name] -= k
        sessions.append(Session(r.name, p.name, t, end, k))
    sessions.sort(key=lambda s: (s.start, s.platform, s.run))
    return Plan(sessions, tuple(sorted(p.name for p in platforms)))


def variants(platforms: list[Platform]) -> list[list[Platform]]:
    """The platform sets the search tries (module docstring), in a fixed order."""
    if len(platforms) <= SUBSETS_UP_TO:
        return [list(c) for n in range(len(platforms), 0, -1)
                for c in itertools.combinations(platforms, n)]
    alone = [[p] for p in platforms]
    without = [[q for q in platforms if q is not p] for p in platforms]
    return [platforms, *without, *alone]


def plans(runs: list[Run], platforms: list[Platform], pools: dict[str, Pool],
          horizon: float) -> list[Plan]:
    """Every plan the search found that fits the horizon, earliest finish first (ties: fewer
    hours, then fewer platforms, then names); Infeasible when none does."""
    runs = [r for r in runs if r.epochs > 0]
    if not runs:
        raise Infeasible("nothing left to train")
    found = []
    for subset in variants(sorted(platforms, key=lambda p: p.name)):
        for rule in RULES:
            plan = _schedule(runs, subset, pools, horizon, rule)
            if plan is not None:
                found.append(plan)
    ordered = sorted(platforms, key=lambda p: p.name)
    listed = min((pl.finish for pl in found), default=horizon)
    answer = assign(runs, ordered, pools, min(horizon, listed))
    if answer is not None and answer.epochs:
        found += _milp_plans(runs, ordered, pools, horizon, answer.epochs, listed)
    if not found:
        stuck = max(runs, key=lambda r: r.epochs)
        raise Infeasible(f"{stuck.name}'s {stuck.epochs} epochs do not fit")
    unique = {tuple(found_plan.sessions): found_plan for found_plan in found}
    ranked = sorted(unique.values(), key=lambda pl: (round(pl.finish, 6), round(pl.hours(), 6),
                                                     len(pl.used), pl.used))
    if answer is not None:  # no plan finishing by `listed` is sooner, and `listed` is reached
        ranked[0].bound = min(answer.bound, ranked[0].finish)
    return ranked


def _milp_plans(runs, platforms, pools, horizon, epochs, listed) -> list[Plan]:
    """The MILP's epochs laid out by the list schedule (each order; epochs allowed by period,
    then by platform only), those finishing before `listed` (the list schedule's best)."""
    out = []
    totals = {key: {0: sum(by.values())} for key, by in epochs.items()}
    for allow in (epochs, totals):
        for rule in RULES:
            plan = _schedule(runs, platforms, pools, horizon, rule, allow)
            if plan is not None and plan.finish < listed - EPS:
                plan.search = "milp"
                out.append(plan)
    return out


def choose(runs: list[Run], platforms: list[Platform], pools: dict[str, Pool],
           horizon: float) -> dict:
    """{"plan": the earliest finish on the free platforms, "faster": one that finishes sooner
    with paid ones too, "cheaper": one using fewer quota hours or fewer platforms} (the last
    two None when no such plan was found)."""
    free = [p for p in platforms if not p.paid]
    paid = [p for p in platforms if p.paid]
    try:
        main = plans(runs, free, pools, horizon) if free else []
    except Infeasible:
        if not paid:
            raise
        main = []
    everything = plans(runs, platforms, pools, horizon) if paid else []
    if not main:
        return {"plan": everything[0], "faster": None, "cheaper": None}
    best = main[0]
    faster = next((p for p in everything if p.finish < best.finish - EPS), None)
    cheaper = next((p for p in sorted(main[1:], key=lambda pl: (len(pl.used), pl.hours(),
                                                                pl.finish))
                    if len(p.used) < len(best.used) or p.hours() < best.hours() - EPS), None)
    return {"plan": best, "faster": faster, "cheaper": cheaper}
