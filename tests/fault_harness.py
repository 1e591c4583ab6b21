"""Kill a training run at chosen moments, restart it, and compare with an uninterrupted run.

The notebook source itself is run (as a plain script, the parameters overridden the way
papermill does), so what is tested is exactly what a Colab user re-runs after a disconnect.
Each attempt is forked by a zygote (tests/zygote.py) that imported torch once; consecutive
attempts come from zygotes started with different PYTHONHASHSEEDs, so the process that
resumes a checkpoint never iterates sets (and hash-ordered things) in the order of the one
that wrote it: a resume that depends on that order shows in the comparison.
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
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import nbformat

from tests.kill_phases import MID, PHASES, START, WRITE, Folder, landed, startup_s
from tests.zygote import Zygote

ROOT = Path(__file__).resolve().parent.parent
FAILPOINTS = ("train.step", "eval.batch", "checkpoint.write")
TIMING = ("seconds", "samples_per_s")
SEED = int(os.environ.get("TA_FAULT_SEED", "20261122"))  # the kill plans' and the hash seeds'
# The zygotes' PYTHONHASHSEEDs (one zygote each, per worker): attempts take them in turn.
HASH_SEEDS = tuple(random.Random(f"{SEED}:hash").sample(range(1, 2**32 - 1), 2))


def notebook_script(workload: str, params: dict, path: Path, prologue: str = "") -> Path:
    """notebooks_src/<workload>.py with a cell after `parameters` that overrides them
    (`prologue`: code run before the notebook, e.g. to plant a mistake in `lib`)."""
    nb = jupytext.read(ROOT / "notebooks_src" / f"{workload}.py", fmt="py:percent")
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    overrides = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(overrides))
    path.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                    + (f"{prologue}\n" if prologue else "")
                    + jupytext.writes(nb, fmt="py:percent"))
    return path


# Kill points. Checkpoints are written after every step (the tests set CHECKPOINT_MINUTES to
# ~0), so each kill below keeps a bounded number of steps whatever the machine's speed:
MAX_HIT = 2  # failpoint hits: X@1 or X@2
TIMED_S = (1e-3, 0.3)  # timed kills X@n+d: d log-uniform in this range (see lib/base/faults.py)
# Kills from outside (a SIGKILL sent by this process), one aimed at each phase:
STARTUP_SHARE = (0.05, 0.5)  # start-up: this share of a restart's measured start-up
# mid-epoch / checkpoint write: the aimed-at step (after its backward) or write (half of the
# file written) is held open this long (TA_SLOWPOINTS), the kill sent this share of it after
# the harness sees that step or write begin; the failpoint at its end bounds a late kill.
WINDOW_S = 0.4
WINDOW_SHARE = (0.05, 0.5)
POLL_S = 0.005  # how often the run folder is read while a kill is aimed


@dataclass(frozen=True)
class Kill:
    """One attempt's kill: its TA_FAILPOINTS; for a kill from outside, the phase it is aimed
    at, when, and (mid-epoch, checkpoint write) which step or write of the attempt."""

    spec: str  # a kill from outside: the failpoint that ends the attempt if it comes late
    outside: str | None = None  # START, MID or WRITE
    share: float = 0.0  # of the measured start-up (START), of WINDOW_S after it began (else)
    nth: int = 1  # MID: the attempt's n-th step; WRITE: its n-th checkpoint write

    @property
    def slow(self) -> str | None:
        """TA_SLOWPOINTS: the aimed-at step or write held open WINDOW_S."""
        point = {MID: "train.step", WRITE: "checkpoint.write"}.get(self.outside)
        return f"{point}={WINDOW_S}" if point else None


def _outside(phase: str, rng: random.Random, max_hit: int) -> Kill:
    if phase == START:  # or at the first training step, if start-up is over by then
        return Kill("train.step@1", START, round(rng.uniform(*STARTUP_SHARE), 3))
    n = rng.randint(1, max_hit)
    point = "train.step" if phase == MID else "checkpoint.write"
    return Kill(f"{point}@{n}", phase, round(rng.uniform(*WINDOW_SHARE), 3), n)


def kill_points(seed: int | str, max_hit: int = MAX_HIT, block: int = 8, startup: float = 0.1,
                timed: float = 0.4) -> Iterator[Kill]:
    """An endless stream of kill points, replayable from `seed`, in blocks of `block`; each
    block has one SIGKILL from outside aimed at each phase, at random places:

    * start-up: `share` of the start-up measured on this run's restarts (imports of `lib`,
      session, data cells, the resume), or at the first training step (`train.step@1`) if
      start-up is over by then: keeps 0 steps;
    * mid-epoch: during the attempt's n-th training step (held open after its backward),
      before its update: keeps n - 1 steps, as `train.step@n`, its limit;
    * checkpoint write: during the attempt's n-th checkpoint write (held open half-written):
      keeps n - 1 steps, as `checkpoint.write@n`, its limit.

    The other kills are drawn as:
    * `startup`: another start-up kill from outside;
    * `timed`: `X@n+d`, d from 1 ms to 0.3 s after the n-th hit of X, wherever the process
      then is (mid-step, mid-evaluation, mid-write, logging); it waits for the kill at the
      next `train.step` / `checkpoint.write`, so it keeps what that point's kill keeps;
    * otherwise `X@n` exactly at a failpoint.
    """
    assert block > len(PHASES)
    rng = random.Random(seed)
    for start in itertools.count(0, block):
        # The first kill is never a start-up kill: those are sized by a measured start-up.
        places = rng.sample(range(block), len(PHASES))
        if start == 0 and places[0] == 0:
            places[0] = rng.choice([i for i in range(1, block) if i not in places])
        aimed = dict(zip(places, PHASES, strict=True))
        for i in range(block):
            r = rng.random()
            if i in aimed or (r < startup and start + i > 0):
                yield _outside(aimed.get(i, START), rng, max_hit)
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
    armed at `train.step`, n at `checkpoint.write`, batches - 1 at `eval.batch`; a kill from
    outside: 0 at start-up, else what its limiting failpoint keeps (it lands before it). And
    each kill lands while max_hit steps remain (`eval.batch` ones always: the
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
    phases: Counter = field(default_factory=Counter)  # where the kills landed (out_dir given)
    outside: Counter = field(default_factory=Counter)  # ... those sent from outside
    startups: list[float] = field(default_factory=list)  # each attempt's measured start-up

    def per_phase(self) -> str:
        return ", ".join(f"{p}: {self.phases[p]} ({self.outside[p]} from outside)"
                         for p in PHASES)


@dataclass
class Attempt:
    how: str  # "finished", "killed" (by its failpoint) or "killed from outside"
    err: str  # its stderr
    phase: str | None = None  # where it died (START, MID, WRITE), with a run folder to read
    startup_s: float | None = None  # fork to its first training step, where it got there


_ZYGOTES: dict[int, Zygote] = {}


def _zygote(hash_seed: int) -> Zygote:
    """This worker's zygote with `hash_seed` (all of HASH_SEEDS start together: their imports
    overlap)."""
    if hash_seed not in _ZYGOTES or _ZYGOTES[hash_seed].proc.poll() is not None:
        for seed in {*HASH_SEEDS, hash_seed}:
            if seed not in _ZYGOTES or _ZYGOTES[seed].proc.poll() is not None:
                _ZYGOTES[seed] = Zygote(dict(os.environ, PYTHONHASHSEED=str(seed)))
    return _ZYGOTES[hash_seed]


def run_script(script: Path, env: dict, cwd: Path, timeout: float = 600) -> tuple[int, str]:
    """`python script` in `env` and `cwd`, forked by this worker's zygote: (its exit code, its
    stdout and stderr), as a fresh `python script` gives them, without the imports a fresh
    start pays (a notebook's script that a test runs to its end, uninterrupted)."""
    zygote = _zygote(HASH_SEEDS[0])
    output = script.with_suffix(".output")
    pid = zygote.start(script, dict(env, PYTHONHASHSEED=str(HASH_SEEDS[0])), cwd, output,
                       stdout=True)
    code = zygote.wait(timeout)
    if code is None:
        _kill_late(zygote, pid, script, timeout)
    return code, output.read_text(errors="replace")


def _kill_late(zygote: Zygote, pid: int, script: Path, timeout: float) -> None:
    """A child still running past `timeout`: SIGKILLed, reaped, and the test told."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    zygote.wait()
    raise subprocess.TimeoutExpired(str(script), timeout)


def _sigkill(pid: int) -> bool:
    """SIGKILL `pid` unless it already died (its own failpoint): True if this one killed it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    if state in ("Z", "X"):
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def _began(kill: Kill, before: Folder, now: Folder, writes: set[str]) -> bool:
    """Has the attempt begun the step or write `kill` is aimed at?"""
    if kill.outside == WRITE:
        writes |= now.writing - before.writing
        return len(writes) >= kill.nth
    if kill.nth == 1:  # the first step follows its session row
        return bool(now.trained_since(before))
    return len(now.done - before.done) >= kill.nth - 1  # the step after the (n-1)-th save


def _run(script: Path, env: dict, kill: Kill | None, timeout: float, hash_seed: int,
         out: Path | None, startup: float | None) -> Attempt:
    """One attempt, forked by the zygote with `hash_seed`; `kill` from outside is sent when
    it says (`startup`: the start-up to take a share of), watching `out`, the run folder.

    A zygote imported torch and the other heavy libraries once: a restart costs the
    notebook's own start-up, not Python's and torch's again."""
    zygote = _zygote(hash_seed)
    zygote.ready()
    err_path = script.with_suffix(".stderr")
    before = Folder.read(out) if out else None
    aim = kill.outside if kill else None
    assert aim is None or out is not None, "a kill from outside needs the run folder"
    started_at, t0 = time.time(), time.monotonic()
    pid = zygote.start(script, dict(env, PYTHONHASHSEED=str(hash_seed)), ROOT, err_path)
    fire = t0 + kill.share * startup if aim == START else None
    sent, outside, writes, code = False, False, set(), None
    while code is None:
        now = time.monotonic()
        if fire is None and aim in (MID, WRITE) and _began(kill, before, Folder.read(out),
                                                           writes):
            fire = now + kill.share * WINDOW_S
        if fire is not None and not sent and now >= fire:
            sent, outside = True, _sigkill(pid)
        if now - t0 > timeout:
            _kill_late(zygote, pid, script, timeout)
        wait = (t0 + timeout - now if sent or aim is None  # for the end
                else POLL_S if fire is None else fire - now)  # watching, or for the kill
        code = zygote.wait(max(0.0, wait))
    err = err_path.read_text(errors="replace")
    if code not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{script.name} failed (exit {code}):\n{err[-3000:]}")
    attempt = Attempt("finished" if code == 0 else "killed from outside" if outside
                      else "killed", err)
    if out is not None:
        after = Folder.read(out)
        attempt.startup_s = startup_s(before, after, started_at)
        attempt.phase = landed(before, after) if code else None
    return attempt


def _nth(n: int) -> str:
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n, 'th')}"


def _describe(kill: Kill, attempt: Attempt, startup: float | None) -> str:
    if kill.outside == START:
        aim = f"SIGKILL at {kill.share:.0%} of start-up ({kill.share * startup:.2f}s)"
    elif kill.outside:
        step = "training step" if kill.outside == MID else "checkpoint write"
        aim = f"SIGKILL during the {_nth(kill.nth)} {step}"
    else:
        held = re.search(r"failpoints: held at (\S+)", attempt.err)
        aim = kill.spec + (f" (held at {held.group(1)})" if held else "")
    if kill.outside and attempt.how != "killed from outside":
        aim += f", too late: {kill.spec} came first"
    return aim + (f" -> {attempt.phase}" if attempt.phase else "")


def run_with_kills(script: Path, points: Iterable[Kill] = (), kills: int = 0,
                   timeout: float = 600, out_dir: Path | None = None,
                   hash_seeds: tuple[int, ...] = HASH_SEEDS) -> Outcome:
    """Run `script` with the next kill point until `kills` have landed, then to the end.

    `out_dir`, the run folder (or grid) the script writes, is read to aim kills from outside
    and to tell where each kill landed. A start-up kill takes its share of the shortest
    start-up measured on this run's attempts so far (so it never comes first; the first
    attempt's start-up is a restart's too: the data were prepared before). Attempt i is
    forked with PYTHONHASHSEED `hash_seeds[i % len]` (one seed: what forks of one zygote
    had; test_a_resume_that_depends_on_set_order_is_caught shows the difference).
    If an attempt finishes instead (its kill point lay beyond the end of the training), the
    outcome says `finished_early` and no more kills are tried.
    """
    outcome = Outcome()
    base = {k: v for k, v in os.environ.items() if k not in ("TA_FAILPOINTS", "TA_SLOWPOINTS")}
    for kill in [*itertools.islice(points, kills), None]:  # None: the last, to the end
        estimate = min(outcome.startups, default=None)
        assert not kill or kill.outside != START or estimate, "no start-up measured yet"
        env = dict(base, **({"TA_FAILPOINTS": kill.spec} if kill else {}),
                   **({"TA_SLOWPOINTS": kill.slow} if kill and kill.slow else {}))
        seed = hash_seeds[outcome.attempts % len(hash_seeds)]
        attempt = _run(script, env, kill, timeout, seed, out_dir, estimate)
        outcome.attempts += 1
        if attempt.startup_s is not None:
            outcome.startups.append(attempt.startup_s)
        if attempt.how == "finished":
            outcome.finished_early = kill is not None
            return outcome
        assert kill is not None, f"{script.name} was killed with no kill planned"
        outcome.kills.append(_describe(kill, attempt, estimate))
        if attempt.phase:
            outcome.phases[attempt.phase] += 1
            outcome.outside[attempt.phase] += attempt.how == "killed from outside"
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
