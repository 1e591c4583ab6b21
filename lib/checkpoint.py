"""Checkpoints that survive a disconnect: atomic writes, newest-loadable resume.

Files are `ckpt-e<epoch>-b<batch>.pt` (position = epochs done, batches done in the next)
plus `best.pt`. A write goes to a temp file, is fsynced, then renamed, so a kill at any
moment leaves either the old or the new file, never half of one. Loading uses
`weights_only=True, map_location="cpu"`: a run started on a GPU or TPU resumes anywhere.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import torch

from lib import atomic
from lib.errors import CheckpointError

FORMAT = 1
_NAME = re.compile(r"^ckpt-e(\d+)-b(\d+)\.pt$")


class CheckpointMismatch(CheckpointError):
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


def atomic_save(obj, path: Path) -> bytes:
    """torch.save to `path` so that a crash leaves the old file or the new one, whole; the
    bytes written are returned (best.pt is the same bytes)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    atomic.write_bytes(Path(path), data, sync_dir=True, failpoint="checkpoint.write")
    return data


def reason(exc: BaseException) -> str:
    """Why a file did not load, whole, in words a user can act on. torch's weights-only
    refusal advises `weights_only=False` (running the file's code): never pass that on."""
    text = " ".join(str(exc).split())
    if "weights_only" in text or "Weights only load failed" in text:
        detail = re.search(r"WeightsUnpickler error:\s*(.*?)\s*(Check the documentation|$)",
                           text)
        what = detail.group(1).rstrip(".") if detail and detail.group(1) else "unknown content"
        return (f"{type(exc).__name__}: not a checkpoint this project wrote ({what}); only "
                "tensors and plain values are read, never code from a file")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Checkpoints:
    """The checkpoints of one run folder, for one workload and model configuration."""

    def __init__(self, directory: Path, workload: str, model_config: dict, keep: int = 2,
                 log=print) -> None:
        self.dir = Path(directory)
        self.workload = workload
        self.model_config = model_config
        self.keep = keep
        self.log = log

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
        data = atomic_save(state, path)
        if best:
            atomic.write_bytes(self.best_path, data, sync_dir=True)
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

    @property
    def best_path(self) -> Path:
        return self.dir / "best.pt"

    def load(self, path: Path):
        return torch.load(path, map_location="cpu", weights_only=True)

    def latest(self) -> dict | None:
        """The newest checkpoint that loads and fits, or None. Bad files are skipped, loudly,
        and when none is left that is said too."""
        if self.dir.is_dir():  # half-written temp files of a killed run
            for tmp in self.dir.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
        paths = self.paths()
        for path in paths:
            try:
                state = self.load(path)
            except Exception as exc:  # a cut file, wrong bytes, a foreign pickle: never fatal
                self.log(f"checkpoint {path} is unreadable ({reason(exc)}); trying an older one")
                continue
            why = self._check(state, path)
            if why is None:
                state["path"] = str(path)
                return state
            self.log(f"checkpoint {path} skipped: {why}")
        if paths:
            self.log(f"no loadable checkpoint in {self.dir} ({len(paths)} unusable): "
                     "starting from epoch 1")
        return None

    def best(self) -> dict:
        """best.pt, or (saying why) the newest loadable checkpoint when best.pt is unusable;
        one CheckpointError naming the file and the fix when there is neither."""
        try:
            state = self.load(self.best_path)
            why = self._check(state, self.best_path)
            if why is None:
                state["path"] = str(self.best_path)
                return state
        except FileNotFoundError:
            why = "it does not exist"
        except CheckpointError:
            raise
        except Exception as exc:
            why = reason(exc)
        state = self.latest()
        if state is None:
            raise CheckpointError(
                f"{self.best_path} cannot be used ({why}) and {self.dir} holds no other "
                "loadable checkpoint. Re-run the training cell (it saves best.pt), or set "
                "OUT_DIR to the folder of a finished run.")
        self.log(f"{self.best_path} cannot be used ({why}); using the newest loadable "
                 f"checkpoint instead, {state['path']} (epoch {state['position'][0]})")
        return state
