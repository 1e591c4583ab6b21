"""Fake `google.colab.drive`: mounting makes `<mountpoint>/MyDrive`, calls are logged."""

import json
import os
from pathlib import Path

_mounted: list[Path] = []


def _log(call: str, **fields) -> None:
    folder = Path(os.environ.get("TA_FAKE_COLAB_LOG") or Path(_mounted[-1]).parent)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "calls.jsonl", "a") as f:
        f.write(json.dumps({"call": call, **fields}) + "\n")


def mount(mountpoint: str, force_remount: bool = False, timeout_ms: int = 120000,
          readonly: bool = False) -> None:
    if not str(mountpoint).startswith("/"):
        raise ValueError("Mountpoint must be an absolute path.")
    path = Path(mountpoint)
    (path / "MyDrive").mkdir(parents=True, exist_ok=True)
    _mounted.append(path)
    _log("mount", mountpoint=str(path))


def flush_and_unmount(timeout_ms: int = 86400000) -> None:
    """colabtools checks the mount table for a Drive mount and, finding none, prints this and
    returns (google/colab/drive.py). A Drive mounted before this kernel (the FUSE stand-in,
    tests/drive_fuse.py, at TA_COLAB_DRIVE) counts; it is left mounted for the test to
    unmount (a re-run is a later session, with Drive mounted again)."""
    standin = os.environ.get("TA_COLAB_DRIVE")
    if not _mounted and not (standin and os.path.ismount(standin)):
        print("Drive not mounted, so nothing to flush and unmount.")
        return
    _log("flush_and_unmount", mountpoint=str(_mounted.pop() if _mounted else standin))
