"""Optimizer study: ResNet-18 on CIFAR-10/100 under label noise, OPTIMIZERS x SEEDS runs.

Every run of the grid is an ordinary training run (`lib.training.loop.fit`: resume, checkpoints,
metrics.jsonl, TensorBoard) in its own folder `OUT_DIR/<dataset>-<optimizer>-seed<s>-<noise>/`
(`lib.study.grid`). A finished run leaves `DONE.json` and is skipped when the notebook runs again;
an interrupted one resumes from its newest checkpoint. For one seed, every optimizer trains
on the same noisy labels, the same initial weights and the same batch order: only the update
rule differs. Per-optimizer learning rates and weight decays are in `lib.training.optim.OPTIMIZERS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lib.base.progress import format_hours
from lib.data.catalog import NOISE_MODES
from lib.data.catalog import check_cifar_name as check_name
from lib.plots import image_grid
from lib.runtime.platforms import PLATFORMS
from lib.study.figures import summary  # its own module: `report` reads it without torch
from lib.study.grid import GridCell, finish_run, plan_runs, read_marker, run_status
from lib.training.config import ConfigError, RunConfig
from lib.training.optim import (
    OPTIMIZERS,
    check_optimizer_name,
    make_optimizer,
    resolved_hparams,
    warmup_cosine,
)
from lib.workloads import Workload

if TYPE_CHECKING:  # torch, the data and the model are imported where they run (the contract)
    import torch

    from lib.session import Session
    from lib.training.loop import Task

DEFAULT_SEEDS = [0, 1, 2]
SMOKE_BATCH = 16
# The optimizers' learning rates are tuned for a global batch of 128 (the CIFAR ResNet recipe):
# every platform trains with 128 in all (split over its devices), so a result from a T4 and
# one from a TPU are the same experiment.
GLOBAL_BATCH = 128
SMOKE_GRID = (2, 1)  # SMOKE of the default grid: the first 2 OPTIMIZERS x the first seed


@dataclass
class OptimizerStudyConfig(RunConfig):
    """The study's parameters: the grid, the data and its label noise, the schedule."""

    WORKLOAD = "optimizer_study"
    GRID = True  # OUT_DIR holds one run folder per (optimizer, seed)
    SCHEDULE_SPANS_EPOCHS = True  # warm-up + cosine over all EPOCHS
    # CPU, measured: ResNet-18 0.94x eager, never repaid. CUDA: on, a judgement (200 epochs
    # per run repay minutes of compiling; lib/runtime/compile.py).
    COMPILE_AUTO = {"cpu": False, "cuda": True}

    epochs: int = 200  # the study design: 200 epochs per run
    lr: float | None = None  # None: each optimizer's literature default
    seed: int | None = None  # one seed instead of `seeds` (papermill fan-out)
    dataset: str = "cifar10"
    optimizers: list[str] = field(default_factory=lambda: list(OPTIMIZERS))
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    optimizer: str | None = None  # one optimizer instead of `optimizers` (fan-out)
    label_noise: float = 0.2  # share of training labels replaced, in [0, 1]
    noise_mode: str = "symmetric"  # or "asymmetric" (class pairs)
    weight_decay: float | None = None  # None: each optimizer's literature default
    warmup_epochs: int = 5  # linear warm-up, then cosine to zero, stepped every batch
    smoke_batches: int = 2  # batches of SMOKE_BATCH per epoch in SMOKE: seconds on a CPU

    def validate(self) -> None:
        self.dataset = self._named("dataset", self.dataset, check_name)
        self._choice("noise_mode", self.noise_mode, NOISE_MODES)
        if not 0.0 <= self.label_noise <= 1.0:
            raise ConfigError(f"LABEL_NOISE={self.label_noise!r} is outside [0, 1]; it is the "
                              "share of training labels replaced, e.g. LABEL_NOISE = 0.2.")
        self._non_negative("weight_decay", self.weight_decay,
                           ", or None for each optimizer's default.")
        self._non_negative("warmup_epochs", self.warmup_epochs, "; e.g. WARMUP_EPOCHS = 5.")
        self.optimizers = [self._named("optimizers", o, check_optimizer_name)
                           for o in self.optimizers]
        if self.optimizer is not None:
            self.optimizer = self._named("optimizer", self.optimizer, check_optimizer_name)
        if not self.grid_optimizers() or not self.grid_seeds():
            raise ConfigError(f"OPTIMIZERS={self.optimizers} and SEEDS={self.seeds} must not be "
                              "empty; e.g. OPTIMIZERS = ['sgd', 'adamw'] and SEEDS = [0].")
        bad = [s for s in self.grid_seeds() if s < 0]
        if bad:
            raise ConfigError(f"SEEDS={self.seeds} has negative seeds {bad}; expected "
                              "integers >= 0.")

    @staticmethod
    def _named(name: str, value: str, check) -> str:
        """`check(value)` (the canonical name), its ValueError as a ConfigError on NAME."""
        try:
            return check(value)
        except ValueError as exc:
            raise ConfigError(f"{name.upper()}: {exc}") from None

    def resolved_batch_size(self, device: str | None = None) -> int:
        """BATCH_SIZE, else each device's share of GLOBAL_BATCH (SMOKE: 16, a ResNet-18 step
        on a CPU takes a second at 32), whatever the device."""
        if self.batch_size is not None:
            return self.batch_size
        return SMOKE_BATCH if self.smoke else self.default_batch(self.platform)

    def default_global_batch(self, devices: int, device: str | None = None) -> int:
        """GLOBAL_BATCH on every platform, however many devices this session finds."""
        return GLOBAL_BATCH

    @classmethod
    def default_batch(cls, platform: str, device: str | None = None) -> int:
        """Each device's share of GLOBAL_BATCH: the optimizers' learning rates are tuned for
        it, so a T4 run and a TPU run are the same experiment."""
        return GLOBAL_BATCH // PLATFORMS[platform].devices

    def _smoke_grid(self) -> bool:
        """SMOKE with the default grid: train only its first runs (a grid set by hand, e.g.
        OPTIMIZERS = ['sgd', 'lion'], is trained as given)."""
        return (self.smoke and self.optimizers == list(OPTIMIZERS)
                and self.seeds == DEFAULT_SEEDS)

    def grid_optimizers(self) -> list[str]:
        """OPTIMIZER, else OPTIMIZERS (in a SMOKE of the default grid, the first two)."""
        if self.optimizer is not None:
            return [self.optimizer]
        return list(self.optimizers[:SMOKE_GRID[0]] if self._smoke_grid() else self.optimizers)

    def grid_seeds(self) -> list[int]:
        """SEED, else SEEDS (in a SMOKE of the default grid, the first)."""
        if self.seed is not None:
            return [self.seed]
        return list(self.seeds[:SMOKE_GRID[1]] if self._smoke_grid() else self.seeds)

    @classmethod
    def run_settings(cls) -> frozenset[str]:
        # the grid's lists pick the cells; a cell is defined by its OPTIMIZER and SEED
        return super().run_settings() | {"optimizers", "seeds"}

    def cell(self, optimizer: str, seed: int, **changes) -> OptimizerStudyConfig:
        """The config of one grid cell."""
        return dataclasses.replace(self, optimizer=optimizer, seed=seed,
                                   optimizers=[optimizer], seeds=[seed], **changes)

    def experiments(self, global_batch: int) -> list[tuple[str, dict]]:
        return [(spec.name, self.cell(spec.optimizer, spec.seed).identity(global_batch))
                for spec in plan(self)]

    def hparams(self, optimizer: str) -> tuple[float, float]:
        """(lr, weight decay) of `optimizer`: LR / WEIGHT_DECAY, else its defaults."""
        return resolved_hparams(optimizer, self.lr, self.weight_decay)


def plan(cfg: OptimizerStudyConfig) -> list[GridCell]:
    """The grid OPTIMIZERS x SEEDS at this LABEL_NOISE, one run folder each."""
    return plan_runs(cfg.dataset, cfg.grid_optimizers(), cfg.grid_seeds(), cfg.label_noise,
                     cfg.noise_mode)


def cell_session(s: Session, spec: GridCell) -> Session:
    """The session of one run: its optimizer and seed, OUT_DIR its own folder (already
    checked by the grid's session, and RESUME already applied to the grid's root)."""
    from lib import session

    cfg = s.cfg.cell(spec.optimizer, spec.seed, out_dir=str(spec.dir(s.out_dir)),
                     resume="auto")
    return session.start(cfg, runtime=s.runtime, dist=s.dist, announce=False, grid=False,
                         carry=False)


def datasets(s: Session, seed: int | None = None):
    """(train, test, info) with the training labels noised for `seed` (default: the run's)."""
    from lib.data.cifar import build_datasets as cifar_datasets

    cfg = s.cfg
    seed = cfg.grid_seeds()[0] if seed is None else seed
    return cifar_datasets(cfg.dataset, s.data_dir, cfg.sample_data, cfg.label_noise,
                                cfg.noise_mode, seed)


def build_task(cfg: OptimizerStudyConfig, device: torch.device, num_classes: int,
               steps_per_epoch: int) -> tuple[Task, dict]:
    """ResNet-18, the run's optimizer and its warm-up + cosine schedule (per step)."""
    import torch

    from lib.models.resnet import CifarResNet18, ResNetConfig
    from lib.training.loop import Task
    from lib.training.metrics import Accuracy

    model_cfg = ResNetConfig(num_classes=num_classes)
    model = CifarResNet18(model_cfg).to(device)
    lr, weight_decay = cfg.hparams(cfg.optimizer)
    optimizer = make_optimizer(cfg.optimizer, model.parameters(), lr, weight_decay)
    total = cfg.epochs * steps_per_epoch
    scheduler = warmup_cosine(optimizer, total, min(cfg.warmup_epochs * steps_per_epoch, total))
    task = Task(model, torch.nn.functional.cross_entropy, optimizer,
                metrics=lambda: [Accuracy(num_classes)], scheduler=scheduler,
                scheduler_interval="step", monitor="test_accuracy")
    return task, asdict(model_cfg)


def train(s: Session) -> list[dict]:
    """Train one run of the grid (`cell_session`), resuming if it has a checkpoint."""
    from lib.data.cifar import STATS
    from lib.data.on_device import Augment

    train_set, test_set, info = datasets(s)
    mean, std = STATS[s.cfg.dataset]
    loaders = s.device_loaders(train_set, test_set, mean, std, Augment(padding=4, flip=True))
    steps = len(loaders[0]) if s.max_batches is None else min(len(loaders[0]), s.max_batches)
    task, model_config = build_task(s.cfg, s.device, info["num_classes"], steps)
    return s.fit(loaders, task, model_config)


def train_grid(s: Session) -> list[dict]:
    """Train every unfinished run of the grid, one after the other; their result rows.

    Each run trains through `launch` (all devices of the platform), then writes DONE.json
    and merges its row into OUT_DIR/results.csv; a finished run is only reported.
    """
    from lib.launch import launch
    from lib.runs.folder import STOPPED

    rows, trained = [], []
    specs = plan(s.cfg)
    for i, spec in enumerate(specs, 1):
        rs = cell_session(s, spec)
        status = run_status(rs.out_dir, s.cfg.epochs)
        head = f"[{i}/{len(specs)}] {spec.name}"
        if status == "finished":
            row = read_marker(rs.out_dir)
            print(f"{head}: finished earlier, skipped (best test accuracy "
                  f"{100 * row['best_test_accuracy']:.2f}%)")
            rows.append(row)
            continue
        lr, weight_decay = s.cfg.hparams(spec.optimizer)
        print(f"{head}: {'resuming' if status == 'partial' else 'training'} "
              f"(lr {lr:g}, weight decay {weight_decay:g})")
        # read here: `train` may run in other processes (launch); a second load of the
        # training labels is cheap next to a run
        realised = datasets(rs)[2]["realised_noise"]
        history = launch(train, rs)
        if (rs.out_dir / STOPPED).exists():  # stopped before the session limit: unfinished,
            break  # so no DONE.json; the next session resumes it (the loop said how)
        if s.dist.main:
            rows.append(finish_run(s.out_dir, spec, history, realised_noise=realised, lr=lr,
                                   weight_decay=weight_decay))
            trained.append(rows[-1]["wall_time_s"])
            print(study_eta(trained, len(specs) - i, s.platform.session_hours))
    return rows


def study_eta(run_seconds: list[float], runs_left: int, session_hours: float | None) -> str:
    """A line with the time the `runs_left` runs will take at the mean of `run_seconds`, and a
    warning when that exceeds the session limit (re-running resumes, so it is no loss)."""
    hours = runs_left * sum(run_seconds) / len(run_seconds) / 3600
    line = f"study: {runs_left} run(s) left, about {format_hours(hours)}"
    if session_hours is not None and hours > session_hours:
        line += (f". WARNING: more than this platform's {session_hours:.0f} h session; when it "
                 "ends, re-run the notebook: finished runs are skipped and the interrupted one "
                 "resumes (or fan the runs out over sessions with OPTIMIZER and SEED)")
    return line


def noisy_examples(dataset, name: str, n: int = 16, path: Path | None = None,
                   sample: bool = False):
    """The first `n` training images titled by their (noisy) label; a flipped one also
    names its true class. `sample` marks the title as the synthetic sample's."""
    from lib.data.cifar import example_grid

    images, labels = example_grid(dataset, name, n)
    titles = []
    for i, label in enumerate(labels):
        clean = dataset.classes[dataset.clean_targets[i]]
        titles.append(label[:12] if dataset.targets[i] == dataset.clean_targets[i]
                      else f"{label[:12]} (is {clean[:10]})")
    return image_grid(images, titles, path, title="training images, noisy labels",
                      sample=sample)


WORKLOAD = Workload(OptimizerStudyConfig, datasets, train, headline="test_accuracy",
                    summary=summary,
                    tiny=dict(SMOKE_BATCHES=2, BATCH_SIZE=16, OPTIMIZERS=["adamw"], SEEDS=[0]))
