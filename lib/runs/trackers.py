"""Trackers: where a run's epoch records go besides metrics.jsonl, behind one small interface.

A `Tracker` is a sink of the run folder's records (lib.runs.folder), called on the main process
only: `open` when a session starts training (the run folder, this session's facts, what the
tracker kept of earlier sessions), `log` once per epoch with the record metrics.jsonl gets,
`close` when the session ends. TRACKERS (lib.training.config) picks them:

- "tensorboard": event files in the run folder's tb/ (`SummaryWriter`; `purge_step` drops what
  a killed session logged past its last checkpoint).
- "wandb": one Weights & Biases run for the whole run: its id is made once and kept in the run
  folder's trackers.json and in every checkpoint, and each session continues it
  (`wandb.init(id=..., resume="allow")`, W&B's "Resume a run"; the Lightning users' request
  Lightning-AI/pytorch-lightning#5342, #13524). Where the W&B server cannot be reached (Kaggle's
  internet switch off, tests) or WANDB_MODE=offline, it logs offline into the run folder's
  wandb/, one folder per session, and says once how to upload them: `wandb sync <run>/wandb`
  (files of one run are synced in order of their start: `wandb sync --help`).
- "mlflow": one MLflow run, created once with `MlflowClient.create_run` and continued by id
  (`update_run`, `log_batch` with step = epoch), at MLFLOW_TRACKING_URI (any store MLflow
  takes) or, unset, in a SQLite database in the run folder (sqlite:///<run>/mlflow.db) that
  travels with the run; a session ends saying `mlflow ui --backend-store-uri ...` (full mlflow).

Every record's step is its epoch and a tracker never gets an epoch twice: a session resumed
from an older checkpoint (the newer one lost) skips the epochs the tracker already has, one
killed between its checkpoint and the tracker's log sends the missing epochs next session.
trackers.json lost too (a carry that kept only checkpoints/): the checkpoint says what each
tracker had at its save, the tracker what it holds where it can tell (MLflow); where it cannot
(W&B), the checkpoint's epoch is sent again, never lost. Every session names its platform and
device on the tracker's run. Tokens come from lib.runtime.secrets (never printed or written).
A tracker without its client or token, or that fails, is one line with the fix; training goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets as random_ids
import shlex
import time
import urllib.parse
import warnings
from pathlib import Path

from lib.base import atomic
from lib.runs.redact import redact
from lib.runtime import secrets
from lib.runtime.network import netrc_has, reachable  # here: tests patch trackers.reachable

NAMES = ("tensorboard", "wandb", "mlflow")
STATE = "trackers.json"  # in the run folder: each tracker's run id and the last epoch it has


class Unavailable(Exception):
    """This tracker cannot log in this session; the message is the one line with the fix."""


class Tracker:
    """The interface: `open` -> what to keep in trackers.json (its run id) and a line to say,
    `log(epoch, numbers)`, `close()`."""

    name = title = ""
    keeps_steps = True  # the epochs it holds are counted in trackers.json (TensorBoard purges)

    def open(self, folder: Path, facts: dict, kept: dict) -> tuple[dict, str | None]:
        raise NotImplementedError

    def log(self, epoch: int, numbers: dict[str, float]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def held(self, saved: int) -> int:
        """The last epoch its run holds, asked of its service; `saved` where it cannot tell."""
        return saved

    def ending(self) -> str | None:
        """A session's last line: where its records are and how to look (None: none)."""


def _client(module: str, title: str, install: str):
    """Import a tracker's client, or the one line saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise Unavailable(f"{title}: its client is not installed here: `pip install {install}` "
                          "(the hosted notebooks install it when TRACKERS names it); training "
                          f"goes on without {title}.") from None


class TensorBoard(Tracker):
    name, title, keeps_steps = "tensorboard", "TensorBoard", False

    def open(self, folder, facts, kept):
        from torch.utils.tensorboard import SummaryWriter

        # The event file is made at the first epoch's numbers: a session stopped before it
        # (Ctrl-C at start-up) adds no empty file to tb/ (found by the tests' kernels, forked
        # with TensorBoard already imported, so opened a second sooner than a fresh kernel).
        self.writer, self._open = None, lambda: SummaryWriter(
            str(folder / "tb"), purge_step=facts["from_epoch"])
        return {}, None

    def log(self, epoch, numbers):
        if self.writer is None:
            self.writer = self._open()
        for key, value in numbers.items():
            self.writer.add_scalar(key, value, epoch)
        self.writer.flush()

    def close(self):
        if self.writer is not None:
            self.writer.close()


class WandB(Tracker):
    name, title = "wandb", "W&B"
    KEY = "WANDB_API_KEY"
    LINKS = ("latest-run", "debug.log", "debug-internal.log")  # conveniences wandb/ gets

    def mode(self) -> tuple[str, str | None, str]:
        """(mode, API key or None, why) for this session; Unavailable with the fix when it
        would have to log online without a key."""
        said = os.environ.get("WANDB_MODE", "")
        if said in ("offline", "dryrun"):
            return "offline", None, "WANDB_MODE=offline"
        if said == "disabled":
            raise Unavailable("W&B: WANDB_MODE=disabled, so nothing is logged to W&B; unset "
                              "it (or remove \"wandb\" from TRACKERS).")
        base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
        key = secrets.secret(self.KEY)
        if not reachable(base):
            return "offline", None, f"no network to {urllib.parse.urlsplit(base).hostname}"
        if key is None and not netrc_has(urllib.parse.urlsplit(base).hostname or ""):
            raise Unavailable(f"W&B: no API key here: add {secrets.where(self.KEY)} (from "
                              "wandb.ai/authorize), or set WANDB_MODE=offline to log offline "
                              "and `wandb sync` later; training goes on without W&B.")
        return "online", key, "online"

    def open(self, folder, facts, kept):
        wandb = _client("wandb", self.title, "wandb")
        mode, key, why = self.mode()
        self.folder = folder / "wandb"
        self.folder.mkdir(exist_ok=True)
        self._tidy()
        run_id = kept.get("id") or random_ids.token_hex(6)  # W&B ids: [0-9a-z_-]
        project = kept.get("project") or os.environ.get("WANDB_PROJECT") or "train-anywhere"
        settings = wandb.Settings(mode=mode, api_key=key, silent=True, console="off",
                                  disable_git=True, save_code=False, reinit="create_new",
                                  symlink=False)  # the run folder is copied between platforms
        with _quiet():
            self.run = wandb.init(
                project=project, id=run_id, dir=str(folder), settings=settings,
                resume="allow" if mode == "online" else None, name=_name(facts),
                config={"experiment": facts["experiment"]}, tags=facts["platforms"])
            self.run.config.update({f"session_{facts['session']}": _session(facts)},
                                   allow_val_change=True)
        line = None
        if mode == "offline":
            line = (f"W&B: offline ({why}): run {run_id} is kept in {self.folder}; to upload "
                    f"it with every session of this run: `wandb sync {self.folder}` where there "
                    "is a network")
        return {"id": run_id, "project": project}, line

    def log(self, epoch, numbers):
        self.run.log(numbers, step=epoch)

    def close(self):
        with _quiet():
            self.run.finish()
        self._tidy()

    def _tidy(self) -> None:
        """No links in wandb/: latest-run, the debug logs and each session's debug-core.log
        (a link to wandb-core's own log, outside the run) would make a copy of the run folder
        (a Kaggle carry-over, `train-anywhere carry`) fail on a dangling one, or turn
        latest-run into a second copy of a session that `wandb sync` would upload twice."""
        import shutil

        for path in sorted(self.folder.rglob("*"), reverse=True):
            if path.is_symlink():
                path.unlink()
        for name in self.LINKS:  # what a copy that followed the links left
            path = self.folder / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.is_file():
                path.unlink()


class MLflow(Tracker):
    name, title = "mlflow", "MLflow"
    CREDENTIALS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                   "MLFLOW_TRACKING_PASSWORD", "DATABRICKS_HOST", "DATABRICKS_TOKEN")

    def open(self, folder, facts, kept):
        _client("mlflow", self.title, "mlflow-skinny sqlalchemy alembic")
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = secrets.secret("MLFLOW_TRACKING_URI") or f"sqlite:///{folder.resolve()}/mlflow.db"
        if not uri.startswith(("sqlite:", "file:", "/", ".")):  # a server: its credentials
            secrets.export(self.CREDENTIALS)
        line = None
        with _quiet():
            self.client = client = MlflowClient(tracking_uri=uri)
            self.run_id = kept.get("run_id")
            try:
                if self.run_id:
                    client.update_run(self.run_id, status="RUNNING")
            except MlflowException:
                line = (f"MLflow: run {self.run_id} is not at {redact(uri)} (another tracking "
                        "URI than its earlier sessions'?): this session starts a new one")
                self.run_id = None
            if not self.run_id:
                name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or (
                    f"train-anywhere-{facts['workload']}")
                found = client.get_experiment_by_name(name)
                experiment = found.experiment_id if found else client.create_experiment(name)
                self.run_id = client.create_run(experiment, run_name=_name(facts)).info.run_id
                params = [Param(k, str(v)[:6000]) for k, v in sorted(facts["experiment"].items())]
                client.log_batch(self.run_id, params=params)
            tags = {"platforms": ", ".join(facts["platforms"]), **{
                f"session.{facts['session']}.{k}": str(v) for k, v in _session(facts).items()}}
            client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.uri = uri
        return {"run_id": self.run_id, "tracking_uri": redact(uri)}, line

    def log(self, epoch, numbers):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        with _quiet():
            self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, epoch)
                                                        for k, v in numbers.items()])

    def close(self):
        with _quiet():
            self.client.set_terminated(self.run_id)

    def held(self, saved):
        with _quiet():
            keys = self.client.get_run(self.run_id).data.metrics
            return max((m.step for key in keys
                        for m in self.client.get_metric_history(self.run_id, key)), default=0)

    def ending(self):
        if not self.uri.startswith(("sqlite:", "file:", "/", ".")):  # a server: its own UI
            return f"MLflow: run {self.run_id} at {redact(self.uri)} (open it there)"
        return (f"MLflow: run {self.run_id} in {self.uri}  (view with: mlflow ui "
                f"--backend-store-uri {shlex.quote(self.uri)}, from the full `pip install "
                "mlflow`: the mlflow-skinny installed here has no UI)")


KINDS = {t.name: t for t in (TensorBoard, WandB, MLflow)}


def _said(exc: Exception) -> str:
    """A client's error in the one line that says it: redacted, its lines joined."""
    return " ".join(redact(str(exc)).split())


@contextlib.contextmanager
def _quiet():
    """The clients' INFO lines and warnings (MLflow's "Creating initial MLflow database
    tables...", alembic's migrations) off a notebook's outputs: the run's own lines say it."""
    loggers = [logging.getLogger(n) for n in ("mlflow", "alembic", "wandb")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _name(facts: dict) -> str:
    return f"{facts['workload']} {facts['run']}"


def _session(facts: dict) -> dict:
    """What a tracker's run says of one session."""
    return {k: facts.get(k) for k in ("platform", "device", "precision", "from_epoch",
                                      "started_at")}


def numbers(record: dict) -> dict[str, float]:
    """The record's numbers but its epoch, the step (its strings, such as the device, are the
    session's)."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "epoch"}


def read_state(folder: Path) -> dict:
    try:
        return json.loads((Path(folder) / STATE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


class Trackers:
    """The trackers of one run folder for one session, on the main process."""

    def __init__(self, names, folder: Path, say=print) -> None:
        self.names, self.folder, self.say = list(names), Path(folder), say
        self.live: dict[str, Tracker] = {}
        self.state: dict[str, dict] = {}

    def start(self, history: list[dict], facts: dict, saved: dict | None = None) -> None:
        """Open each tracker (its run continued from trackers.json, else from the ids the
        resumed checkpoint kept) and send it the history's epochs it does not have."""
        self.state = read_state(self.folder)
        if guessed := not self.state and bool(saved):  # trackers.json lost: the checkpoint's
            # ids and the epochs each tracker had at its save (an older checkpoint: its own)
            self.state = {k: dict(v, step=v.get("step", facts["from_epoch"] - 1))
                          for k, v in saved.items()}
        for name in self.names:
            tracker = KINDS[name]()
            kept = self.state.get(name, {})
            try:
                keep, line = tracker.open(self.folder, facts, dict(kept))
            except Unavailable as exc:
                self.say(str(exc))
                continue
            except Exception as exc:  # a service down, a bad URI: one line, training goes on
                self.say(f"{tracker.title}: could not start ({type(exc).__name__}: "
                         f"{_said(exc)}); training goes on without {tracker.title}.")
                continue
            self.live[name] = tracker
            if line:
                self.say(line)
            if tracker.keeps_steps:  # a new tracker run (its old one gone) has no epochs
                same = all(kept.get(k) == v for k, v in keep.items() if k in ("id", "run_id"))
                step = kept.get("step", 0) if same else 0
                if guessed and same:  # the checkpoint's own epoch may have reached it
                    with contextlib.suppress(Exception):  # a service that cannot say: as saved
                        step = tracker.held(step)
                self.state[name] = dict(kept, **keep, step=step)
                self._rewound(tracker, facts["from_epoch"] - 1)
                for record in history:
                    self._send(name, record)
        self._save()

    def _rewound(self, tracker: Tracker, done: int) -> None:
        step = self.state[tracker.name]["step"]
        if step > done:
            self.say(f"{tracker.title} already has epochs up to {step}, logged before the "
                     f"checkpoint this session resumed from (epoch {done}); it gets epochs "
                     f"after {step} only, so no step repeats")

    def _send(self, name: str, record: dict) -> None:
        tracker, epoch = self.live[name], int(record["epoch"])
        kept = self.state.get(name)
        if kept is not None and epoch <= kept["step"]:
            return
        try:
            tracker.log(epoch, numbers(record))
        except Exception as exc:
            self.say(f"{tracker.title}: logging epoch {epoch} failed ({type(exc).__name__}: "
                     f"{_said(exc)}); the rest of this session goes on without it.")
            self.live.pop(name)
            return
        if kept is not None:
            kept["step"] = epoch

    def log(self, record: dict) -> None:
        """Send one epoch's record to every open tracker."""
        for name in list(self.live):
            self._send(name, record)
        self._save()

    def ids(self) -> dict:
        """What a checkpoint keeps of the trackers: run ids, and the epochs each has before
        the checkpoint's own is sent (for a lost trackers.json)."""
        return {k: dict(kept) for k, kept in self.state.items()}

    def _save(self) -> None:
        if self.state:
            atomic.write_text(self.folder / STATE, json.dumps(self.state, indent=1,
                                                               sort_keys=True) + "\n")

    def close(self) -> None:
        for tracker in list(self.live.values()):
            try:
                tracker.close()
            except Exception as exc:
                self.say(f"{tracker.title}: closing failed ({type(exc).__name__}: "
                         f"{_said(exc)})")
                continue
            if line := tracker.ending():
                self.say(line)
        self.live = {}
