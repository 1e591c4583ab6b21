"""One notebook run through papermill from a terminal: its progress lines and its result.

`train-anywhere run` and every sweep cell (lib/sweep/cell.py) execute a notebook here, so a
script user runs exactly what a notebook user runs, and the executed notebook is kept.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from lib.params import ROOT, UsageError
from lib.progress import epoch_line

NOTEBOOKS = ROOT / "notebooks"


def _records(path: Path) -> list[dict]:
    """The epoch records of a metrics.jsonl (lib.metrics' reader, imported when first
    needed: `--help` and bad-input answers should not wait for torch)."""
    from lib.metrics import read_jsonl

    return read_jsonl(path)


class NotebookFailed(RuntimeError):
    """The notebook raised: `str()` is the error's one line, `.executed` the notebook kept."""

    def __init__(self, line: str, executed: Path | None = None):
        super().__init__(line)
        self.executed = executed


def notebook_path(workload: str, platform: str) -> Path:
    path = NOTEBOOKS / platform / f"{workload}.ipynb"
    if not path.exists():
        raise UsageError(f"{path.relative_to(ROOT)} does not exist; render the notebooks "
                         "with `python build_notebooks.py`.")
    return path


# Running one notebook --------------------------------------------------------------------
def execute(notebook: Path, executed: Path, params: dict[str, Any],
            log_output: bool = False) -> None:
    """papermill `notebook` -> `executed` with `params`; a raised error -> NotebookFailed.

    The kernel runs in the repository (the bootstrap cell finds `lib/` from there), so
    relative paths in `params` must already be absolute.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    executed.parent.mkdir(parents=True, exist_ok=True)
    try:
        # The kernel's own log is not the project's and a user cannot act on it: its start-up
        # warning (local TCP sockets), and "KeyboardInterrupt caught in kernel" when
        # jupyter_client's shutdown (which interrupts the kernel first) meets a message being
        # handled. A cell's error still reaches the console, through papermill.
        papermill.execute_notebook(str(notebook), str(executed), parameters=params,
                                   cwd=str(ROOT), progress_bar=False, log_output=log_output,
                                   kernel_name="python3",
                                   extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
    except PapermillExecutionError as exc:
        lines = [line for line in str(exc.evalue).strip().splitlines() if line.strip()]
        message = lines[-1] if lines else exc.ename
        raise NotebookFailed(f"{exc.ename}: {message}", executed) from None


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress(threading.Thread):
    """Prints one line per new epoch record in any metrics.jsonl under `out_dir`."""

    def __init__(self, out_dir: Path, epochs: int | None, stream=None, every: float = 0.5,
                 note: str | None = None):
        super().__init__(daemon=True)
        self.out_dir, self.epochs, self.every = Path(out_dir), epochs, every
        self.note = note  # as the notebook's rows: "synthetic sample" on the offline sample
        self.stream = stream or sys.stdout
        self.seen: dict[Path, int] = {}
        self.stop = threading.Event()
        # Records already there (a resumed run) are not news.
        for path in self._files():
            self.seen[path] = len(_records(path))

    def _files(self) -> list[Path]:
        return sorted(self.out_dir.rglob("metrics.jsonl")) if self.out_dir.exists() else []

    def poll(self) -> None:
        for path in self._files():
            records = _records(path)
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
        records = _records(path)
        if records:
            rel = path.parent.relative_to(out_dir)
            runs.append(("." if str(rel) == "." else str(rel), records[-1]))
    return metric, runs
