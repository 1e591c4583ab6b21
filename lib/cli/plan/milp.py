"""The planner's solver step: which run trains how many epochs on which platform in which quota
period, and a proven lower bound on the finish, from a MILP solved by HiGHS
(`scipy.optimize.milp`; scipy is already in the lock, OR-Tools' protobuf pin is not).

The MILP is a *relaxation* of the planning problem of solve.py, so its bound holds for every
plan. Time from 0 to the horizon is cut at every pool's resets into segments (each inside one
period of every pool). Variables: z[r,p,s] >= 0, the hours run r trains on platform p in
segment s; n[r,p,k], the whole epochs run r trains on p in period k of p's pool (a session
never crosses its pool's reset, so each epoch lies in one period); u[r,s] in {0, 1}, run r
trains in segment s; T, the finish. Constraints:
- sum_{p,k} n[r,p,k] = the run's epochs left; sum_{s in k} z[r,p,s] = n[r,p,k] * hours/epoch;
- a pool period's hours <= its quota (the first period: the hours left);
- a pool's hours in a segment <= concurrent x the segment's length x v[pool,s] (binary);
- a run's hours in a segment <= the segment's length x u[r,s] (its sessions never overlap);
- T >= start(s) * u[r,s] + the run's hours from segment s on (it starts no earlier and
  its sessions follow one another); T >= start(s) * v[pool,s] + the pool's hours from segment
  s on / concurrent; T <= the horizon.
Minimize T (plus a millionth of an hour per hour of quota used, to prefer fewer hours; the
bound given subtracts the most that can add). What the relaxation leaves out (sessions
within their cap, epochs whole inside a session, lanes) is laid out by solve.py's list
schedule following the MILP's epochs per platform and period.

Determinism: HiGHS is deterministic for a given model and a node limit stops it at the same
point on every machine; where the time limit stops it (a large grid: bench/bench_plan.py), its
answer would vary with the machine's load, so it is not used: the list schedule's plan
stands, with the bound of the linear relaxation (solved to the end: deterministic). A small
model (`SMALL` integer variables) gets a clock far beyond what its node limit allows, so only
the node limit stops it; between that and a grid the clock reliably stops, the answer can
still depend on the load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

NODE_LIMIT = 200  # branch-and-bound nodes: the deterministic stop (see the docstring)
TIME_LIMIT_S = 2.0  # keeps a 100-cell grid's planning within seconds (see the docstring)
# Up to this many integer variables (a plan of a dozen runs: 165 at most in tests/test_plan.py's
# random cases; a 10-cell grid of bench/bench_plan.py: 1,605) the node limit stops HiGHS, and
# the clock is only a guard far beyond it, so a loaded machine cannot change the answer (the
# integer solve took up to 1.6 s here, over 2 s under the suite's load: two plans differed).
SMALL = 1000
GUARD_S = 60.0
TIE = 1e-6  # objective weight of an hour of quota used, below T's (hours)


@dataclass(frozen=True)
class Assignment:
    """The MILP's answer: `epochs[(run, platform)]` the epochs in each period of the platform's
    pool (index as `Pool.period_of`; absent: none), and `bound`, a proven lower bound on the
    finish of any plan finishing within the horizon it was given (hours)."""

    epochs: dict  # empty: no solution found within the limits (the bound still holds)
    bound: float
    optimal: bool


def segments(pools: dict, horizon: float) -> list[float]:
    """The cut points 0 < ... < horizon: every reset of a pool before the horizon."""
    cuts = {0.0, float(horizon)}
    for pool in pools.values():
        if pool.period is None:
            continue
        i = 0
        while pool.period_end(i) < horizon - 1e-9:
            if pool.period_end(i) > 1e-9:
                cuts.add(pool.period_end(i))
            i += 1
    return sorted(cuts)


def assign(runs: list, platforms: list, pools: dict, horizon: float,
           node_limit: int = NODE_LIMIT, time_limit: float = TIME_LIMIT_S,
           timed: bool = False) -> Assignment | None:
    """The MILP of the module docstring on `platforms` within `horizon`; None when a run has
    no platform it fits on. `epochs` is empty where HiGHS found no solution within the node
    limit, or the time limit stopped it (then `bound` is the linear relaxation's). `timed`:
    keep an answer the time limit stopped (bench/bench_plan.py's; not deterministic)."""
    cuts = segments({p.pool: pools[p.pool] for p in platforms}, horizon)
    segs = list(zip(cuts[:-1], cuts[1:], strict=True))
    names: list[tuple] = []  # each variable's key, by column
    lower, upper, integral, cost = [], [], [], []

    def var(key, lo, hi, integer, c=0.0) -> int:
        names.append(key)
        lower.append(lo)
        upper.append(hi)
        integral.append(integer)
        cost.append(c)
        return len(names) - 1

    rows: list[tuple[dict, float, float]] = []  # ({column: coefficient}, low, high)
    t_col = var(("T",), 0.0, float(horizon), 0, 1.0)
    n: dict = {}  # (r, p, k) -> column
    per: dict = {}  # (r, p) -> hours per epoch
    by_segment: dict = {}  # (pool, s) -> {column: 1.0}
    for r in runs:
        cover: dict = {}
        zr: dict = {}  # s -> this run's columns in segment s
        for p in platforms:
            if not r.seconds.get(p.name):
                continue
            h, pool = r.seconds[p.name] / 3600, pools[p.pool]
            if h > p.cap + 1e-9:
                continue
            per[(r.name, p.name)] = h
            by_period: dict = {}
            for s, (a, _) in enumerate(segs):
                by_period.setdefault(pool.period_of(a), []).append(s)
            for k, ss in by_period.items():
                span = segs[ss[-1]][1] - segs[ss[0]][0]
                most = min(r.epochs, math.floor(min(span, pool.quota(k)) / h + 1e-9))
                if most <= 0:
                    continue
                n[(r.name, p.name, k)] = col = var(("n", r.name, p.name, k), 0, most, 1, TIE * h)
                cover[col] = 1.0
                link = {col: -h}
                for s in ss:
                    zc = var(("z", r.name, p.name, s), 0.0,
                                                      segs[s][1] - segs[s][0], 0)
                    link[zc] = 1.0
                    zr.setdefault(s, []).append(zc)
                    by_segment.setdefault((p.pool, s), {})[zc] = 1.0
                rows.append((link, 0.0, 0.0))
        if not cover:
            return None
        rows.append((cover, r.epochs, r.epochs))
        u = {s: var(("u", r.name, s), 0, 1, 1) for s in range(len(segs))}
        for s, (a, b) in enumerate(segs):
            if s not in zr:
                continue
            rows.append(({**{c: 1.0 for c in zr[s]}, u[s]: -(b - a)}, -math.inf, 0.0))
            later = {c: -1.0 for q in zr if q >= s for c in zr[q]}
            rows.append(({t_col: 1.0, u[s]: -a, **later}, 0.0, math.inf))
    for name, pool in pools.items():
        mine = [p.name for p in platforms if p.pool == name]
        quota: dict = {}
        for (run, plat, k), col in n.items():
            if plat in mine:
                quota.setdefault(k, {})[col] = per[(run, plat)]
        if pool.hours is not None:
            rows += [(cols, -math.inf, pool.quota(k)) for k, cols in quota.items()]
        lanes = max(1, pool.concurrent)
        for s, (a, b) in enumerate(segs):  # as for a run, with `lanes` sessions at once
            if (name, s) not in by_segment:
                continue
            v = var(("v", name, s), 0, 1, 1)
            rows.append(({**by_segment[(name, s)], v: -lanes * (b - a)}, -math.inf, 0.0))
            later = {c: -1.0 / lanes for q in range(s, len(segs))
                     for c in by_segment.get((name, q), ())}
            rows.append(({t_col: 1.0, v: -a, **later}, 0.0, math.inf))
    matrix = coo_array(([v for cols, _, _ in rows for v in cols.values()],
                        ([i for i, (cols, _, _) in enumerate(rows) for _ in cols],
                         [c for cols, _, _ in rows for c in cols])),
                       shape=(len(rows), len(names)))
    problem = {"c": np.array(cost), "bounds": Bounds(np.array(lower, float),
                                                     np.array(upper, float)),
               "constraints": LinearConstraint(matrix.tocsr(), [lo for _, lo, _ in rows],
                                               [hi for _, _, hi in rows])}
    if sum(integral) <= SMALL and not timed:
        time_limit = max(time_limit, GUARD_S)
    result = milp(integrality=np.array(integral), **problem,
                  options={"node_limit": node_limit, "time_limit": time_limit})
    if "time limit" in result.message.lower() and not timed:
        # Where the clock stopped it varies from run to run: not deterministic. The linear
        # relaxation, solved to the end, still gives a (weaker) bound that is.
        relaxed = milp(integrality=np.zeros(len(names)), **problem,
                       options={"time_limit": time_limit})
        if relaxed.status != 0:
            return None
        return Assignment({}, max(0.0, relaxed.fun - _most_tie(runs, per)), False)
    epochs: dict = {}  # empty when HiGHS found no integer solution within its node limit
    for (run, plat, k), col in n.items() if result.x is not None else ():
        count = round(result.x[col])
        if count:
            epochs.setdefault((run, plat), {})[k] = count
    dual = getattr(result, "mip_dual_bound", None)
    if dual is None or not math.isfinite(dual):
        dual = result.fun if result.status == 0 else 0.0
    return Assignment(epochs, max(0.0, dual - _most_tie(runs, per)), result.status == 0)


def _most_tie(runs: list, per: dict) -> float:
    """The most the objective's tie-break (TIE an hour of quota) can add to T."""
    return TIE * sum(r.epochs * max((h for (name, _), h in per.items() if name == r.name),
                                    default=0.0) for r in runs)
