"""Learning tests: the assertions that a model learned, and how their margins were measured.

A learning test trains with `seed(default)` and reports the values it asserts on with
`record(name, **values)`. Run alone it uses its default seed; `python -m bench.bench_learning`
runs every learning test over several seeds and CPU settings (thread count, instruction set),
collects what they recorded and prints the spread, which each test's docstring states: a
threshold must clear the whole spread by a margin, so the test asserts learning, not a lucky
curve (issue 28: a 32-step MSHNet run peaked at mIoU 26 on one machine and 8.5 on another).
"""

from __future__ import annotations

import json
import os

SEED_ENV = "TA_LEARN_SEED"  # overrides every learning test's seed (bench.bench_learning)
LOG_ENV = "TA_LEARN_LOG"  # a JSON-lines file that record() appends to


def seed(default: int) -> int:
    """The seed a learning test trains with: `default`, or TA_LEARN_SEED when set."""
    return int(os.environ.get(SEED_ENV, default))


def record(name: str, **values: float | list[float]) -> None:
    """Append the values a learning test asserts on to TA_LEARN_LOG (nothing when unset)."""
    path = os.environ.get(LOG_ENV)
    if path:
        row = {"test": name, "seed": os.environ.get(SEED_ENV), **values}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
