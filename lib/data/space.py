"""Space before work: a download, an unpack or a cache build checks the target's free space
first, and stops with one line (both numbers and the fix) before it writes anything.

On Colab, Drive's free quota is 15 GB (research.google.com/colaboratory/faq; sessions.md):
CIFAR10-DVS's archive (~7 GB unpacked again) and its frame cache do not fit there, which the
user learns hours in unless the numbers are compared first. `shutil.disk_usage` on a Drive
FUSE mount reports the account's quota as the mount's size, so the same check covers it.

On SageMaker Studio Lab the persistent home is a 15 GB quota that conda environments and pip
installs share (lib/runtime/clouds.py): there the room is the quota less what the home holds, or the
disk's free space if smaller, and the line says so with Studio Lab's fix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lib.base.errors import UserError
from lib.runtime import clouds

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


def used_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` as a quota counts them: each file once (conda
    hard-links its package cache into environments), symbolic links not followed."""
    seen, total, stack = set(), 0, [Path(folder)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:  # vanished or unreadable: not ours to count
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_size
            except OSError:
                continue
    return total


def room(path: Path) -> tuple[int, clouds.Quota | None, int]:
    """(free bytes at `path`, the service quota that limits it or None, bytes it has used)."""
    free = shutil.disk_usage(_existing(path)).free
    quota = clouds.quota(path)
    if quota is None:
        return free, None, 0
    used = used_bytes(quota.root)
    left = max(quota.limit - used, 0)
    return (left, quota, used) if left < free else (free, None, 0)


def free_bytes(path: Path) -> int:
    return room(path)[0]


def require(path: Path, need: int, what: str, margin: int = MARGIN) -> None:
    """Raise NoSpace (one line) unless `path` has `need` + `margin` bytes free: on its disk,
    and within the service's quota where one applies (Studio Lab)."""
    free, quota, used = room(path)
    if need + margin > free and quota is not None:
        raise NoSpace(
            f"{what} needs {_gb(need)} at {str(path)!r} but {quota.name} has {_gb(free)} free "
            f"({_gb(used)} of {_gb(quota.limit)} used under {quota.root}); {quota.fix}.")
    if need + margin > free:
        raise NoSpace(
            f"{what} needs {_gb(need)} at {str(path)!r} but its disk has {_gb(free)} free; "
            "free space there, or point DATA_DIR (or the cache) at a disk with more room "
            "(on Colab the VM's local disk, e.g. /content, not Drive's 15 GB).")


def tree_bytes(folder: Path) -> int:
    """Bytes of every file under `folder`."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
