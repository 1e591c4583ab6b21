"""One process of two (gloo on CPUs) taking STEPS optimizer steps of a GLOBAL batch through
`Backend.train_step`, where rank 1 alone runs out of memory in the first step's second
micro-batch, after the first one's backward. Started by tests/test_distributed.py with
torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); writes OUT/rank<r>.json
(per step: all-reduces, DDP's all-reduce rounds, the micro-batch after it; the halvings) and
OUT/rank<r>.pt (the weights).

    python -m tests.ddp_one_rank_oom OUT

A hang (one process left waiting in an all-reduce) ends with every thread's stack on stderr
(faulthandler) and exit code 1 well before the test's own timeout, and gloo's collectives give
up after GLOO_SECONDS, so the test fails loudly instead of holding CI.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as td
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from lib.runtime.device import Probe, choose_device
from lib.runtime.distributed import Dist
from lib.runtime.platforms import get_platform
from lib.training import batch as batches
from lib.training.backend import Backend
from lib.training.batch import BatchPlan
from lib.training.loop import Task

GLOBAL, FIRST_MICRO, STEPS = 16, 4, 3
GLOO_SECONDS, HANG_SECONDS = 20, 45


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s global batch, the same in every process (each takes its share)."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(GLOBAL, 6, generator=g), torch.randint(0, 3, (GLOBAL,), generator=g)


def optimizer(net: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)


def main(out: Path) -> None:
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    td.init_process_group("gloo", timeout=datetime.timedelta(seconds=GLOO_SECONDS))
    dist = Dist(rank=rank, world_size=world, local_rank=rank, kind="ddp")
    net = dist.wrap_model(model(), torch.device("cpu"))

    counts = {"all_reduce": 0, "rounds": 0}
    all_reduce = td.all_reduce

    def counted(*args, **kwargs):  # every all-reduce: the Backend's and DDP's (the hook's)
        counts["all_reduce"] += 1
        return all_reduce(*args, **kwargs)

    def hook(state, bucket):  # DDP's own all-reduce of a bucket of gradients (one here)
        counts["rounds"] += 1
        return default_hooks.allreduce_hook(state, bucket)

    td.all_reduce = counted
    net.register_comm_hook(None, hook)

    cap_calls = [0]
    check_cap = batches.check_cap

    def smaller_on_rank_1(cap, samples):  # this device alone is full at a second micro-batch
        cap_calls[0] += 1
        if rank == 1 and cap_calls[0] == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB "
                                         "(planted on rank 1)")
        check_cap(cap, samples)

    batches.check_cap = smaller_on_rank_1
    halvings = []
    choice = choose_device("cpu", get_platform("kaggle_t4x2"), Probe(), environ={})
    backend = Backend(choice, torch.device("cpu"), dist,
                      BatchPlan(GLOBAL, world, FIRST_MICRO, auto=True, where="a small GPU"),
                      on_plan=lambda old, new: halvings.append([old.micro, new.micro]))
    task = Task(net, nn.functional.cross_entropy, optimizer(net))
    steps = []
    for step in range(STEPS):
        x, y = global_batch(step)
        share = GLOBAL // world
        counts.update(all_reduce=0, rounds=0)
        backend.train_step(task, [x[rank * share:(rank + 1) * share],
                                  y[rank * share:(rank + 1) * share]])
        steps.append(dict(counts, micro=backend.plan.micro))
    (out / f"rank{rank}.json").write_text(json.dumps({"steps": steps, "halvings": halvings}))
    torch.save(net.module.state_dict(), out / f"rank{rank}.pt")
    td.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
