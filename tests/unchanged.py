"""What a refused run must leave as it found: every file, byte for byte. One helper for every
refusal in the suite (issue 47):

    before = snapshot(folder)
    ... the run that must be refused ...
    assert_unchanged(before, folder)   # or assert_same(before, after, folder) for two snapshots

`snapshot` records every entry under a folder: a file by the sha256 of its bytes, a folder as
a folder (so a refusal that only creates an empty run folder is caught), a symbolic link by
where it points (not followed: an attached Kaggle input or a linked `lib` is snapshotted where
it lives, if it is to be compared). A folder that does not exist snapshots as empty, so a
refusal that creates it is caught too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

DIR = "folder"


def snapshot(folder: Path) -> dict[str, str]:
    """relative path -> "sha256:<hex>" for a file, "folder" for a folder (`folder` itself
    as "."), "link -> <target>" for a symbolic link; {} when `folder` does not exist."""
    folder = Path(folder)
    found: dict[str, str] = {".": DIR} if folder.is_dir() else {}
    for top, dirs, files in os.walk(folder):  # links to folders land in `dirs`, not followed
        for name in sorted(dirs) + sorted(files):
            path = Path(top) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                found[rel] = f"link -> {os.readlink(path)}"
            elif name in dirs:
                found[rel] = DIR
            else:
                found[rel] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per path that differs, in path order: added, removed or changed."""
    lines = []
    for rel in sorted(before.keys() | after.keys()):
        old, new = before.get(rel), after.get(rel)
        if old == new:
            continue
        what = "added" if old is None else "removed" if new is None else (
            "bytes changed" if old.startswith("sha256:") and new.startswith("sha256:")
            else f"was {old}, now {new}")
        lines.append(f"{rel}: {what}")
    return lines


def assert_same(before: dict[str, str], after: dict[str, str], where: object) -> None:
    """Two snapshots of `where` are equal; else an AssertionError naming the first path that
    differs (and how many more do)."""
    diff = differences(before, after)
    if diff:
        more = f" (and {len(diff) - 1} more: {', '.join(diff[1:4])})" if len(diff) > 1 else ""
        raise AssertionError(f"{where}: {diff[0]}{more}")


def assert_unchanged(before: dict[str, str], folder: Path) -> None:
    """`folder` holds exactly what `before` recorded, every file's bytes the same."""
    assert_same(before, snapshot(folder), folder)
