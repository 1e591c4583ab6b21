"""One notebook run through papermill from a terminal: its progress lines and its result.

`train-anywhere run` and every sweep cell (lib/cli/sweep/cell.py) execute a notebook here, so a
script user runs exactly what a notebook user runs, and the executed notebook is kept.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from lib.base.progress import epoch_line
from lib.cli.params import ROOT, UsageError

NOTEBOOKS = ROOT / "notebooks"


def records_of(path: Path) -> list[dict]:
    """The epoch records of a metrics.jsonl (lib.training.metrics' reader, imported when first
    needed: `--help` and bad-input answers should not wait for torch)."""
    from lib.runs.records import read_jsonl

    return read_jsonl(path)


def _user_errors(cls=None) -> set[str]:
    """The names of lib.base.errors.UserError and its subclasses (a notebook's error is known by
    its name only)."""
    from lib.base.errors import UserError

    cls = cls or UserError
    return {cls.__name__}.union(*(_user_errors(c) for c in cls.__subclasses__()))


class NotebookFailed(RuntimeError):
    """The notebook raised: `str()` is the error's one line, `.executed` the notebook kept,
    `.user_error` whether it is a mistake the user can fix (lib.base.errors.UserError)."""

    def __init__(self, line: str, executed: Path | None = None, ename: str = ""):
        super().__init__(line)
        self.executed = executed
        self.user_error = ename in _user_errors()


def notebook_path(workload: str, platform: str) -> Path:
    path = NOTEBOOKS / platform / f"{workload}.ipynb"
    if not path.exists():
        raise UsageError(f"{path.relative_to(ROOT)} does not exist; render the notebooks "
                         "with `python build_notebooks.py`.")
    return path


# Running one notebook --------------------------------------------------------------------
# jupyter_client picks a kernel's ports by binding port 0 and letting go; until the kernel binds
# them any process may take one, and the kernel dies before it runs a cell ("Address already in
# use", jupyter/jupyter_client#487: kernels started side by side, as a sweep's workers start
# them). Nothing ran, so the kernel is started again, on new ports: a sweep cell was lost to it.
KERNEL_STARTS = 3
DIED_AT_START = "Kernel died before replying to kernel_info"


def execute(notebook: Path, executed: Path, params: dict[str, Any],
            log_output: bool = False) -> None:
    """papermill `notebook` -> `executed` with `params`; a raised error -> NotebookFailed.

    The kernel runs in the repository (the bootstrap cell finds `lib/` from there), so
    relative paths in `params` must already be absolute.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    executed.parent.mkdir(parents=True, exist_ok=True)
    for start in range(1, KERNEL_STARTS + 1):
        try:
            # The kernel's own log is not the project's and a user cannot act on it: its
            # start-up warning (local TCP sockets), and "KeyboardInterrupt caught in kernel"
            # when jupyter_client's shutdown (which interrupts the kernel first) meets a message
            # being handled. A cell's error still reaches the console, through papermill.
            with _quiet_when_interrupted():
                papermill.execute_notebook(str(notebook), str(executed), parameters=params,
                                           cwd=str(ROOT), progress_bar=False,
                                           log_output=log_output, kernel_name="python3",
                                           extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
            return
        except PapermillExecutionError as exc:
            lines = [line for line in str(exc.evalue).strip().splitlines() if line.strip()]
            message = lines[-1] if lines else exc.ename
            raise NotebookFailed(f"{exc.ename}: {message}", executed, exc.ename) from None
        except RuntimeError as exc:
            if DIED_AT_START not in str(exc) or start == KERNEL_STARTS:
                raise


@contextlib.contextmanager
def _quiet_when_interrupted():
    """Ctrl-C (SIGINT, in the main thread) raises KeyboardInterrupt as always, and first
    silences what papermill, nbclient and asyncio then log about the kernel stopped mid-cell
    ("Kernel died while waiting for execute reply", "Task exception was never retrieved"):
    the user pressed it, and the run's one line says where it stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum, frame):
        for name in ("papermill", "traitlets", "asyncio"):
            logging.getLogger(name).disabled = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress(threading.Thread):
    """Prints one line per new epoch record in any metrics.jsonl under `out_dir`, and the
    run's other lines (resumed from, nothing to do, stopped before the limit, warnings) as
    the kernel appends them to `lines` (lib.base.progress.RUN_LINES_ENV)."""

    def __init__(self, out_dir: Path, epochs: int | None, stream=None, every: float = 0.5,
                 note: str | None = None, lines: Path | None = None):
        super().__init__(daemon=True)
        self.out_dir, self.epochs, self.every = Path(out_dir), epochs, every
        self.note = note  # as the notebook's rows: "synthetic sample" on the offline sample
        self.stream = stream or sys.stdout
        self.seen: dict[Path, int] = {}
        self.lines, self.lines_seen = lines, 0
        self.stop = threading.Event()
        # Records already there (a resumed run) are not news.
        for path in self._files():
            self.seen[path] = len(records_of(path))

    def _files(self) -> list[Path]:
        return sorted(self.out_dir.rglob("metrics.jsonl")) if self.out_dir.exists() else []

    def _said(self) -> None:
        """The run lines the kernel appended since the last poll; epoch rows come from
        metrics.jsonl (labelled by run folder), so they are not repeated."""
        try:
            text = self.lines.read_text() if self.lines else ""
        except FileNotFoundError:
            return
        complete = text[:text.rfind("\n") + 1].splitlines()
        for line in complete[self.lines_seen:]:
            if not line.startswith("epoch "):
                print(line, file=self.stream, flush=True)
        self.lines_seen = len(complete)

    def poll(self) -> None:
        self._said()
        for path in self._files():
            records = records_of(path)
            for record in records[self.seen.get(path, 0):]:
                rel = path.parent.relative_to(self.out_dir)
                label = "" if str(rel) == "." else f"{rel}: "
                line = epoch_line(record, self.epochs or record.get("epoch", 0), note=self.note)
                print(label + line, file=self.stream, flush=True)
            self.seen[path] = max(self.seen.get(path, 0), len(records))

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.poll()

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.poll()


def headline(out_dir: Path, metric: str) -> tuple[str, list[tuple[str, dict]]]:
    """(`metric`, [(run label, last record)]) of every metrics.jsonl under `out_dir`: the
    metric is the workload's `headline` (lib/workloads)."""
    runs = []
    for path in sorted(Path(out_dir).rglob("metrics.jsonl")):
        records = records_of(path)
        if records:
            rel = path.parent.relative_to(out_dir)
            runs.append(("." if str(rel) == "." else str(rel), records[-1]))
    return metric, runs


# Which run folder a session trained in, and its executed notebook kept there ---------------
SESSIONS = "sessions.jsonl"  # lib.runs.identity: one row per session that trained


def sessions_seen(out_dir: Path) -> dict[Path, int]:
    """{sessions.jsonl under `out_dir`: rows}: compared before and after a session, the
    folders it trained in (a refused or nothing-to-do session adds no row anywhere)."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return {}
    return {p: sum(1 for line in p.read_text().splitlines() if line.strip())
            for p in out_dir.rglob(SESSIONS)}


def trained_in(out_dir: Path, before: dict[Path, int]) -> tuple[Path, int] | None:
    """(the run folder this session trained in, its session number), or None when it trained
    nowhere. A grid's cells are folders below OUT_DIR; RESUME = "new" trains in a new
    `fresh-<n>` sub-folder, which is then the folder."""
    from lib.runs.identity import FRESH

    out_dir = Path(out_dir)
    grown = {p: n for p, n in sessions_seen(out_dir).items() if n > before.get(p, 0)}
    if not grown:
        return None
    folder = out_dir
    for path in grown:
        top = path.relative_to(out_dir).parts[0]
        if top.startswith(FRESH) and not any(p.is_relative_to(out_dir / top) for p in before):
            folder = out_dir / top
    return folder, max(grown.values())


def keep_notebook(executed: Path, out_dir: Path, before: dict[Path, int],
                  workload: str, interrupted: bool = False) -> Path | None:
    """Move the executed notebook of a session that trained into its run folder, as
    `<workload>-session-<n>.ipynb` beside the notebooks of the earlier sessions (never over
    one); None (left where it is) when the session trained nothing. An interrupted session's
    is kept in OUT_DIR even before it recorded a session (Ctrl-C in its first epoch), once
    the session has made OUT_DIR."""
    found = trained_in(out_dir, before)
    if found is None and interrupted and Path(out_dir).is_dir():
        found = Path(out_dir), before.get(Path(out_dir) / SESSIONS, 0) + 1
    if found is None or not Path(executed).is_file():
        return None
    folder, n = found
    target = folder / f"{workload}-session-{n}.ipynb"
    while target.exists():
        n += 1
        target = folder / f"{workload}-session-{n}.ipynb"
    shutil.move(str(executed), str(target))
    return target


def session_notebooks(run_dir: Path) -> list[Path]:
    """The executed notebooks kept in `run_dir`, in session order."""
    def number(path: Path) -> tuple[int, str]:
        tail = path.stem.rsplit("-session-", 1)
        return (int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else 0, path.name)

    return sorted(Path(run_dir).glob("*.ipynb"), key=number)
