"""Failpoints: named places where a test can have this process killed, for real.

`TA_FAILPOINTS="checkpoint.write@2,train.step@7"` makes the process SIGKILL itself the 2nd
time it reaches `point("checkpoint.write")`, and so on. Unset (always, outside the fault
injection tests) a point costs one dictionary lookup. The points: `train.step` (after
backward, before the optimizer step), `eval.batch` (mid-evaluation) and `checkpoint.write`
(half of a checkpoint's bytes written).
"""

from __future__ import annotations

import os
import signal

ENV = "TA_FAILPOINTS"
_hits: dict[str, int] = {}


def _armed() -> dict[str, int]:
    spec = os.environ.get(ENV, "")
    return {name: int(n) for name, _, n in (p.partition("@") for p in spec.split(",") if p)}


def point(name: str) -> None:
    """Die here (SIGKILL, no cleanup, like a lost runtime) if this hit is armed."""
    if ENV not in os.environ:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _armed().get(name) == _hits[name]:
        os.kill(os.getpid(), signal.SIGKILL)
