"""Who this process is among the training processes, and the few collectives the loop needs.

Three kinds: "none" (one process), "ddp" (torch.distributed, started by torchrun: Kaggle T4 x2,
or gloo on CPUs in tests) and "xla" (torch_xla.launch over the TPU chips). The loop asks only
`main`, `reduce_sum`, `wrap_model`, `average_gradients` and `unwrap`; a session asks
`device_count`: how many processes it trains on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    kind: str = "none"  # "none" | "ddp" | "xla"

    @property
    def main(self) -> bool:
        """Only the main process logs, writes checkpoints and metrics."""
        return self.rank == 0

    def reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over all processes (identity for one process)."""
        if self.kind == "ddp":
            import torch.distributed as td

            td.all_reduce(tensor)
        elif self.kind == "xla" and self.world_size > 1:
            from lib.runtime import xla

            tensor = xla.all_reduce_sum(tensor)
        return tensor

    def average_gradients(self, model: nn.Module) -> None:
        """Each gradient's mean over the processes, as DDP's backward leaves it (for a step
        whose backward passes all ran under `no_sync`)."""
        if self.kind != "ddp" or self.world_size == 1:
            return
        import torch.distributed as td

        for p in model.parameters():
            if p.grad is not None:
                td.all_reduce(p.grad)
                p.grad.div_(self.world_size)

    def wrap_model(self, model: nn.Module, device: torch.device) -> nn.Module:
        """DDP averages gradients in backward; on XLA `optimizer_step` does it instead."""
        if self.kind != "ddp":
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def barrier(self) -> None:
        if self.kind == "ddp":
            import torch.distributed as td

            td.barrier()


CPU_DEVICES_ENV = "TA_CPU_DEVICES"  # tests: N gloo processes stand in for N devices


def device_count(choice, platform, environ=os.environ) -> int:
    """How many processes (one device each) a session of `platform` may train on with
    `choice` (a `lib.runtime.device.DeviceChoice`): the platform's devices this machine shows
    (on XLA, one process unless on TPU chips)."""
    if choice.type == "cpu" and environ.get(CPU_DEVICES_ENV) and platform.devices > 1:
        return max(1, min(platform.devices, int(environ[CPU_DEVICES_ENV])))
    if choice.type == "cuda":
        return min(platform.devices, torch.cuda.device_count())
    if choice.type == "xla" and platform.devices > 1:
        from lib.runtime import xla

        return platform.devices if xla.device_type() == "TPU" else 1
    return 1


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside a DDP wrapper (what checkpoints store)."""
    return model.module if hasattr(model, "module") else model


def from_torchrun(environ=os.environ) -> Dist:
    """The Dist torchrun describes through RANK / WORLD_SIZE / LOCAL_RANK."""
    return Dist(rank=int(environ["RANK"]), world_size=int(environ["WORLD_SIZE"]),
                local_rank=int(environ.get("LOCAL_RANK", 0)), kind="ddp")


def init_ddp(dist: Dist, device_type: str) -> None:
    """Join the process group: NCCL between GPUs, gloo between CPU processes."""
    import torch.distributed as td

    if device_type == "cuda":
        torch.cuda.set_device(dist.local_rank)
    td.init_process_group("nccl" if device_type == "cuda" else "gloo")


def shutdown(dist: Dist) -> None:
    if dist.kind == "ddp":
        import torch.distributed as td

        if td.is_initialized():
            td.destroy_process_group()
