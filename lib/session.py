"""From a validated config to everything a notebook needs to train: `start(cfg)`.

It picks the device (saying in one line what it fell back to and why), seeds torch,
resolves the data and output folders and the batch size, and opens the run folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from lib.config import RunConfig
from lib.device import DeviceChoice, choose_device
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
    batch_size: int
    max_batches: int | None

    @property
    def device(self) -> torch.device:
        return self.choice.torch_device

    def open_run(self, model_config: dict, out_dir: Path | None = None) -> Run:
        """The run folder (checkpoints, metrics, TensorBoard) for this config."""
        return Run(out_dir or self.out_dir, self.cfg.WORKLOAD, self.cfg.to_dict(), model_config,
                   session_hours=self.platform.session_hours)


def start(cfg: RunConfig, runtime: str | None = None) -> Session:
    platform = get_platform(cfg.platform)
    choice = choose_device(cfg.device, platform)
    runtime = runtime or cfg.runtime
    print(f"{platform.title} notebook on the {runtime} runtime -> {choice.describe()}")
    torch.manual_seed(cfg.seed)
    data_dir, out_dir = cfg.paths()
    batch = cfg.resolved_batch_size()
    if cfg.smoke:
        batch = min(batch, SMOKE_MAX_BATCH)
        print(f"SMOKE: {cfg.smoke_batches} batches of {batch} per epoch")
    return Session(cfg, platform, runtime, choice, data_dir, out_dir, batch,
                   cfg.smoke_batches if cfg.smoke else None)
