"""Kill a training run at chosen moments, restart it, and compare with an uninterrupted run.

The notebook source itself is run (as a plain script, the parameters overridden the way
papermill does), so what is tested is exactly what a Colab user re-runs after a disconnect.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import nbformat

from tests.zygote import Zygote

ROOT = Path(__file__).resolve().parent.parent
FAILPOINTS = ("train.step", "eval.batch", "checkpoint.write")
TIMING = ("seconds", "samples_per_s")


def notebook_script(workload: str, params: dict, path: Path) -> Path:
    """notebooks_src/<workload>.py with a cell after `parameters` that overrides them."""
    nb = jupytext.read(ROOT / "notebooks_src" / f"{workload}.py", fmt="py:percent")
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    overrides = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(overrides))
    path.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                    + jupytext.writes(nb, fmt="py:percent"))
    return path


# Kill points. Checkpoints are written after every step (the tests set CHECKPOINT_MINUTES to
# ~0), so each kill below keeps a bounded number of steps whatever the machine's speed:
MAX_HIT = 2  # failpoint hits: X@1 or X@2
STARTUP_S = (0.5, 6.0)  # start-up kills: this long after the process starts...
STARTUP_LIMIT = "train.step@1"  # ...or at its first step, whichever comes first
TIMED_S = (1e-3, 0.3)  # timed kills X@n+d: d log-uniform in this range (see lib/base/faults.py)


@dataclass(frozen=True)
class Kill:
    """One attempt's kill: its TA_FAILPOINTS, and for start-up kills a SIGKILL from outside."""

    spec: str
    after_s: float | None = None  # SIGKILL this long after the process starts


def kill_points(seed: int | str, max_hit: int = MAX_HIT, startup: float = 0.15,
                timed: float = 0.4) -> Iterator[Kill]:
    """An endless stream of kill points, replayable from `seed`, drawn as:

    * `startup`: at a random moment of the notebook's start-up (imports, session, data
      cells), or at the first training step if start-up is over by then: keeps 0 steps;
    * `timed`: `X@n+d`, d from 1 ms to 0.3 s after the n-th hit of X, wherever the process
      then is (mid-step, mid-evaluation, mid-write, logging); it waits for the kill at the
      next `train.step` / `checkpoint.write`, so it keeps what that point's kill keeps;
    * otherwise `X@n` exactly at a failpoint.
    """
    rng = random.Random(seed)
    while True:
        r = rng.random()
        if r < startup:
            yield Kill(STARTUP_LIMIT, round(rng.uniform(*STARTUP_S), 2))
            continue
        spec = f"{rng.choice(FAILPOINTS)}@{rng.randint(1, max_hit)}"
        if r < startup + timed:
            low, high = (math.log10(t) for t in TIMED_S)
            spec += f"+{10 ** rng.uniform(low, high):.3f}"
        yield Kill(spec)


def steps_needed(kills: int, batches: int, max_hit: int = MAX_HIT) -> int:
    """Training steps (EPOCHS * SMOKE_BATCHES) that guarantee `kills` kills of `kill_points`
    all land before the run finishes, on any machine.

    With a checkpoint after every step, one kill moves the newest checkpoint by at most:
    `train.step@n`, `checkpoint.write@n`: n - 1 steps (the n-th is lost); `eval.batch@n`:
    batches - 1 (the epoch's rest trains first; the end-of-epoch checkpoint is not written);
    a timed kill: what a kill at the next `train.step`/`checkpoint.write` keeps, so n - 1
    armed at `train.step`, n at `checkpoint.write`, batches - 1 at `eval.batch`; a start-up
    kill: 0. And each kill lands while max_hit steps remain (`eval.batch` ones always: the
    notebook evaluates after training too; armed timed kills always, see lib/base/faults.py).
    """
    # eval.batch@n must land in the epoch's first evaluation (of min(batches, len) batches;
    # every workload's sample test set has at least `batches` of them)
    assert 1 <= max_hit <= batches
    per_kill = max(max_hit, batches - 1)
    return (kills - 1) * per_kill + max_hit


@dataclass
class Outcome:
    kills: list[str] = field(default_factory=list)  # what killed each attempt
    attempts: int = 0
    finished_early: bool = False  # a kill point was not reached: the run was too short


_ZYGOTE: Zygote | None = None


def _run(script: Path, env: dict, after_s: float | None, timeout: float) -> tuple[str, str]:
    """(how the run ended: "finished", "killed" or "killed from outside", its stderr).

    Each run is a child forked by this worker's zygote (tests/zygote.py), which imported torch
    and the other heavy libraries once: a restart costs the notebook's own start-up, not
    Python's and torch's again."""
    global _ZYGOTE
    if _ZYGOTE is None or _ZYGOTE.proc.poll() is not None:
        _ZYGOTE = Zygote()
    err_path = script.with_suffix(".stderr")
    pid = _ZYGOTE.start(script, env, ROOT, err_path)
    outside, returncode = False, None
    if after_s is not None:
        returncode = _ZYGOTE.wait(after_s)
        if returncode is None:
            os.kill(pid, signal.SIGKILL)
            outside = True
    if returncode is None:
        returncode = _ZYGOTE.wait(timeout)
    if returncode is None:
        os.kill(pid, signal.SIGKILL)
        _ZYGOTE.wait()
        raise subprocess.TimeoutExpired(str(script), timeout)
    err = err_path.read_text(errors="replace")
    if returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{script.name} failed (exit {returncode}):\n{err[-3000:]}")
    if returncode == 0:
        return "finished", err
    return ("killed from outside" if outside else "killed"), err


def _describe(kill: Kill, how: str, err: str, seconds: float) -> str:
    if kill.after_s is not None:
        return (f"SIGKILL at start-up after {kill.after_s}s" if how == "killed from outside"
                else f"{kill.spec} before the {kill.after_s}s start-up kill ({seconds:.1f}s)")
    held = re.search(r"failpoints: held at (\S+)", err)
    return kill.spec + (f" (held at {held.group(1)})" if held else "")


def run_with_kills(script: Path, points: Iterable[Kill] = (), kills: int = 0,
                   timeout: float = 600) -> Outcome:
    """Run `script` with the next kill point until `kills` have landed, then to the end.

    If an attempt finishes instead (its kill point lay beyond the end of the training), the
    outcome says `finished_early` and no more kills are tried.
    """
    outcome = Outcome()
    base = {k: v for k, v in os.environ.items() if k != "TA_FAILPOINTS"}
    for kill in itertools.islice(points, kills):
        t0 = time.monotonic()
        outcome.attempts += 1
        how, err = _run(script, dict(base, TA_FAILPOINTS=kill.spec), kill.after_s, timeout)
        if how == "finished":
            outcome.finished_early = True
            return outcome
        outcome.kills.append(_describe(kill, how, err, time.monotonic() - t0))
    outcome.attempts += 1
    assert _run(script, base, None, timeout)[0] == "finished"
    return outcome


def strip_timing(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in history]


def kill_when(cmd: list[str], ready, timeout: float = 600.0, poll: float = 0.2,
              **popen) -> float:
    """Run `cmd` in its own process group and SIGKILL the whole group once `ready()` is true.

    For commands that fan out (a sweep's worker processes and their kernels): everything
    the command started dies with it, as on a lost machine. Returns the seconds it ran;
    fails if `cmd` exits before `ready()` or `timeout` passes.
    """
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **popen)
    t0 = time.monotonic()
    try:
        while not ready():
            if proc.poll() is not None:
                raise AssertionError(f"{cmd[:4]}... exited ({proc.returncode}) before the kill")
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"{cmd[:4]}... not ready after {timeout:.0f}s")
            time.sleep(poll)
        return time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
