"""Files copied whole to durable storage, each with a completion marker written after it.

On Colab the run folder is on Drive, a FUSE mount served by DriveFS: writes land in the VM's
cache and DriveFS pushes them to Google in the background (`drive` started with
`max_parallel_push_task_instances:10`, colabtools `google/colab/drive.py: _mount`). The only
documented push is `drive.flush_and_unmount()`, which runs `drive --push_changes_and_quit`
(same file; the Colab team in googlecolab/colabtools#659). Nothing there pushes one file
earlier, and neither fsync nor rename is documented to; a file rewritten often can go unpushed
for long (colabtools#287; #2607: a 3 GB appended file showed 0 bytes on Drive for 30 minutes
while 40 MB checkpoints arrived). So what a disconnect leaves on Drive is whatever DriveFS
had pushed: possibly a file without its bytes, or a rename without its content.

Hence: a checkpoint is written whole on scratch (the VM's disk), then copied in one sequential
pass to a new name on Drive (a temporary name, fsync, rename), then `<name>.done` is written:
its size and SHA-256. A later session takes the file only when the marker is there and the
bytes match it, so a half-pushed checkpoint, or a marker that arrived before its file, is
never taken as complete. Elsewhere the same marker is written beside the file (no copy).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from lib.base import atomic, faults

MARKER = ".done"  # `ckpt-e0001-b000000.pt.done` beside `ckpt-e0001-b000000.pt`


def marker_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + MARKER)


def write_marker(path: Path, size: int, digest: str) -> Path:
    """Record that `path` is complete: its size and SHA-256 (written after the file)."""
    text = json.dumps({"size": size, "sha256": digest}) + "\n"
    return atomic.write_bytes(marker_path(path), text.encode(), sync_dir=True)


def mark(path: Path, data: bytes) -> Path:
    """`write_marker` for a file whose bytes are `data`."""
    return write_marker(path, len(data), hashlib.sha256(data).hexdigest())


def check(path: Path, data: bytes) -> str | None:
    """Why `data`, read from `path`, is not the complete file its marker records (None: it
    is)."""
    try:
        marker = json.loads(marker_path(path).read_text())
    except FileNotFoundError:
        return "no completion marker beside it (its copy did not finish)"
    except (OSError, ValueError) as exc:
        return f"its completion marker is unreadable ({type(exc).__name__})"
    if marker.get("size") != len(data) or marker.get("sha256") != hashlib.sha256(data).hexdigest():
        return (f"{len(data)} bytes that differ from its completion marker's "
                f"{marker.get('size')} (a partial copy)")
    return None


def copy_checked(src: Path, dst: Path, size: int | None = None, digest: str | None = None,
                 chunk: int = 16 * 2**20, failpoint: str | None = None) -> tuple[int, str]:
    """Copy `src` to `dst` in one sequential pass, hashing as it goes: to a temporary name
    beside `dst`, fsynced, renamed (and the folder synced) only when the size and SHA-256
    match the expected ones, if given; returns (size, sha256). `failpoint`: a `lib.base.faults`
    point reached half-way (kill tests)."""
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
    h, n, total = hashlib.sha256(), 0, src.stat().st_size
    sizes = iter([max(1, min(chunk, total // 2))])  # the first block ends half-way at most
    try:
        with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            while block := fin.read(next(sizes, chunk)):
                h.update(block)
                fout.write(block)
                if failpoint and n == 0 and len(block) < total:
                    fout.flush()  # half of the file really written when the kill comes
                    faults.point(failpoint)
                n += len(block)
            fout.flush()
            os.fsync(fout.fileno())
        if (size is not None and n != size) or (digest is not None and h.hexdigest() != digest):
            raise OSError(f"{src} does not match its manifest ({n} bytes, expected {size}, "
                          "or a different checksum): delete it to prepare it again.")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    atomic.fsync_dir(dst.parent)
    return n, h.hexdigest()


def publish(src: Path, dst: Path) -> Path:
    """Copy the complete file `src` (on scratch) to `dst` (durable), then its marker."""
    size, digest = copy_checked(src, dst)
    write_marker(dst, size, digest)
    return dst


def remove(path: Path) -> None:
    """Delete `path` and its marker."""
    marker_path(path).unlink(missing_ok=True)
    Path(path).unlink(missing_ok=True)
