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
    if not _mounted:
        raise ValueError("Drive not mounted, so nothing to flush and unmount.")
    _log("flush_and_unmount", mountpoint=str(_mounted.pop()))
