"""Fashion-MNIST quickstart: its parameters, its model and optimiser, its training function."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lib.base.errors import how_to_set
from lib.runs import identity as experiment
from lib.training.config import ConfigError, RunConfig
from lib.workloads import Workload

if TYPE_CHECKING:  # torch, the data and the model are imported where they run (the contract)
    import torch

    from lib.session import Session
    from lib.training.loop import Task


@dataclass
class FashionConfig(RunConfig):
    """pytorch/examples' MNIST defaults: Adadelta lr 1.0, StepLR gamma 0.7, 14 epochs."""

    WORKLOAD = "fashion_mnist"
    BATCH_SIZES = {"cuda": 256, "xla": 512, "mps": 128}
    # Measured on the CPU: 0.66x eager (never repaid). CUDA: 14 epochs of seconds each do not
    # repay a compile (lib/runtime/compile.py).
    COMPILE_AUTO = {"cpu": False, "cuda": False}

    epochs: int = 14
    lr: float = 1.0
    gamma: float = 0.7  # StepLR decay per epoch

    def validate(self) -> None:
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"GAMMA={self.gamma!r} must be in (0, 1]; "
                              f"{how_to_set('GAMMA', 0.7)}.")


def build_task(cfg: FashionConfig, device: torch.device) -> tuple[Task, dict]:
    """The CNN, Adadelta and StepLR as a `Task`, plus the model config for checkpoints."""
    import torch

    from lib.models.cnn import CNN, CNNConfig
    from lib.training.loop import Task
    from lib.training.metrics import Accuracy

    model_cfg = CNNConfig()
    model = CNN(model_cfg).to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=cfg.gamma)
    task = Task(model, torch.nn.functional.cross_entropy, optimizer,
                metrics=lambda: [Accuracy(model_cfg.num_classes)], scheduler=scheduler,
                monitor="test_accuracy")
    return task, asdict(model_cfg)


def datasets(s: Session):
    """(train, test, info): Fashion-MNIST in DATA_DIR, or the IDX sample written there."""
    from lib.data import fashion

    return fashion.build_datasets(s.data_dir, s.cfg.sample_data)


def loaders(s: Session):
    """(train, test) loaders of images kept on the device; the training set is sharded."""
    from lib.data import fashion

    train_set, test_set, _ = datasets(s)
    return s.device_loaders(train_set, test_set, (fashion.MEAN,), (fashion.STD,))


def train(s: Session) -> list[dict]:
    """Train (resuming if a checkpoint exists) on this process's device; return the history."""
    return s.fit(loaders(s), *build_task(s.cfg, s.device))


def load_best(s: Session) -> tuple[Task, dict]:
    """The task with the best checkpoint's weights, on this session's device."""
    task, model_config = build_task(s.cfg, s.device)
    state = s.load_best(task, model_config)
    return task, state


def results_table(scores: dict, best: dict, history: list[dict], sample: bool,
                  run_dir: Path | None = None) -> str:
    """Markdown table: the best checkpoint's and the last epoch's test accuracy, and which
    data they were measured on; with `run_dir`, the sessions that trained it (where, on
    what, which epochs: `lib.runs.identity.sessions_table`)."""
    data = "synthetic sample" if sample else "Fashion-MNIST"
    rows = ["| | test accuracy (%) | data |", "|---|---|---|",
            f"| best checkpoint (epoch {best['position'][0]}) | "
            f"{100 * scores['test_accuracy']:.2f} | {data} |"]
    if history:  # empty when a session stopped before its limit inside the first epoch
        last = history[-1]
        rows.append(f"| last epoch ({last['epoch']}) | {100 * last['test_accuracy']:.2f} | "
                    f"{data} |")
    sessions = experiment.sessions_table(run_dir) if run_dir is not None else ""
    return "\n".join(rows) + (f"\n\nTrained in these sessions:\n\n{sessions}" if sessions
                              else "")


WORKLOAD = Workload(FashionConfig, datasets, train, headline="test_accuracy",
                    tiny=dict(SMOKE_BATCHES=2), demo=True)
