"""Kill a training run at chosen moments, restart it, and compare with an uninterrupted run.

The notebook source itself is run (as a plain script, the parameters overridden the way
papermill does), so what is tested is exactly what a Colab user re-runs after a disconnect.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import nbformat

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


@dataclass
class Outcome:
    kills: list[str] = field(default_factory=list)  # what killed each attempt
    attempts: int = 0


def _run(script: Path, env: dict, delay: float | None, timeout: float) -> int:
    proc = subprocess.Popen([sys.executable, str(script)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if delay is not None:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{script.name} failed (exit {proc.returncode}):\n"
                           f"{err.decode()[-3000:]}")
    return proc.returncode


def plan(seed: int, n: int, max_hit: int = 3, time_kills: float = 0.2):
    """n kill points: (failpoint spec, None) or (None, delay in s); replayable from `seed`."""
    rng = random.Random(seed)
    points = []
    for _ in range(n):
        if rng.random() < time_kills:
            points.append((None, round(rng.uniform(2.0, 8.0), 2)))
        else:
            points.append((f"{rng.choice(FAILPOINTS)}@{rng.randint(1, max_hit)}", None))
    return points


def run_with_kills(script: Path, points, timeout: float = 600) -> Outcome:
    """Run `script` once per kill point (each killed, or finishing early), then to the end."""
    outcome = Outcome()
    base = {k: v for k, v in os.environ.items() if k != "TA_FAILPOINTS"}
    for spec, delay in points:
        env = dict(base, TA_FAILPOINTS=spec) if spec else base
        t0 = time.monotonic()
        outcome.attempts += 1
        if _run(script, env, delay, timeout) == 0:
            return outcome  # finished before this kill point was reached
        outcome.kills.append(spec or f"SIGKILL after {delay}s ({time.monotonic() - t0:.1f}s)")
    outcome.attempts += 1
    assert _run(script, base, None, timeout) == 0
    return outcome


def strip_timing(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in history]
