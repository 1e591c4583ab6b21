"""What every workload's `loaders` / `train` / `load_best` share; workloads pass their pieces."""

from __future__ import annotations

import torch

from lib import compile
from lib.data.common import make_loader
from lib.data.on_device import Augment, DeviceLoader, images_and_labels
from lib.session import Session
from lib.train import Task, fit


def split_loaders(s: Session, train_set, test_set, collate_fn=None):
    """(train, test) loaders; the training set is sharded across processes, the test set not."""
    seed, dist = s.cfg.seed, s.dist
    return (make_loader(train_set, s.batch_size, s.choice, train=True, seed=seed,
                        rank=dist.rank, world_size=dist.world_size, collate_fn=collate_fn),
            make_loader(test_set, s.batch_size, s.choice, train=False, seed=seed,
                        collate_fn=collate_fn))


def device_loaders(s: Session, train_set, test_set, mean, std, augment: Augment | None = None):
    """(train, test) `DeviceLoader`s over a torchvision in-memory dataset: uint8 images on
    this process's device, augmented there (on XLA they stay on the host, where the same ops
    run, and the loop's XLA loader moves each batch). The training set is sharded."""
    device = torch.device("cpu") if s.choice.type == "xla" else s.device
    seed, dist = s.cfg.seed, s.dist
    return (DeviceLoader(*images_and_labels(train_set), s.batch_size, device, train=True,
                         seed=seed, mean=mean, std=std, augment=augment or Augment(),
                         rank=dist.rank, world_size=dist.world_size),
            DeviceLoader(*images_and_labels(test_set), s.batch_size, device, train=False,
                         seed=seed, mean=mean, std=std))


def train_task(s: Session, loaders, task: Task, model_config: dict) -> list[dict]:
    """Fit `task` (resuming if a checkpoint exists) on this process's device; the history."""
    run = s.open_run(model_config)
    on, why = compile.decide(s.cfg.compile, s.cfg.WORKLOAD, s.choice, s.cfg.smoke)
    run.log(f"torch.compile: {'on' if on else 'off'} ({why})")
    compile.apply(task.model, on)
    try:
        return fit(task, *loaders, s.choice, run, s.cfg.epochs, max_batches=s.max_batches,
                   checkpoint_minutes=s.cfg.checkpoint_minutes, dist=s.dist, device=s.device,
                   compiled=on)
    finally:
        run.close()


def load_best_into(s: Session, task: Task, model_config: dict) -> dict:
    """Load the run's best.pt (or, saying so, its newest loadable checkpoint) into
    `task.model`; return the checkpoint state."""
    run = s.open_run(model_config)
    state = run.checkpoints.best()
    task.model.load_state_dict(state["model"])
    return state
