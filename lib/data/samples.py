"""Which generator wrote an offline sample: a marker file beside it names the version.

Each writer checks `is_current` before trusting what is on disk and calls `mark` once the
sample is complete. A sample from an older generator (no marker, or another version's) is
written again, never silently reused: a user keeps DATA_DIR/sample across updates.
"""

from __future__ import annotations

from pathlib import Path

from lib.base import atomic

NOTE = "synthetic sample"  # beside every number computed from a sample (rows, tables, titles)
# Bump a dataset family's version whenever its generator changes what it writes.
VERSIONS = {"fashion": 2, "cifar": 2, "events": 2, "irstd": 2}


def marker(family: str) -> str:
    """The marker file name of `family`'s current generator, e.g. `.synthetic-sample-v2`."""
    return f".synthetic-sample-v{VERSIONS[family]}"


def is_current(folder: Path, family: str, files=()) -> bool:
    """True when `folder` holds `family`'s marker of the current version and every `files`."""
    folder = Path(folder)
    return (folder / marker(family)).exists() and all((folder / f).exists() for f in files)


def mark(folder: Path, family: str) -> None:
    """Record that `folder` now holds a complete sample of `family`'s current generator."""
    atomic.write_bytes(Path(folder) / marker(family), f"synthetic {family} sample\n".encode())
