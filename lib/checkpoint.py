"""Checkpoints that survive a disconnect: atomic writes, newest-loadable resume.

Files are `ckpt-e<epoch>-b<batch>.pt` (position = epochs done, batches done in the next)
plus `best.pt`. A write goes to a temp file, is fsynced, then renamed, so a kill at any
moment leaves either the old or the new file, never half of one. Loading uses
`weights_only=True, map_location="cpu"`: a run started on a GPU or TPU resumes anywhere.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from lib import faults

FORMAT = 1
_NAME = re.compile(r"^ckpt-e(\d+)-b(\d+)\.pt$")


class CheckpointMismatch(ValueError):
    """The checkpoint in OUT_DIR belongs to a differently configured model."""


def to_cpu(obj):
    """Deep-copy tensors to the CPU (XLA/CUDA tensors saved as-is reload only there)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu")
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def _fsync_dir(directory: Path) -> None:
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


def atomic_save(obj, path: Path) -> None:
    """torch.save to `path` so that a crash leaves the old file or the new one, whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getbuffer()
    with open(tmp, "wb") as f:
        f.write(data[: len(data) // 2])
        faults.point("checkpoint.write")
        f.write(data[len(data) // 2 :])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


class Checkpoints:
    """The checkpoints of one run folder, for one workload and model configuration."""

    def __init__(self, directory: Path, workload: str, model_config: dict, keep: int = 2,
                 after_write: Callable[[Path], None] | None = None, log=print) -> None:
        self.dir = Path(directory)
        self.workload = workload
        self.model_config = model_config
        self.keep = keep
        self.after_write = after_write or (lambda path: None)
        self.log = log
        self.loaded: Path | None = None  # the file `latest` returned

    def paths(self) -> list[Path]:
        """Position checkpoints, newest first."""
        if not self.dir.is_dir():
            return []
        found = [(tuple(map(int, m.groups())), p) for p in self.dir.iterdir()
                 if (m := _NAME.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def save(self, state: dict, epoch: int, batch: int, best: bool = False) -> Path:
        """Write the state at position (epoch, batch); keep the newest `keep`; copy to best."""
        self.dir.mkdir(parents=True, exist_ok=True)
        state = to_cpu(dict(state, format=FORMAT, workload=self.workload,
                            model_config=self.model_config, position=[epoch, batch]))
        path = self.dir / f"ckpt-e{epoch:04d}-b{batch:06d}.pt"
        atomic_save(state, path)
        self.after_write(path)
        if best:
            tmp = self.dir / ".best.pt.tmp"
            shutil.copyfile(path, tmp)
            os.replace(tmp, self.dir / "best.pt")
            self.after_write(self.dir / "best.pt")
        for old in self.paths()[self.keep:]:
            old.unlink(missing_ok=True)
        return path

    def _check(self, state, path: Path) -> str | None:
        """Why `state` cannot be resumed from (None if it can); raises on a config mismatch."""
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            return "not a checkpoint of this project"
        if state.get("workload") != self.workload:
            return f"a {state.get('workload')!r} checkpoint, not {self.workload!r}"
        if state.get("model_config") != self.model_config:
            raise CheckpointMismatch(
                f"{path} was trained with model config {state.get('model_config')}, but this "
                f"run asks for {self.model_config}. Set OUT_DIR to a new folder to start a new "
                "run, or restore the parameters the checkpoint was made with to resume it."
            )
        return None

    def load(self, path: Path):
        return torch.load(path, map_location="cpu", weights_only=True)

    def latest(self) -> dict | None:
        """The newest checkpoint that loads and fits, or None. Bad files are skipped, loudly."""
        if self.dir.is_dir():  # half-written temp files of a killed run
            for tmp in self.dir.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
        for path in self.paths():
            try:
                state = self.load(path)
            except Exception as exc:  # a cut file, wrong bytes, a foreign pickle: never fatal
                self.log(f"checkpoint {path.name} is unreadable ({_reason(exc)}); trying an "
                         "older one")
                continue
            why = self._check(state, path)
            if why is None:
                self.loaded = path  # which file, for the "resumed from" line
                return state
            self.log(f"checkpoint {path.name} skipped: {why}")
        return None
