"""Failpoints: named places where a test can have this process killed, for real.

`TA_FAILPOINTS="checkpoint.write@2,train.step@7"` makes the process SIGKILL itself the 2nd
time it reaches `point("checkpoint.write")`, and so on. Unset (always, outside the fault
injection tests) a point costs one dictionary lookup. The points: `train.step` (after
backward, before the optimizer step), `eval.batch` (mid-evaluation), `checkpoint.write`
(half of a checkpoint's bytes written) and `trackers.log` (an epoch's checkpoint saved, the
epoch not yet sent to the trackers).

`TA_SLOWPOINTS="train.step=0.5"` makes every hit of a point sleep that long instead: a slow
machine on demand, so a test of a time limit (a Slurm `--time`, a session's clock) does not
depend on how fast this one is.

`TA_SESSION_EPOCHS=2` ends every session after it trained 2 epochs of a run: the loop
stops itself, saved, as before a session limit (`lib.training.loop.fit`), so a test of a run carried
from platform to platform stops each session at the same epoch on any machine.

A timed spec, `train.step@2+0.05`, kills at an arbitrary moment instead: the 2nd hit of
`train.step` starts a daemon timer that SIGKILLs the process 0.05 s later, wherever it is
then (mid-step, mid-evaluation, mid-write, logging...). So that such a kill cannot let the
run get arbitrarily far on a fast machine, the process waits for the timer at the next
`train.step` or `checkpoint.write` it reaches (the points just before a weight update and
before a checkpoint becomes complete), or at exit: a timed kill always lands, and a run
killed by `X@n+d` keeps at most what a kill at the next such point would keep. A line on
stderr says where the process waited, if it did.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time

ENV = "TA_FAILPOINTS"
SLOW_ENV = "TA_SLOWPOINTS"
SESSION_EPOCHS_ENV = "TA_SESSION_EPOCHS"
# Where a process with a timed kill pending waits for it: before state changes for good.
HOLD_AT = ("train.step", "checkpoint.write")
_hits: dict[str, int] = {}
_pending: list[threading.Timer] = []  # the started timed kill, if any


def _armed() -> dict[str, tuple[int, float | None]]:
    """name -> (hit, delay in s or None) from the environment."""
    armed = {}
    for item in filter(None, os.environ.get(ENV, "").split(",")):
        name, _, when = item.partition("@")
        hit, timed, delay = when.partition("+")
        armed[name.strip()] = (int(hit), float(delay) if timed else None)
    return armed


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _hold(where: str) -> None:
    """Wait (forever) for the pending timer's SIGKILL."""
    print(f"failpoints: held at {where} until the timed kill", file=sys.stderr, flush=True)
    while True:
        time.sleep(1.0)


def _slow(name: str) -> None:
    for item in filter(None, os.environ.get(SLOW_ENV, "").split(",")):
        point_name, _, seconds = item.partition("=")
        if point_name.strip() == name:
            time.sleep(float(seconds))


def session_over(epochs_trained: int) -> bool:
    """True when TA_SESSION_EPOCHS is set and this session has trained that many epochs."""
    limit = os.environ.get(SESSION_EPOCHS_ENV)
    return bool(limit) and epochs_trained >= int(limit)


def point(name: str) -> None:
    """Die here (SIGKILL, no cleanup, like a lost runtime) if this hit is armed; sleep here
    if TA_SLOWPOINTS names this point."""
    if SLOW_ENV in os.environ:
        _slow(name)
    if ENV not in os.environ:
        return
    if _pending and name in HOLD_AT:
        _hold(name)
    _hits[name] = _hits.get(name, 0) + 1
    hit, delay = _armed().get(name, (None, None))
    if hit != _hits[name]:
        return
    if delay is None:
        _kill()
    timer = threading.Timer(delay, _kill)
    timer.daemon = True
    _pending.append(timer)
    atexit.register(_hold, "exit")
    timer.start()
