"""lib/base/faults.py: exact and timed failpoints really SIGKILL the process (tiny subprocesses)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.base import faults

ROOT = Path(__file__).resolve().parent.parent


def run(code: str, spec: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run `code` (with `point` imported) under TA_FAILPOINTS=spec; (result, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", f"from lib.base.faults import point\n{code}"],
                          cwd=ROOT, env=dict(os.environ, **{faults.ENV: spec}), capture_output=True,
                          text=True, timeout=60)
    return proc, time.monotonic() - t0


def test_specs_parse_with_and_without_a_delay(monkeypatch):
    monkeypatch.setenv(faults.ENV, "train.step@2+0.25,eval.batch@3")
    assert faults._armed() == {"train.step": (2, 0.25), "eval.batch": (3, None)}


def test_unset_points_do_nothing(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    for _ in range(3):
        faults.point("train.step")


def test_an_exact_point_kills_at_its_hit():
    proc, _ = run("for i in range(5):\n    point('x')\n    print(i, flush=True)", "x@3")
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.split() == ["0", "1"]


def test_a_timed_point_kills_after_its_delay_wherever_the_process_is():
    code = ("import time\npoint('x')\nprint('armed', flush=True)\n"
            "t = time.monotonic()\nwhile time.monotonic() - t < 20:\n    sum(range(1000))\n"
            "print('survived')")
    proc, seconds = run(code, "x@1+0.4")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.split() == ["armed"]
    assert 0.4 <= seconds < 10
    assert "held" not in proc.stderr  # it died in the busy loop, not waiting


@pytest.mark.parametrize("then, where", [("point('train.step')", "train.step"),
                                         ("point('checkpoint.write')", "checkpoint.write"),
                                         ("pass", "exit")])
def test_a_pending_timed_kill_is_waited_for_before_state_changes_and_at_exit(then, where):
    code = f"point('eval.batch')\npoint('eval.batch')\n{then}\nprint('passed', flush=True)"
    proc, seconds = run(code, "eval.batch@1+0.3")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert f"failpoints: held at {where} until the timed kill" in proc.stderr
    assert ("passed" in proc.stdout) == (where == "exit")
    assert seconds >= 0.3


def test_a_slowpoint_holds_every_hit_of_its_point_and_no_other(monkeypatch):
    """TA_SLOWPOINTS: a slow machine on demand, for tests of time limits (the Slurm requeue)."""
    from lib.base import faults

    slept = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    monkeypatch.setenv(faults.SLOW_ENV, "train.step=1.5,eval.batch=0.25")
    monkeypatch.delenv(faults.ENV, raising=False)
    for name in ("train.step", "checkpoint.write", "train.step", "eval.batch"):
        faults.point(name)
    assert slept == [1.5, 1.5, 0.25]
