"""What a build wrote into a notebook, and whether a user has changed it since.

A rendered notebook records, per cell, a hash of what a user writes in it (metadata RECORD). A
build rewrites a notebook only when its cells are the ones a build wrote: an edit is kept (and
carried back to the source on request, lib.notebooks.to_source), and a run's outputs are never
deleted without a copy kept beside them (`keep_copy`). Nothing here renders: the caller passes
what the build would write now.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

# Notebook metadata: what the build wrote (source, platform, "id hash" of each cell in order),
# to tell a user's edit from its own.
RECORD = "train_anywhere"
COPY = re.compile(r"^[\w-]+\.(edited|executed)(-\d+)?\.(ipynb|json)$")  # copies a build keeps

# A rendered notebook records, per cell, a hash of what a user writes in it. A build rewrites a
# notebook only when its cells are the ones a build wrote: an edit is kept (and carried back to
# the source on request), and a run's outputs are never deleted without a copy kept beside them.

def cell_hash(cell) -> str:
    """What a user writes in a cell, hashed: its type, source (trailing newlines aside) and
    tags. Outputs, execution counts and what a front end adds to its metadata are not edits."""
    tags = cell.get("metadata", {}).get("tags", [])
    text = json.dumps([cell["cell_type"], cell["source"].rstrip("\n"), tags])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _injected(cell) -> bool:
    """papermill's injected-parameters cell belongs to a run, like outputs: it is no edit."""
    return "injected-parameters" in cell.get("metadata", {}).get("tags", [])


def has_outputs(nb) -> bool:
    return any(_injected(c) or c.cell_type == "code" and (
        c.get("outputs") or c.get("execution_count") is not None) for c in nb.cells)


def matched_cells(nb, record: dict[str, str]) -> list[tuple[str | None, Any]]:
    """(the id the build gave it, None for a cell added since; cell) for each cell of `nb`: by
    id (JupyterLab keeps nbformat 4.5 ids), by position where a tool dropped every id."""
    cells = [c for c in nb.cells if not _injected(c)]
    ids = [c.get("id") for c in cells]
    if not set(ids) & set(record) and len(cells) == len(record):
        return list(zip(record, cells, strict=True))
    return [(i if i in record else None, c) for i, c in zip(ids, cells, strict=True)]


def edits(nb, record: dict[str, str], fresh: dict[str, str]) -> list[str]:
    """How `nb`'s cells differ from what a build wrote (`record`: id -> cell_hash, in order),
    a few words each. A cell as this build writes it (`fresh`) is no edit: nothing is lost."""
    matched = matched_cells(nb, record)
    found = [f"cell {n} {'is new' if rid is None else 'changed'}"
             for n, (rid, cell) in enumerate(matched, 1)
             if rid is None or cell_hash(cell) not in (record[rid], fresh.get(rid))]
    present = [rid for rid, _ in matched if rid]
    found += [f"cell {rid} deleted" for rid in record if rid not in present and rid in fresh]
    if present != [rid for rid in record if rid in present]:
        found.append("cells moved")
    return found


def record_of(nb, legacy: Callable[[], str]) -> dict[str, str]:
    """The cells a build wrote into `nb`, from its record; for a notebook rendered before
    records were written, those of `legacy()`, the text the previous renderer wrote."""
    try:
        return dict(line.split() for line in nb.metadata[RECORD]["cells"])
    except (KeyError, TypeError, ValueError, AttributeError):  # none, or not as a build wrote it
        return {c.id: cell_hash(c) for c in nbformat.reads(legacy(), as_version=4).cells}


def notebook_state(path: Path, expected: str, legacy: Callable[[], str]) -> tuple[str, list]:
    """(state, what differs) of the notebook at `path`, whose rendering is now `expected`:
    current; stale (the build's own cells: rewrite it); executed (outputs of a run in place,
    cells current); executed-stale (outputs, cells out of date); edited; unreadable."""
    text = path.read_text(errors="replace")
    if text == expected:
        return "current", []
    try:
        nb = nbformat.reads(text, as_version=4)
    except (ValueError, KeyError, TypeError) as exc:  # a merge conflict, a truncated save
        return "unreadable", [f"not a notebook nbformat can read: {type(exc).__name__}"]
    ran = has_outputs(nb)
    fresh = {c.id: cell_hash(c) for c in nbformat.reads(expected, as_version=4).cells}
    if [cell_hash(c) for c in nb.cells if not _injected(c)] == list(fresh.values()):
        return ("executed" if ran else "stale"), []
    if found := edits(nb, record_of(nb, legacy), fresh):
        return "edited", found + (["outputs of a run"] if ran else [])
    return ("executed-stale" if ran else "stale"), []


def keep_copy(path: Path, kind: str) -> Path:
    """`path` copied beside it as NAME.<kind>.ipynb (NAME.<kind>-2.ipynb, ... when taken; a
    .json file's copy ends in .json)."""
    name, n = path.name.split(".")[0], 1
    dest = path.with_name(f"{name}.{kind}{path.suffix}")
    while dest.exists():
        n += 1
        dest = path.with_name(f"{name}.{kind}-{n}{path.suffix}")
    shutil.copy2(path, dest)
    return dest
