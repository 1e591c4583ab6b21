"""Checkpoints that survive a disconnect: atomic writes, newest-loadable resume.

Files are `ckpt-e<epoch>-b<batch>.pt` (position = epochs done, batches done in the next)
plus `best.pt`, each with a completion marker `<name>.done` (size and SHA-256, written after
the file: `lib.base.durable`). A write goes to a temp file, is fsynced, then renamed, so a kill at
any moment leaves either the old or the new file, never half of one. Where the run folder is
on a mount that syncs in the background (Colab's Drive), each file is written on scratch
first and copied to the folder whole, marker last (`lib.base.durable` says why). A checkpoint
without a matching marker is a copy that did not finish and is skipped, unless it is older
than every marked one (written before markers existed: read as before). Loading uses
`weights_only=True, map_location="cpu"`: a run started on a GPU or TPU resumes anywhere.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import torch

from lib.base import atomic, durable
from lib.base.errors import CheckpointError

FORMAT = 1
_NAME = re.compile(r"^ckpt-e(\d+)-b(\d+)\.pt$")


class CheckpointMismatch(CheckpointError):
    """The checkpoint in OUT_DIR belongs to a differently configured model."""


class IncompleteCopy(Exception):
    """A checkpoint whose copy to the run folder did not finish (its marker says so)."""


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
                 log=print, stage: Path | None = None) -> None:
        self.dir = Path(directory)
        self.workload = workload
        self.model_config = model_config
        self.keep = keep
        self.log = log
        self.stage = Path(stage) if stage else None  # scratch folder files are written in first

    def paths(self) -> list[Path]:
        """Position checkpoints, newest first."""
        if not self.dir.is_dir():
            return []
        found = [(tuple(map(int, m.groups())), p) for p in self.dir.iterdir()
                 if (m := _NAME.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def save(self, state: dict, epoch: int, batch: int, best: bool = False) -> Path:
        """Write the state at position (epoch, batch); keep the newest `keep`; copy to best.
        The checkpoint's marker is written last (after best.pt's): a marked checkpoint has
        its best.pt complete too."""
        self.dir.mkdir(parents=True, exist_ok=True)
        state = to_cpu(dict(state, format=FORMAT, workload=self.workload,
                            model_config=self.model_config, position=[epoch, batch]))
        path = self.dir / f"ckpt-e{epoch:04d}-b{batch:06d}.pt"
        if self.stage is None:
            data = atomic_save(state, path)
            if best:
                atomic.write_bytes(self.best_path, data, sync_dir=True)
                durable.mark(self.best_path, data)
            durable.mark(path, data)
        elif not self._publish(state, path, best):
            return path
        self._prune()
        return path

    def _prune(self) -> None:
        """Keep the newest `keep` complete checkpoints; remove older ones and copies that
        did not finish (unmarked, above the newest marked one)."""
        paths = self.paths()
        checked = self._must_be_marked(paths)
        complete = [p for p in paths if p not in checked or durable.marker_path(p).exists()]
        for old in [p for p in paths if p not in complete] + complete[self.keep:]:
            durable.remove(old)

    def _publish(self, state: dict, path: Path, best: bool) -> bool:
        """Write on scratch, copy to the run folder (and to best.pt), markers last; True when
        it reached the folder. A failed copy (Drive full, a transport error) is one line and
        training goes on: the next save tries again."""
        staged = self.stage / path.name
        atomic_save(state, staged)
        try:
            size, digest = durable.copy_checked(staged, path, failpoint="checkpoint.publish")
            if best:
                durable.publish(staged, self.best_path)
            durable.write_marker(path, size, digest)
        except OSError as exc:
            self.log(f"WARNING: checkpoint {path.name} was saved on this VM's disk ({staged}) "
                     f"but copying it to {self.dir} failed ({exc.strerror or exc}); training "
                     "goes on and the next save tries again. Free space there if it is full.")
            return False
        for done in self.stage.glob("ckpt-*.pt"):  # this one and any the copy failed for
            done.unlink(missing_ok=True)
        return True

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

    def load(self, path: Path, marked: bool = False):
        """The state in `path`; `marked`: only if its completion marker matches (else a
        CheckpointError saying why)."""
        data = Path(path).read_bytes()
        if marked and (why := durable.check(path, data)):
            raise IncompleteCopy(why)
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)

    def _must_be_marked(self, paths: list[Path]) -> set[Path]:
        """The checkpoints (`paths`: newest first) that need a matching marker: those at or
        above the oldest marked one (below it: files written before markers existed)."""
        marked = [i for i, p in enumerate(paths) if durable.marker_path(p).exists()]
        return set(paths[: marked[-1] + 1]) if marked else set()

    def latest(self) -> dict | None:
        """The newest checkpoint that loads and fits, or None. Bad files are skipped, loudly,
        and when none is left that is said too."""
        for folder in (self.dir, self.stage):  # half-written temp files of a killed run
            for tmp in folder.glob(".*.tmp") if folder and folder.is_dir() else ():
                tmp.unlink(missing_ok=True)
        paths = self.paths()
        checked = self._must_be_marked(paths)
        for path in paths:
            try:
                state = self.load(path, marked=path in checked)
            except IncompleteCopy as exc:
                self.log(f"checkpoint {path} is not a complete copy ({exc}); trying an older "
                         "one")
                continue
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
            # unmarked: written before markers existed, or its copy cut (then it rarely loads)
            state = self.load(self.best_path,
                              marked=durable.marker_path(self.best_path).exists())
            why = self._check(state, self.best_path)
            if why is None:
                state["path"] = str(self.best_path)
                return state
        except FileNotFoundError:
            why = "it does not exist"
        except CheckpointError:
            raise
        except IncompleteCopy as exc:
            why = f"not a complete copy: {exc}"
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
