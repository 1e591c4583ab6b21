"""One run folder: config, checkpoints, metrics.jsonl, trackers, progress and ETA.

Layout of `out_dir`: `config.json` and `sessions.jsonl` (`lib.runs.identity`), `checkpoints/`,
`metrics.jsonl` (one record per epoch, rewritten from the checkpoint's history on resume so no
epoch is duplicated or missing), what the trackers keep (`lib.runs.trackers`: `tb/`, `wandb/`,
`mlflow.db`, their run ids in `trackers.json`), and whatever plots the notebook saves. Each
session's row of sessions.jsonl says what it ran on (`lib.runtime.environment`) and, updated
after each epoch, how fast it trained. Only the main rank writes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from lib.base import atomic, faults
from lib.base import progress as progress_mod
from lib.base.errors import OutDirError
from lib.runs import identity as experiment
from lib.runs.checkpoints import Checkpoints
from lib.runs.records import write_jsonl
from lib.runs.trackers import Trackers
from lib.runtime import environment
from lib.runtime.clock import Clock
from lib.runtime.platforms import Storage, staging, storage

STOPPED = "STOPPED.json"  # the run stopped before a session limit and is not finished


def check_writable(out_dir: Path) -> Path:
    """Create `out_dir` or fail with one message saying what is wrong and what to do."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutDirError(f"OUT_DIR {str(out_dir)!r} is a file, not a folder; set OUT_DIR "
                         "to a folder path (it is created if missing).")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise OutDirError(f"OUT_DIR {str(out_dir)!r} is not writable ({exc.strerror}); set "
                         "OUT_DIR to a folder you can write to.") from None
    return out_dir


class RunFolder:
    """The outputs of one training run, written by the main rank only."""

    def __init__(self, out_dir: Path, workload: str, model_config: dict,
                 session_hours: float | None = None, main: bool = True,
                 tensorboard: bool = True, progress: bool = True,
                 session: dict | None = None, note: str | None = None,
                 clock: Clock | None = None, storage: Storage | None = None,
                 trackers: Sequence[str] | None = None) -> None:
        self.dir = check_writable(out_dir) if main else Path(out_dir)
        self.main = main
        # The session's clock (lib.runtime.clock); `session_hours` alone: a limit from now.
        self.clock = clock or Clock(time.time(), session_hours)
        self.storage = storage or _local()
        self.stopped = False  # True when training stopped itself before the session limit
        self.cap_warned = False
        self.note = note  # shown after each epoch's numbers, e.g. "synthetic sample"
        self.metrics_path = self.dir / "metrics.jsonl"
        self.checkpoints = Checkpoints(self.dir / "checkpoints", workload, model_config,
                                       log=self.log, stage=staging(self.storage, self.dir))
        self._progress_enabled = progress
        # TRACKERS; without it, TensorBoard unless `tensorboard` is False
        names = trackers if trackers is not None else (["tensorboard"] if tensorboard else [])
        self.trackers = Trackers(names, self.dir, say=self.log)
        self._saved_ids: dict | None = None  # the tracker ids the resumed checkpoint kept
        self._row: tuple[int, dict] | None = None  # this session's row of sessions.jsonl
        self.history: list[dict] = []
        self.eta_warned = False
        self.session = session  # what this session trains with, for sessions.jsonl
        self._lines = progress_mod.Lines()  # one output in a notebook, however many epochs
        # `lib.runs.compile_cache`'s InductorCache or XlaCache: saved with each checkpoint
        self.compile_cache = None
        self._cache_failed = False

    def log(self, message: str) -> None:
        if self.main:
            self._lines.write(message)

    def record_session(self, start_epoch: int = 0) -> None:
        """This session trains here from epoch `start_epoch` + 1: say with what in
        sessions.jsonl (lib.runs.identity), what it runs on (one line when torch or the image
        changed since the run's previous session), and open the trackers."""
        if not self.main:
            return
        facts = {"from_epoch": start_epoch + 1, "started_at": _iso(self.clock.started_at)}
        if self.session is not None:
            row = dict(self.session, **facts, **environment.facts(self.session.get("device")))
            experiment.append_session(self.dir, row)
            rows = experiment.read_sessions(self.dir)
            self._row = (len(rows) - 1, row)
            if len(rows) > 1 and (line := environment.drift(rows[-2], row)):
                self.log(line)
        self.trackers.start(self.history, self._facts(facts), self._saved_ids)

    def _facts(self, facts: dict) -> dict:
        """What the trackers say of this run and session (lib.runs.trackers)."""
        rows = experiment.read_sessions(self.dir)
        config = experiment.read_config(self.dir) or {}
        platforms = [r["platform"] for r in rows if r.get("platform")]
        return {**{k: (self.session or {}).get(k) for k in ("platform", "device", "precision")},
                **facts, "workload": self.checkpoints.workload, "run": self.dir.name,
                "experiment": config.get("experiment", {}), "session": max(len(rows), 1),
                "platforms": sorted(set(platforms), key=platforms.index)}

    def _speed(self) -> None:
        """This session's row, brought up to date after an epoch: when it last trained, its
        epochs, seconds per epoch (torch.compile's once-off time left out) and samples/s."""
        if self._row is None:
            return
        index, row = self._row
        mine = [r for r in self.history if r["epoch"] >= row["from_epoch"]]
        train_s = sum(r.get("train_samples", 0) / r["samples_per_s"] for r in mine
                      if r.get("samples_per_s"))
        row.update(ended_at=_iso(time.time()), epochs_trained=len(mine),
                   seconds_per_epoch=round(sum(r.get("seconds", 0.0) - r.get(
                       "compile_seconds", 0.0) for r in mine) / max(len(mine), 1), 3),
                   samples_per_s=round(sum(r.get("train_samples", 0) for r in mine)
                                       / train_s, 1) if train_s else None)
        self._write_row()

    def update_session(self, fields: dict) -> None:
        """Change this session's row of sessions.jsonl (after `record_session`), e.g. the
        micro-batch an out-of-memory error made it settle on (lib.training.batch)."""
        if self._row is not None:
            self._row[1].update(fields)
            self._write_row()

    def _write_row(self) -> None:
        """This session's row, as it now is, in place of the one it appended."""
        index, row = self._row
        rows = experiment.read_sessions(self.dir)
        if index < len(rows) and rows[index].get("started_at") == row["started_at"]:
            rows[index] = row
            write_jsonl(self.dir / experiment.SESSIONS, rows)

    def keep_old_metrics(self) -> None:
        """Training starts from epoch 1 in a folder that has epoch records (every checkpoint
        was lost): move them aside, never overwrite them."""
        if not (self.main and self.metrics_path.exists() and self.metrics_path.stat().st_size):
            return
        n = 1
        while (aside := self.dir / f"metrics-before-restart-{n}.jsonl").exists():
            n += 1
        os.replace(self.metrics_path, aside)
        self.log(f"the epoch records of the lost run are kept in {aside}")

    def begin(self, history: list[dict], start_epoch: int, state: dict | None = None) -> None:
        """Write the resumed history (from checkpoint `state`, whose tracker ids are used
        when trackers.json is gone)."""
        self.history = list(history)
        self._saved_ids = (state or {}).get("trackers")
        if not self.main:
            return
        (self.dir / STOPPED).unlink(missing_ok=True)  # this session takes over
        write_jsonl(self.metrics_path, self.history)

    def progress(self, total: int):
        if not (self.main and self._progress_enabled):
            return progress_mod.NoBar()
        return progress_mod.bar(total)

    def save(self, state: dict, epoch: int, batch: int, best: bool = False) -> None:
        if self.main:
            if ids := self.trackers.ids():  # a checkpoint carries its trackers' run ids
                state = dict(state, trackers=ids)
            self.checkpoints.save(state, epoch, batch, best=best)
            self._save_compile_cache()
            self.warn_output_cap()

    def _save_compile_cache(self) -> None:
        """The run's compile cache, after the checkpoint (`lib.runs.compile_cache`). A cache
        is an optimisation: a failure to write it is one line, once, and training goes on."""
        if self.compile_cache is None or self._cache_failed:
            return
        try:
            self.compile_cache.save()
        except Exception as exc:
            self._cache_failed = True
            self.log(f"compile cache not saved ({type(exc).__name__}: {exc}); training goes "
                     "on, and the next session compiles again")

    def end_epoch(self, record: dict, epochs: int, progress) -> None:
        """Append the record to metrics.jsonl and the trackers; report it with an ETA."""
        self.history.append(record)
        if not self.main:
            return
        write_jsonl(self.metrics_path, self.history)
        faults.point("trackers.log")  # the epoch checkpointed, not yet in the trackers
        self.trackers.log(record)
        self._speed()
        eta_h = progress_mod.eta_hours(record, epochs)
        compiling = record.get("compile_seconds", 0.0)  # once per session, not per epoch
        progress.set_postfix(loss=record.get("train_loss"), refresh=False)
        line = progress_mod.epoch_line(record, epochs, progress_mod.format_hours(eta_h),
                                       self.note)
        self.log(line + (f"  (compiling took {compiling:.0f} s, once)" if compiling else ""))
        self._warn_eta(eta_h, record["epoch"])

    def _warn_eta(self, eta_h: float, done: int) -> None:
        """Once: the training left will not fit in the time this session has left."""
        left_s = self.clock.left_s()
        if self.eta_warned or left_s is None or eta_h * 3600 <= left_s - self.clock.margin_s:
            return
        self.eta_warned = True
        self.log(f"WARNING: the remaining {progress_mod.format_hours(eta_h)} of training exceed "
                 f"the {progress_mod.format_hours(max(left_s, 0) / 3600)} left in this session "
                 f"(limit {self.clock.limit_hours:g} h). Training stops itself, saved, before "
                 f"the limit (now at epoch {done}); to continue: {self.storage.carry_over}. "
                 "Or reduce EPOCHS.")

    def stop(self, epoch: int, batch: int) -> None:
        """Training stopped itself, saved at (epoch, batch), before the session limit: say
        what to do next, and leave STOPPED.json (a sweep reads it: the run is not done)."""
        self.stopped = True
        if self.main:
            atomic.write_text(self.dir / STOPPED, json.dumps(
                {"position": [epoch, batch], "limit_hours": self.clock.limit_hours}))
        self.log(self.stop_line(epoch, batch))

    def stop_line(self, epoch: int, batch: int) -> str:
        """What the loop says when it stops before the session limit."""
        where = f"epoch {epoch + 1}, batch {batch}" if batch else f"the end of epoch {epoch}"
        limit = self.clock.limit_hours
        return (f"STOPPED before the session limit{f' ({limit:g} h)' if limit else ''}: saved at "
                f"{where} in {self.dir}. To continue: {self.storage.carry_over}.")

    def warn_output_cap(self) -> None:
        """Once, after the first save: when the run folder's files (checkpoints kept, records)
        would pass what the platform keeps of its durable folder, say so (one line)."""
        cap = self.storage.output_cap_gb
        if self.cap_warned or not self.main or cap is None:
            return
        self.cap_warned = True
        ckpts = sorted(self.checkpoints.dir.glob("ckpt-*.pt"))
        if not ckpts:
            return
        kept = ckpts[-1].stat().st_size * (self.checkpoints.keep + 1)  # + best.pt
        root = self.storage.durable.parent
        others = sum(p.stat().st_size for p in root.rglob("*")
                     if p.is_file() and self.checkpoints.dir not in p.parents)
        need_gb = (kept + others) / 1e9
        if need_gb > cap:
            self.log(f"WARNING: {root} would hold {need_gb:.1f} GB (checkpoints kept and "
                     f"records), over the {cap:g} GB this platform keeps as output: the "
                     "version's output would be lost. Move other files out of it, or train "
                     "a smaller model.")

    def close(self) -> None:
        self.trackers.close()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _local() -> Storage:
    return storage("local")
