"""The whole suite, measured: `make test` (what `.ci/run` calls) and `make test-quick`.

    python3 -m tests.suite           # every phase; exit 1 if any failed
    python3 -m tests.suite --quick   # the inner loop: lint, --check, unit tests, a notebook each

Runs each phase (a `make` target) and ends with a table: its seconds, its exit status, how busy
the machine's CPUs were while it ran (of all cores, from /proc/stat: where the suite waits
rather than computes), and the peak disk used while it ran (every file system it writes: the
clone, the temporary folder, uv's and pip's caches), sampled every second. Phases that mostly
wait run beside one that computes: the XLA venv is built (downloads, unpacking) and the Slurm
lane runs (its cells wait on the scheduler) while the main lane's tests run; the image lanes
beside the XLA lane. Disk is given back as soon as a phase is done with it: the XLA venv (7.6
GB) goes once its lane passed, and each image lane (5-7 GB) is built just before its tests and
removed after them (tests/lanes.py `run`), so no more than the main venv, the XLA venv, two
lanes and the lanes' one uv cache (what lanes share downloaded once, up to 19 GB, removed after
the last lane) are ever on disk together. Each phase's output goes to the terminal as it comes,
or, for one run beside another, after it ends. The table is also written to `.suite/summary.md`;
`--durations=30` in each pytest keeps the 30 slowest tests in the log. Standard library only: it
runs before any venv exists.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".suite"


@dataclass
class Phase:
    name: str
    target: str  # the make target it runs
    seconds: float = 0.0
    rc: int | None = None  # None: not run (an earlier phase it needs failed)
    beside: str = ""  # the phase it ran beside, if any
    log: Path | None = field(default=None, repr=False)
    started: float | None = None  # time.monotonic() when its make began, and when it ended
    ended: float | None = None
    cpu: list = field(default_factory=list, repr=False)  # cpu_times() at its start and end


def cpu_times(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot (proc(5): the `cpu` line; idle and
    iowait are not busy); None where there is no /proc (macOS)."""
    try:
        ticks = [int(v) for v in stat.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    total = sum(ticks[:8])  # guest time is already counted in user and nice
    return total - ticks[3] - ticks[4], total


def busy(start, end) -> str:
    """The share of all CPUs' time that was busy between two cpu_times() readings."""
    if not start or not end or end[1] <= start[1]:
        return ""
    return f"{100 * (end[0] - start[0]) / (end[1] - start[1]):.0f}%"


class DiskPeak:
    """Samples the used bytes of every file system the suite writes to; `peak` is the largest
    rise over the start, summed over file systems, and `peaks[label]` the largest seen while
    `label` (the step running) was set."""

    def __init__(self, paths: list[Path], every: float = 1.0, usage=shutil.disk_usage):
        self.every, self.devices, self.usage = every, {}, usage
        for path in paths:
            path = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
            self.devices.setdefault(os.stat(path).st_dev, path)
        self.start = {dev: usage(p).used for dev, p in self.devices.items()}
        self.high = dict(self.start)
        self.label, self.peaks, self._lock = "", {}, threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        with self._lock:
            rise = 0
            for dev, path in self.devices.items():
                used = self.usage(path).used
                self.high[dev] = max(self.high[dev], used)
                rise += used - self.start[dev]
            self.peaks[self.label] = max(self.peaks.get(self.label, 0), rise)

    def during(self, label: str) -> None:
        """What runs from now on is `label`: a sample now closes the step before it."""
        self.sample()
        with self._lock:
            self.label = label

    def __enter__(self) -> DiskPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    @property
    def peak(self) -> int:
        return sum(self.high[d] - self.start[d] for d in self.devices)


def _make(target: str, log: Path | None = None, root: Path = ROOT) -> subprocess.Popen:
    cmd = [os.environ.get("MAKE", "make"), "--no-print-directory", target]
    out = log.open("w") if log else None
    return subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT if out else None)


def run(phase: Phase, root: Path = ROOT, cpu=cpu_times) -> bool:
    print(f"===== {phase.name} (make {phase.target}) =====", flush=True)
    phase.started, phase.cpu = time.monotonic(), [cpu()]
    phase.rc = _make(phase.target, root=root).wait()
    phase.ended = time.monotonic()
    phase.cpu.append(cpu())
    phase.seconds = phase.ended - phase.started
    print(f"===== {phase.name}: exit {phase.rc} after {phase.seconds:.0f} s =====", flush=True)
    return phase.rc == 0


def run_beside(mains: Phase | tuple[Phase, ...], *sides: Phase, root: Path = ROOT,
               during=lambda label: None, cpu=cpu_times) -> bool:
    """`sides` run beside `mains` (all started at once), the mains one after another (stopping
    at the first that fails; each told to `during` as it starts); each side's output after
    theirs; True when all passed."""
    mains = mains if isinstance(mains, tuple) else (mains,)
    (root / OUT.name).mkdir(exist_ok=True)

    def waited(side: Phase, proc: subprocess.Popen) -> None:  # its own end, not the mains'
        side.rc = proc.wait()
        side.ended = time.monotonic()
        side.cpu.append(cpu())

    waiters = []
    for side in sides:
        side.log, side.beside = root / OUT.name / f"{side.target}.log", mains[0].name
        side.started, side.cpu = time.monotonic(), [cpu()]
        waiters.append(threading.Thread(target=waited, args=(side, _make(side.target, side.log,
                                                                         root))))
        waiters[-1].start()
    ok = True
    for main in mains:
        if ok:
            during(main.name)
            ok = run(main, root, cpu)
    for side, waiter in zip(sides, waiters, strict=True):
        waiter.join()
        side.seconds = side.ended - side.started
        print(f"===== {side.name} (make {side.target}, beside {mains[0].name}): exit {side.rc} "
              f"after {side.seconds:.0f} s =====", flush=True)
        print(side.log.read_text(errors="replace"), flush=True)
        ok = ok and side.rc == 0
    return ok


def table(phases: list[Phase], total: float, disk: DiskPeak, cpu: str = "") -> str:
    """A row per phase: its seconds, its exit status, the CPUs' busy share while it ran (the
    machine's: with what ran beside it), and the peak disk used while it ran (over the suite's
    start; a phase run beside another shares that one's figure); `cpu`: the whole suite's."""
    rows = ["| phase | make target | seconds | exit | CPU busy | peak disk used | note |",
            "|---|---|---|---|---|---|---|"]
    for p in phases:
        note = f"beside {p.beside}" if p.beside else ""
        status = "not run" if p.rc is None else str(p.rc)
        used = disk.peaks.get(p.beside or p.name)
        used = "" if p.rc is None or used is None else f"{used / 1e9:.1f} GB"
        load = busy(*p.cpu) if p.rc is not None and len(p.cpu) == 2 else ""
        rows.append(f"| {p.name} | {p.target} | {p.seconds:.0f} | {status} | {load} | {used} | "
                    f"{note} |")
    rows.append(f"| **whole suite** | | **{total:.0f}** | | **{cpu}** | "
                f"**{disk.peak / 1e9:.1f} GB** | |")
    return "\n".join(rows)


def _checks() -> list[tuple[Phase, ...]]:
    """What both suites run before their tests."""
    return [(Phase("lint (ruff)", "lint"),),
            (Phase("render check (build_notebooks --check)", "check"),)]


def full() -> list[tuple[Phase, ...]]:
    """Steps in order; a step of several runs the rest beside the first (phases one after
    another, when the first is a tuple of them)."""
    return [
        # Debian's packages (FUSE for the Drive stand-in; chromium and axe-core for the site's
        # browser checks), mostly downloads and dpkg, beside uv's unpacking: one after the
        # other (dpkg takes one apt-get at a time), from nothing 20-40 s of CI's serial start.
        (Phase("install: main venv", "install"),
         Phase("install: FUSE, chromium, axe-core", "system-deps")),
        *_checks(),
        # Beside the main lane: the XLA venv's downloads and unpacking, and the Slurm lane,
        # whose cells mostly wait (on the scheduler, and on steps held to outlast a time limit:
        # 400 s alone, 1,055 s beside the XLA and image lanes, which it then outlasted).
        (Phase("main lane tests", "test-main-tests"), Phase("install: XLA venv", "install-xla"),
         Phase("Slurm lane tests", "test-slurm")),
        # The image lanes beside the XLA lane: their builds mostly download and unpack, and the
        # XLA lane's last minutes run one worker (its longest module) while the other has none.
        ((Phase("XLA lane tests", "test-xla"), Phase("remove the XLA venv (7.6 GB)", "clean-xla")),
         Phase("image lanes: each built, tested, removed", "test-lanes")),
    ]


def quick() -> list[tuple[Phase, ...]]:
    return [(Phase("install: main venv", "install"),), *_checks(),
            (Phase("quick tests", "test-quick-tests"),)]


def measure(steps: list[tuple[Phase, ...]], root: Path = ROOT, usage=shutil.disk_usage,
            every: float = 1.0, cpu=cpu_times) -> tuple[bool, str]:
    """Run `steps` in order, stopping at the first that fails; (all passed, the table). Disk
    use is sampled every `every` seconds through `usage` (shutil.disk_usage's shape)."""
    caches = [Path(os.environ.get("UV_CACHE_DIR", Path.home() / ".cache" / "uv")),
              Path.home() / ".cache" / "pip"]
    started, failed, first_cpu = time.monotonic(), False, cpu()
    with DiskPeak([root, Path(tempfile.gettempdir()), *caches], every, usage) as disk:
        for step in steps:
            if failed:
                break
            first = step[0] if isinstance(step[0], Phase) else step[0][0]
            disk.during(first.name)
            ok = (run(step[0], root, cpu) if len(step) == 1
                  else run_beside(*step, root=root, during=disk.during, cpu=cpu))
            failed = not ok
    total = time.monotonic() - started
    phases = [p for step in steps for item in step
              for p in (item if isinstance(item, tuple) else (item,))]
    text = table(phases, total, disk, busy(first_cpu, cpu()))
    (root / OUT.name).mkdir(exist_ok=True)
    (root / OUT.name / "summary.md").write_text(text + "\n")
    print("\n===== the suite, measured (also in .suite/summary.md) =====\n" + text, flush=True)
    return not failed, text


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    ok, _ = measure(quick() if args.quick else full())
    return 0 if ok else 1


def _parse(argv):
    parser = argparse.ArgumentParser(description="Run the suite's phases and measure them.")
    parser.add_argument("--quick", action="store_true", help="the five-minute inner loop")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
