"""Files written whole or not at all: a temporary name in the same folder, fsync, rename.

A kill (a lost Colab runtime) at any moment leaves either the old file or the new one, never a
cut one that a later run would trust. Readers sharing the folder (parallel papermill runs)
never see half a file either: each writer has its own temporary name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes(path: Path, data: bytes) -> Path:
    """Replace `path` by `data` atomically (its folder is created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; outputs are for whoever shares them
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: Path, text: str) -> Path:
    """`write_bytes` of UTF-8 text (newlines kept as given)."""
    return write_bytes(path, text.encode("utf-8"))
