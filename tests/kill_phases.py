"""Where a training process was when it died, read from outside, in its run folder.

A run folder (or each cell folder of a grid) shows how far an attempt got: `sessions.jsonl`
gains a row when training starts (after the imports, the session, the data and the resume:
the start-up); each complete checkpoint gets its `.done` marker; and a checkpoint being
written is a temporary `.ckpt-*.pt.*.tmp` beside the others until its rename (a kill
mid-write leaves it behind, the next start-up removes it). tests/fault_harness.py reads these
to aim SIGKILLs from outside and to check where each one landed.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lib.base.durable import MARKER
from lib.runs.identity import SESSIONS

START, MID, WRITE = "start-up", "mid-epoch", "checkpoint write"
PHASES = (START, MID, WRITE)
_WRITING = re.compile(r"^\.ckpt-e\d+-b\d+\.pt\.\w+\.tmp$")  # atomic.write_bytes's temp file


@dataclass(frozen=True)
class Folder:
    """What the attempts have left in a run folder (or grid) at one moment."""

    rows: dict[str, int]  # sessions.jsonl -> its size (a row per session that trained)
    done: frozenset[str]  # complete checkpoints' markers
    writing: frozenset[str]  # checkpoint files half-written (their temporary files)

    @classmethod
    def read(cls, out: Path) -> Folder:
        rows, done, writing = {}, set(), set()
        for run in (out, *_subfolders(out)):
            with contextlib.suppress(FileNotFoundError):
                rows[str(run / SESSIONS)] = (run / SESSIONS).stat().st_size
            with contextlib.suppress(FileNotFoundError), os.scandir(run / "checkpoints") as it:
                for entry in it:
                    if entry.name.startswith("ckpt-") and entry.name.endswith(MARKER):
                        done.add(entry.path)
                    elif _WRITING.match(entry.name):
                        writing.add(entry.path)
        return cls(rows, frozenset(done), frozenset(writing))

    def trained_since(self, before: Folder) -> list[str]:
        """The sessions.jsonl files a session was added to since `before`."""
        return [p for p, size in self.rows.items() if size != before.rows.get(p)]


def _subfolders(out: Path) -> list[Path]:
    """A grid's cell folders (a single run's own sub-folders are harmless: no sessions)."""
    with contextlib.suppress(FileNotFoundError), os.scandir(out) as it:
        return [Path(e.path) for e in it if e.is_dir() and e.name not in ("checkpoints", "tb")]
    return []


def landed(before: Folder, after: Folder) -> str:
    """Where a process that left `after` (read after its death) died: before training
    started, while a checkpoint was half-written, or in training otherwise (a step, an
    evaluation, logging). Old temporary files are gone by then: training starts with
    removing them."""
    if not after.trained_since(before):
        return START
    return WRITE if after.writing else MID


def startup_s(before: Folder, after: Folder, started_at: float) -> float | None:
    """Seconds from `started_at` (time.time() at the fork) to the attempt's first session
    row, where it got that far: its start-up."""
    grown = after.trained_since(before)
    if not grown:
        return None
    return min(os.stat(p).st_mtime for p in grown) - started_at
