"""How long `train-anywhere plan` takes to plan a grid, and how close its plans come to the best.

    python -m bench.bench_plan [--cells 100] [--small 300]

1. Planning time: a grid of `--cells` runs of 200 epochs (the optimizer study's EPOCHS) at
   40 s an epoch on a T4 (a guess for the shape of the problem, not a measured speed) over
   Kaggle's T4 x2 (30 h a week, 2 at once), Kaggle's TPU (20 h a week, faster), Colab
   (4 h a day), a lab cluster (16 h a day, 2 at once, 24 h jobs) and this machine (10x
   slower): the full search (`solve.plans`: every platform subset, both orders) against one
   list schedule (the baseline, in the same process).
2. Quality: on `--small` random small cases (tests/test_plan.py's `small_case`), the
   planner's finish against an exhaustive search's best.
"""

from __future__ import annotations

import argparse
import random
import time

from bench.common import load_average, markdown_table
from lib.cli.plan.solve import Infeasible, Platform, Pool, Run, _schedule, plans

HORIZON = 24 * 365.0


def grid(cells: int):
    pools = {"kaggle_gpu": Pool("kaggle_gpu", 30.0, "week", 50.0, 12.0, 2),
             "kaggle_tpu": Pool("kaggle_tpu", 20.0, "week", 50.0, None, 1),
             "colab": Pool("colab", 4.0, "day", 15.0),
             "lab": Pool("lab", 16.0, "day", 10.0, None, 2),
             "this_machine": Pool("this_machine")}
    platforms = [Platform("kaggle_t4x2", "kaggle_gpu", 12.0, 0.25),
                 Platform("kaggle_tpu", "kaggle_tpu", 9.0, 0.25),
                 Platform("colab_t4", "colab", 12.0, 0.25), Platform("lab", "lab", 24.0, 0.25),
                 Platform("local", "this_machine")]
    speed = {"kaggle_t4x2": 40.0, "kaggle_tpu": 25.0, "colab_t4": 44.0, "lab": 30.0,
             "local": 400.0}
    runs = [Run(f"cell{i:03d}", 200, dict(speed)) for i in range(cells)]
    return runs, platforms, pools


def timed(fn, repeats: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def planning(cells: int) -> list[dict]:
    runs, platforms, pools = grid(cells)
    one_s, one = timed(lambda: _schedule(runs, platforms, pools, HORIZON))
    all_s, found = timed(lambda: plans(runs, platforms, pools, HORIZON), repeats=1)
    best = found[0]
    return [{"search": "one list schedule (baseline)", "cells": cells, "seconds": one_s,
             "ratio": 1.0, "sessions": len(one.sessions), "finish_days": one.finish / 24},
            {"search": f"plans(): {len(found)} distinct plans kept", "cells": cells,
             "seconds": all_s, "ratio": all_s / one_s, "sessions": len(best.sessions),
             "finish_days": best.finish / 24}]


def quality(n: int, seed: int = 1) -> dict:
    from tests.test_plan import exhaustive, small_case

    rng, equal, worst, compared = random.Random(seed), 0, 1.0, 0
    for _ in range(n):
        runs, platforms, pools = small_case(rng)
        best = exhaustive(runs, platforms, pools, 16)
        try:
            got = plans(runs, platforms, pools, 16)[0].finish
        except Infeasible:
            continue
        compared += 1
        equal += abs(got - best) < 1e-9
        worst = max(worst, got / best)
    return {"cases": compared, "equal": equal, "worst_ratio": worst}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--small", type=int, default=300)
    args = parser.parse_args(argv)
    print(f"load average before: {load_average()}")
    print(markdown_table(planning(args.cells), [
        ("search", "search"), ("cells", "cells"), ("seconds", "seconds (best of 3 / 1)"),
        ("ratio", "ratio to baseline"), ("sessions", "sessions"),
        ("finish_days", "finish (days)")]))
    q = quality(args.small)
    print(f"\nagainst an exhaustive search, {q['cases']} small random cases: {q['equal']} "
          f"equal, worst {q['worst_ratio']:.3f}x the best finish")


if __name__ == "__main__":
    main()
