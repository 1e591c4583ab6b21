"""Files written whole or not at all: a temporary name in the same folder, fsync, rename.

A kill (a lost Colab runtime) at any moment leaves either the old file or the new one, never a
cut one that a later run would trust. Readers sharing the folder (parallel papermill runs)
never see half a file either: each writer has its own temporary name. This is the one way the
project writes a file it keeps (checkpoints, metrics, results, samples, config).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lib.base import faults


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (Drive's FUSE mount and most filesystems need the folder synced)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems (and Windows) cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes, *, sync_dir: bool = False,
                failpoint: str | None = None) -> Path:
    """Replace `path` by `data` atomically (its folder is created); return the path.

    `sync_dir` also syncs the folder, so the rename itself survives a crash (checkpoints);
    `failpoint` names a `lib.base.faults` point reached half-way through the write (kill tests).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; outputs are for whoever shares them
        with os.fdopen(fd, "wb") as f:
            view = memoryview(data)
            f.write(view[: len(view) // 2])
            if failpoint:
                faults.point(failpoint)
            f.write(view[len(view) // 2:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)
    return path


def write_text(path: Path, text: str) -> Path:
    """`write_bytes` of UTF-8 text (newlines kept as given)."""
    return write_bytes(path, text.encode("utf-8"))
