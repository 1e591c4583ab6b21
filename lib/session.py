"""From a validated config to everything a notebook needs to train: `start(cfg)`.

It detects the runtime once, picks the device (saying in one line what it fell back to and
why), seeds torch, resolves the data folder and the run folder (OUT_DIR after the RESUME rule,
refused before anything is read or written when it holds another experiment:
`lib.runs.identity`) and decides the batch plan (`lib.training.batch`): the experiment's global
batch on this session's devices, in micro-batches that fit. Everything downstream reads these
from the session, never detects or computes them again.

The experiment decides the batch, not the platform: when BATCH_SIZE is None and the run folder
already records a global batch, this session keeps it, split over its devices and, where a
device cannot hold its share, accumulated over micro-batches. So a run started on a Kaggle TPU
v5e-8 (512 x 8) continues on a Colab T4 (256 per step x 16 accumulated) as the same experiment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from lib.data.common import make_loader
from lib.data.on_device import Augment, DeviceLoader, images_and_labels
from lib.runs import compile_cache, compile_cache_xla
from lib.runs import identity as experiment
from lib.runs.folder import RunFolder, check_writable
from lib.runtime import clouds, compile
from lib.runtime.clock import Clock
from lib.runtime.device import DeviceChoice, choose_device
from lib.runtime.distributed import Dist, device_count
from lib.runtime.platforms import (
    Platform,
    Storage,
    detect_runtime,
    get_platform,
    input_roots,
    session_clock,
    storage,
)
from lib.training import batch
from lib.training.batch import BatchPlan
from lib.training.config import RunConfig
from lib.training.loop import Task, fit


@dataclass
class Session:
    cfg: RunConfig
    platform: Platform
    runtime: str
    choice: DeviceChoice
    data_dir: Path
    out_dir: Path
    plan: BatchPlan  # the global batch, the devices launch() trains on, the micro-batch
    max_batches: int | None
    dist: Dist = field(default_factory=Dist)
    clock: Clock = field(default_factory=lambda: Clock(time.time()))
    storage: Storage = field(default_factory=lambda: storage("local"))
    xla_cache: compile_cache_xla.XlaCache | None = None  # set up before the first XLA graph

    @property
    def device(self) -> torch.device:
        """This process's device (its own GPU under DDP)."""
        if self.choice.type == "cuda" and self.dist.world_size > 1:
            return torch.device("cuda", self.dist.local_rank)
        return self.choice.torch_device

    @property
    def batch_size(self) -> int:
        """Samples per optimizer step on one device: what its loaders yield."""
        return self.plan.per_device

    @property
    def devices(self) -> int:
        return self.plan.devices

    @property
    def global_batch(self) -> int:
        return self.plan.global_batch

    def resolved(self) -> dict:
        """What this session runs with, beyond the parameters."""
        return {"device": self.choice.type, "precision": self.choice.precision.name,
                "runtime": self.runtime, "batch_size": self.batch_size,
                "world_size": self.dist.world_size, "devices": self.devices,
                "global_batch": self.global_batch, **self.plan.fields()}

    def timed(self, model_config: dict) -> dict:
        """What sets the cost of this session's steps, for its row of sessions.jsonl: a speed
        is a measurement of this (lib/cli/plan/speeds.py). The device (accelerator, count,
        precision) is in the row beside it."""
        cfg = self.cfg
        return {"workload": cfg.WORKLOAD, "model": model_config,
                "dataset": getattr(cfg, "dataset", None), "smoke": bool(cfg.smoke),
                "sample_data": bool(cfg.sample_data), "global_batch": self.global_batch,
                "frames": cfg.frames() if hasattr(cfg, "frames") else None}

    def deviations(self) -> list[str]:
        """The config's deviations from a paper's setup, and the batch's: a global batch other
        than the paper's, and BatchNorm over fewer samples than it (micro-batches, devices)
        in the sessions that trained the run."""
        out, last = self.cfg.deviations(), len(self.cfg.sample_and_smoke_deviations())
        at = len(out) - last if last <= len(out) else len(out)  # SAMPLE_DATA and SMOKE last
        return out[:at] + batch.deviations(self.cfg.official_batch(), self.global_batch,
                                           experiment.read_sessions(self.out_dir)) + out[at:]

    def open_run(self, model_config: dict) -> RunFolder:
        """The run folder (checkpoints, metrics, TensorBoard); only the main process writes."""
        return RunFolder(self.out_dir, self.cfg.WORKLOAD, model_config,
                   clock=self.clock, storage=self.storage, main=self.dist.main,
                   session=dict(self.resolved(), epochs=self.cfg.epochs,
                                platform=self.cfg.platform, timed=self.timed(model_config)),
                   note=self.cfg.note(), trackers=self.cfg.trackers)

    # What every workload's `loaders` / `train` / `load_best` share ----------------------
    def loaders(self, train_set, test_set, collate_fn=None):
        """(train, test) loaders; the training set is sharded across processes, the test
        set not."""
        seed, dist = self.cfg.seed, self.dist
        return (make_loader(train_set, self.batch_size, self.choice, train=True, seed=seed,
                            rank=dist.rank, world_size=dist.world_size, collate_fn=collate_fn),
                make_loader(test_set, self.batch_size, self.choice, train=False, seed=seed,
                            collate_fn=collate_fn))

    def device_loaders(self, train_set, test_set, mean, std, augment: Augment | None = None):
        """(train, test) `DeviceLoader`s over a torchvision in-memory dataset: uint8 images on
        this process's device, augmented there (on XLA they stay on the host, where the same
        ops run, and the loop's XLA loader moves each batch). The training set is sharded."""
        device = torch.device("cpu") if self.choice.type == "xla" else self.device
        seed, dist = self.cfg.seed, self.dist
        return (DeviceLoader(*images_and_labels(train_set), self.batch_size, device,
                             train=True, seed=seed, mean=mean, std=std,
                             augment=augment or Augment(), rank=dist.rank,
                             world_size=dist.world_size),
                DeviceLoader(*images_and_labels(test_set), self.batch_size, device,
                             train=False, seed=seed, mean=mean, std=std))

    def fit(self, loaders, task: Task, model_config: dict) -> list[dict]:
        """Train `task` in the run folder (resuming if it has a checkpoint) on this process's
        device, compiled where COMPILE says (`lib.runtime.compile`); the history."""
        run = self.open_run(model_config)
        on, why = compile.decide(self.cfg.compile, self.cfg, self.choice,
                                 self.cfg.smoke, self.cfg.varying_shapes())
        run.log(f"torch.compile: {'on' if on else 'off'} ({why})")
        run.compile_cache = self._compile_cache(run, on)
        compile.apply(task.model, on)
        try:
            return fit(task, *loaders, self.choice, run, self.cfg.epochs,
                       max_batches=self.max_batches, plan=self.plan,
                       checkpoint_minutes=self.cfg.checkpoint_minutes, dist=self.dist,
                       device=self.device, compiled=on)
        finally:
            run.close()

    def _compile_cache(self, run: RunFolder, compiled: bool):
        """The run's compile cache (`lib.runs.compile_cache`), loaded: torch_xla's (set up
        in `start`) on XLA, Inductor's where the model is compiled; None elsewhere."""
        if self.xla_cache is not None:
            self.xla_cache.log, self.xla_cache.main = run.log, self.dist.main
            return self.xla_cache
        if not compiled:
            return None
        cache = compile_cache.InductorCache(self.out_dir, self.choice.type, run.log,
                                            self.dist.main)
        cache.load()
        return cache

    def load_best(self, task: Task, model_config: dict) -> dict:
        """Load the run's best.pt (or, saying so, its newest loadable checkpoint) into
        `task.model`; return the checkpoint state."""
        state = self.open_run(model_config).checkpoints.best()
        task.model.load_state_dict(state["model"])
        return state


def _run_folder(cfg: RunConfig, out_dir: Path, runs: list[tuple[str, dict]],
                dist: Dist) -> Path:
    """OUT_DIR after the RESUME rule; for one run, its experiment recorded there."""
    folder = experiment.resolve(out_dir, runs, cfg.resume, cfg.run_settings())
    if dist.main:
        check_writable(folder)
        if folder != out_dir:
            print(f'RESUME = "new": {out_dir} holds a run, kept as it is; this one starts '
                  f"afresh in {folder} (to resume it later, set OUT_DIR to that folder)")
    return folder


def where_line(data_dir: Path, out_dir: Path, roles: Storage, clock: Clock) -> str:
    """One line: where data and results are, what of them is kept, and the time left."""
    kept = f" ({roles.keeps})" if roles.keeps else ""
    # absolute: a relative default ("data") reads as a word, not a folder
    line = f"data in {Path(data_dir).absolute()}; results in {Path(out_dir).absolute()}{kept}"
    left = clock.left_s()
    if left is not None:
        line += (f"; session limit {clock.limit_hours:g} h, {max(left, 0) / 3600:.1f} h left "
                 "(training stops itself, saved, before it)")
    return line


def _announce(s: Session, available: int) -> None:
    """What the main process says of the session: device, folders, time, devices, batch."""
    cfg, platform, plan = s.cfg, s.platform, s.plan
    many = f" x {available} devices" if available > 1 else ""
    print(f"{platform.title} notebook on the {s.runtime} runtime -> {s.choice.describe()}{many}")
    print(where_line(s.data_dir, s.out_dir, s.storage, s.clock))
    if note := clouds.clock_note(s.runtime, cfg.checkpoint_minutes):  # Modal's idle stop
        print(note)
    if available < platform.devices and s.choice.type == platform.accelerator:
        print(f"only {available} of the {platform.devices} devices of {platform.title} are "
              f"visible: training on {available}. On Kaggle, set Accelerator to "
              f"{platform.gpu} in the notebook's sidebar to use them all.")
    if line := batch.fewer_devices_line(plan, available):
        print(line)
    if cfg.smoke:
        print(f"SMOKE: {cfg.smoke_batches} batches of {plan.per_device} per epoch")
    if plan.kept or plan.accumulation > 1:
        print(plan.line())


def start(cfg: RunConfig, runtime: str | None = None, dist: Dist | None = None,
          announce: bool = True, grid: bool | None = None, carry: bool = True) -> Session:
    """Choose the device and resolve the run's settings; the main process says what it chose
    (unless `announce` is False: a grid of runs says it once). `grid` (default: the
    workload's GRID) makes OUT_DIR the root of a grid whose cells are checked here and
    recorded when each trains. On a platform whose durable folder starts empty in each
    session (Kaggle), a run or grid of this experiment found in the attached inputs is
    carried into OUT_DIR first, unless `carry` is False (a grid's cell: the grid did)."""
    dist = dist or Dist()
    grid = cfg.GRID if grid is None else grid
    # where: the platform's profile, the runtime, its storage and clock
    platform = get_platform(cfg.platform)
    runtime = runtime or detect_runtime()
    roles, clock = storage(runtime), session_clock(platform, runtime, dist.main)
    # what hardware: the device, how many of them
    choice = choose_device(cfg.device, platform)
    choice = replace(choice, notes=(*choice.notes, *cfg.device_notes(choice.type)))
    available = device_count(choice, platform)
    if cfg.seed is not None:  # None: a grid whose runs each bring their own seed
        torch.manual_seed(cfg.seed)
    data_dir, out_dir = cfg.paths(runtime)
    # Paperspace reserves `checkpoints` in /notebooks; a Modal container keeps nothing
    clouds.check_out_dir(out_dir, runtime, smoke=cfg.smoke)
    # which experiment(s): BATCH_SIZE None leaves the global batch to a run that records one
    total = experiment.ANY if cfg.batch_size is None else cfg.batch_size * available
    runs = cfg.experiments(total) if grid else [(".", cfg.identity(total))]
    if dist.main and roles.session_bound and cfg.resume != "new" and carry:
        _say(experiment.carry(out_dir, input_roots(runtime), runs, cfg.run_settings(),
                              roles.carry_over, grid))
    out_dir = _run_folder(cfg, out_dir, runs, dist)
    # the batch: the run's global batch on these devices, in micro-batches that fit
    plan = batch.decide(cfg, choice.type, choice.where, available, None if grid else out_dir)
    s = Session(cfg, platform, runtime, choice, data_dir, out_dir, plan,
                cfg.smoke_batches if cfg.smoke else None, dist, clock, roles)
    if dist.main and announce:
        _announce(s, available)
    if choice.type == "xla" and not grid:  # before anything compiles (a grid: per cell)
        s.xla_cache = compile_cache_xla.XlaCache(out_dir, main=dist.main)
        s.xla_cache.setup()
    if dist.main and not grid:  # the experiment, recorded before its first step
        defined = cfg.identity(s.global_batch)
        experiment.record(out_dir, dict(cfg.to_dict(), resolved=s.resolved()), defined)
    return s


def _say(line: str | None) -> None:
    if line:
        print(line)
