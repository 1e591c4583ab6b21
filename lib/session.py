"""From a validated config to everything a notebook needs to train: `start(cfg)`.

It picks the device (saying in one line what it fell back to and why), seeds torch,
resolves the data and output folders, the batch size and how many devices to train on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from lib.config import RunConfig
from lib.device import DeviceChoice, choose_device
from lib.distributed import Dist
from lib.platforms import Platform, get_platform
from lib.run import Run

SMOKE_MAX_BATCH = 32  # smoke runs use small batches so the sample data holds several


@dataclass
class Session:
    cfg: RunConfig
    platform: Platform
    runtime: str
    choice: DeviceChoice
    data_dir: Path
    out_dir: Path
    batch_size: int  # per device
    max_batches: int | None
    devices: int = 1  # how many devices launch() trains on
    dist: Dist = field(default_factory=Dist)

    @property
    def device(self) -> torch.device:
        """This process's device (its own GPU under DDP)."""
        if self.choice.type == "cuda" and self.dist.world_size > 1:
            return torch.device("cuda", self.dist.local_rank)
        return self.choice.torch_device

    def open_run(self, model_config: dict, out_dir: Path | None = None) -> Run:
        """The run folder (checkpoints, metrics, TensorBoard); only the main process writes."""
        config = dict(self.cfg.to_dict(), resolved={
            "device": self.choice.type, "precision": self.choice.precision.name,
            "runtime": self.runtime, "batch_size": self.batch_size,
            "world_size": self.dist.world_size})
        return Run(out_dir or self.out_dir, self.cfg.WORKLOAD, config, model_config,
                   session_hours=self.platform.session_hours, main=self.dist.main)


def _device_count(choice: DeviceChoice, platform: Platform) -> int:
    if platform.devices == 1:
        return 1
    if choice.type == "cuda":
        return min(platform.devices, torch.cuda.device_count())
    if choice.type == "xla":
        from lib import xla

        return platform.devices if xla.device_type() == "TPU" else 1
    return 1


def start(cfg: RunConfig, runtime: str | None = None, dist: Dist | None = None,
          announce: bool = True) -> Session:
    """Choose the device and resolve the run's settings; the main process says what it chose
    (unless `announce` is False: a grid of runs says it once)."""
    dist = dist or Dist()
    platform = get_platform(cfg.platform)
    choice = choose_device(cfg.device, platform)
    runtime = runtime or cfg.runtime
    devices = _device_count(choice, platform)
    if cfg.seed is not None:  # None: a grid whose runs each bring their own seed
        torch.manual_seed(cfg.seed)
    data_dir, out_dir = cfg.paths()
    batch = cfg.resolved_batch_size()
    if cfg.smoke:
        batch = min(batch, SMOKE_MAX_BATCH)
    if dist.main and announce:
        many = f" x {devices} devices" if devices > 1 else ""
        print(f"{platform.title} notebook on the {runtime} runtime -> {choice.describe()}{many}")
        if devices < platform.devices and choice.type == platform.accelerator:
            print(f"only {devices} of the {platform.devices} devices of {platform.title} are "
                  f"visible: training on {devices}. On Kaggle, set Accelerator to "
                  f"{platform.gpu} in the notebook's sidebar to use them all.")
        if cfg.smoke:
            print(f"SMOKE: {cfg.smoke_batches} batches of {batch} per epoch")
    return Session(cfg, platform, runtime, choice, data_dir, out_dir, batch,
                   cfg.smoke_batches if cfg.smoke else None, devices, dist)
