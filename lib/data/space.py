"""Space before work: a download, an unpack or a cache build checks the target's free space
first, and stops with one line (both numbers and the fix) before it writes anything.

On Colab, Drive's free quota is 15 GB (research.google.com/colaboratory/faq; sessions.md):
CIFAR10-DVS's archive (~7 GB unpacked again) and its frame cache do not fit there, which the
user learns hours in unless the numbers are compared first. `shutil.disk_usage` on a Drive
FUSE mount reports the account's quota as the mount's size, so the same check covers it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lib.errors import UserError

MARGIN = 256 * 2**20  # left free beyond the estimate: logs, checkpoints, the OS


class NoSpace(UserError, OSError):
    """The target folder's disk cannot hold what is about to be written there."""


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _existing(path: Path) -> Path:
    """`path` or its nearest existing parent (the folder may not be created yet)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(_existing(path)).free


def require(path: Path, need: int, what: str, margin: int = MARGIN) -> None:
    """Raise NoSpace (one line) unless `path`'s disk has `need` + `margin` bytes free."""
    free = free_bytes(path)
    if need + margin > free:
        raise NoSpace(
            f"{what} needs {_gb(need)} at {str(path)!r} but its disk has {_gb(free)} free; "
            "free space there, or point DATA_DIR (or the cache) at a disk with more room "
            "(on Colab the VM's local disk, e.g. /content, not Drive's 15 GB).")


def tree_bytes(folder: Path) -> int:
    """Bytes of every file under `folder`."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
