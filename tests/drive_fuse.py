"""A Drive stand-in: a FUSE passthrough of a folder that answers like Colab's Drive mount.

Colab's Drive is a FUSE mount whose every open, stat and directory listing is a round trip
to Google's servers, and whose reads are capped by the network (sessions.md; colabtools
`drive.py`). A local folder as "Drive" hides that, so the Colab tests mount this instead:
every metadata operation (open, create, getattr/stat, readdir, mkdir, rename, unlink) waits
`latency_s` first, and all reads and writes together are capped at `bandwidth` bytes/s (one
shared budget, however many threads read at once). The kernel is told not to cache names or
attributes (entry_timeout = attr_timeout = 0), so each stat really reaches this file system.
statfs reports Drive's free quota: 15 GB less what the folder holds (sessions.md).

Defaults, from published Colab measurements (they vary by region and load; the tests set
their own values where a number matters):
- latency 20 ms per operation: colabtools#280 measured ~50 kB/s copying thousands of ~20 kB
  files from the mount (~0.4 s a file, cold); colabtools#1691 saw the same loader go from
  300 samples/s to 1 sample/s (3 ms to 1 s a file); colabtools#1076 reports reads that are
  slow the first time and fast once cached. 20 ms is a mid value: a small file costs tens of
  ms, as the "copy one archive to /content" advice (sessions.md, sharkovsky 2020-09) implies.
- bandwidth 32 MB/s: googlecolab/backend-container#1 timed a 249 MB Drive file at 129 s
  (1.9 MB/s) through the API, and 7.5 s (33 MB/s) once fixed.

Run `python -m tests.drive_fuse ROOT MOUNTPOINT [--latency-ms N] [--bandwidth-mbs N]`
(foreground; stops on SIGTERM or `fusermount3 -u MOUNTPOINT`). `mounted(...)` runs it in a
subprocess and unmounts whatever happens; the `drive` fixture gives a mounted temp folder.
Needs Debian's fuse3 (`make fuse`) and PyPI's mfusepy (the dev extra).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

LATENCY_S = 0.020
BANDWIDTH = 32e6  # bytes/s
QUOTA = 15 * 10**9  # Drive's free quota (sessions.md)
FIX = "install Debian's fuse3 (`make fuse`, or apt-get install fuse3) and mfusepy (pip)"


def _operations(root: str, latency_s: float, bandwidth: float, quota: int):
    import mfusepy as fuse

    class Drive(fuse.Operations):
        use_ns = True

        def __init__(self):
            self.root = os.path.realpath(root)
            self.budget_lock = threading.Lock()
            self.busy_until = 0.0

        def _full(self, path: str) -> str:
            return os.path.join(self.root, path.lstrip("/"))

        @staticmethod
        def _round_trip() -> None:
            if latency_s:
                time.sleep(latency_s)

        def _transfer(self, n: int) -> None:
            """Wait for `n` bytes' share of the one bandwidth budget."""
            if not bandwidth or not n:
                return
            with self.budget_lock:
                start = max(time.monotonic(), self.busy_until)
                self.busy_until = start + n / bandwidth
                wait = self.busy_until - time.monotonic()
            if wait > 0:
                time.sleep(wait)

        def getattr(self, path, fh=None):
            self._round_trip()
            try:
                st = os.lstat(self._full(path))
            except OSError as exc:
                raise fuse.FuseOSError(exc.errno) from None
            keys = ("st_atime_ns", "st_ctime_ns", "st_gid", "st_mode", "st_mtime_ns",
                    "st_nlink", "st_size", "st_uid")
            attrs = {k: getattr(st, k) for k in keys}
            for k in ("st_atime", "st_ctime", "st_mtime"):
                attrs[k] = attrs.pop(f"{k}_ns")
            return attrs

        def readdir(self, path, fh):
            self._round_trip()
            return [".", "..", *os.listdir(self._full(path))]

        def access(self, path, amode):
            if not os.access(self._full(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        def open(self, path, flags):
            self._round_trip()
            return os.open(self._full(path), flags)

        def create(self, path, mode, fi=None):
            self._round_trip()
            return os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path, size, offset, fh):
            data = os.pread(fh, size, offset)
            self._transfer(len(data))
            return data

        def write(self, path, data, offset, fh):
            self._transfer(len(data))
            return os.pwrite(fh, data, offset)

        def truncate(self, path, length, fh=None):
            with open(self._full(path), "r+b") as f:
                f.truncate(length)
            return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            os.close(fh)
            return 0

        def fsync(self, path, datasync, fh):
            os.fsync(fh)
            return 0

        def _meta(self, func, *paths, **kw):
            self._round_trip()
            try:
                func(*(self._full(p) for p in paths), **kw)
            except OSError as exc:
                raise fuse.FuseOSError(exc.errno) from None
            return 0

        def mkdir(self, path, mode):
            return self._meta(os.mkdir, path, mode=mode)

        def rmdir(self, path):
            return self._meta(os.rmdir, path)

        def unlink(self, path):
            return self._meta(os.unlink, path)

        def rename(self, old, new):
            return self._meta(os.replace, old, new)

        def chmod(self, path, mode):
            return self._meta(os.chmod, path, mode=mode)

        def chown(self, path, uid, gid):
            return 0

        def utimens(self, path, times=None):
            return self._meta(os.utime, path, ns=times)

        def statfs(self, path):
            used = sum(f.stat().st_size for f in Path(self.root).rglob("*") if f.is_file())
            block = 4096
            free = max(quota - used, 0) // block
            return {"f_bsize": block, "f_frsize": block, "f_blocks": quota // block,
                    "f_bfree": free, "f_bavail": free, "f_namemax": 255}

    return Drive()


@dataclass
class Mounted:
    root: Path  # the backing folder (as fast as local disk)
    path: Path  # the mount point: "Drive"
    latency_s: float
    bandwidth: float


@contextlib.contextmanager
def mounted(root: Path, mountpoint: Path, latency_s: float = LATENCY_S,
            bandwidth: float = BANDWIDTH, quota: int = QUOTA, timeout: float = 20.0):
    """Mount `root` at `mountpoint` in a subprocess; unmount (and stop it) however the
    block ends. Raises RuntimeError, one line with the fix, when it cannot mount."""
    root, mountpoint = Path(root), Path(mountpoint)
    root.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tests.drive_fuse", str(root), str(mountpoint),
           "--latency-ms", str(latency_s * 1e3), "--bandwidth-mbs", str(bandwidth / 1e6),
           "--quota", str(quota)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    # its log goes to a file: a pipe nobody reads would fill and stall every operation
    log = mountpoint.with_name(f".{mountpoint.name}.fuse.log")
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                err = log.read_text() if proc.poll() is not None else "timed out"
                raise RuntimeError(f"the Drive stand-in did not mount at {mountpoint} "
                                   f"({' '.join(err.split())[-300:]}); {FIX}")
            time.sleep(0.05)
        yield Mounted(root, mountpoint, latency_s, bandwidth)
    finally:
        if os.path.ismount(mountpoint):
            tool = shutil.which("fusermount3") or shutil.which("fusermount") or "umount"
            subprocess.run([tool, "-u", "-z", str(mountpoint)] if "fusermount" in tool
                           else [tool, "-l", str(mountpoint)], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def drive(tmp_path):
    """A Drive stand-in with the default latency and cap: `drive.path` is the mount."""
    with mounted(tmp_path / "drive-backing", tmp_path / "drive") as m:
        yield m


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("mountpoint")
    parser.add_argument("--latency-ms", type=float, default=LATENCY_S * 1e3)
    parser.add_argument("--bandwidth-mbs", type=float, default=BANDWIDTH / 1e6)
    parser.add_argument("--quota", type=int, default=QUOTA)
    args = parser.parse_args(argv)
    import mfusepy as fuse

    ops = _operations(args.root, args.latency_ms / 1e3, args.bandwidth_mbs * 1e6, args.quota)
    fuse.FUSE(ops, args.mountpoint, foreground=True, nothreads=False,
              entry_timeout=0, attr_timeout=0, negative_timeout=0)


if __name__ == "__main__":
    main()
