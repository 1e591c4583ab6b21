"""A run's history on disk: `metrics.jsonl`, one JSON object per epoch, written whole and
atomically, read back by the loop, the study and the command line. Imports no torch, so the
command line reads a finished run folder without loading it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lib.base import atomic


def finite(record: dict) -> bool:
    """True when every float in a metrics record is finite."""
    return all(math.isfinite(v) for v in record.values() if isinstance(v, float))


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Rewrite the whole history atomically (a kill never leaves half a line)."""
    atomic.write_text(Path(path), "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def read_jsonl(path: Path) -> list[dict]:
    """The epoch records of a metrics.jsonl ([] if there is none), sorted by `epoch`, the
    last record of a repeated epoch kept; a line cut by a kill is skipped (the epoch is
    redone on resume). The one reader of the file, for the loop, the study and the CLI."""
    path = Path(path)
    if not path.exists():
        return []
    by_epoch: dict = {}
    for i, line in enumerate(path.read_text().splitlines()):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        by_epoch[record.get("epoch", i)] = record
    return [by_epoch[k] for k in sorted(by_epoch)]
