"""The loop: it learns, writes what it promises, and resumes to the very same numbers."""

import dataclasses
import json
import os
import threading

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from lib.data.common import SeededDataset, make_loader
from lib.runs.folder import RunFolder
from lib.runs.records import read_jsonl
from lib.runtime.device import Probe, choose_device
from lib.runtime.platforms import get_platform
from lib.training.loop import Task, fit
from lib.training.metrics import Accuracy
from tests import learning

CPU = choose_device("cpu", get_platform("colab_t4"), Probe(), environ={})
TIMING = ("seconds", "samples_per_s")


class Noisy(torch.utils.data.Dataset):
    """Two Gaussian blobs, with random jitter as 'augmentation' (global torch RNG)."""

    def __init__(self, n=96, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.arange(n) % 2
        self.x = torch.randn(n, 8, generator=g) + 2.0 * self.y[:, None]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i] + 0.1 * torch.randn(8), self.y[i]


def make_task(init_seed=0, interrupt_after=None, per_step=False):
    torch.manual_seed(init_seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if per_step:  # the lr moves every batch (warm-up + cosine in the optimizer study)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (1 + step))
    else:
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.8)
    return Task(model, killed_after(model, interrupt_after), opt,
                metrics=lambda: [Accuracy(2)], scheduler=sched,
                scheduler_interval="step" if per_step else "epoch")


def killed_after(model, interrupt_after=None):
    """Cross-entropy that raises KeyboardInterrupt (a kill) after `interrupt_after` training
    forward passes of `model` (None: never)."""
    calls = {"n": 0}

    def loss_fn(out, y):
        if model.training:
            calls["n"] += 1
            if interrupt_after is not None and calls["n"] > interrupt_after:
                raise KeyboardInterrupt("killed")
        return nn.functional.cross_entropy(out, y)

    return loss_fn


def loaders(seed=3, choice=CPU):
    return (make_loader(Noisy(), 16, choice, train=True, seed=seed),
            make_loader(Noisy(40, seed=1), 16, choice, train=False, seed=seed))


def train(out, epochs, task=None, minutes=10.0, loader_seed=3, **kw):
    task = task or make_task()
    run = RunFolder(out, "toy", {"hidden": 16}, tensorboard=kw.pop("tb", False),
              progress=False)
    history = fit(task, *loaders(loader_seed), CPU, run, epochs, checkpoint_minutes=minutes,
                  **kw)
    run.close()
    return task, history


def strip(history):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in history]


def test_it_learns_and_writes_history_checkpoints_and_tensorboard(tmp_path):
    """Three epochs on two Gaussian blobs. Spread over seeds 0-4 x three CPU settings (one and
    two threads, AVX2 kernels; `python -m bench.bench_learning -k train_loop`): test accuracy
    0.975 in all 15 runs, last epoch's training loss 0.20-0.41 of the first's."""
    seed = learning.seed(0)
    task, history = train(tmp_path, 3, tb=True, task=make_task(init_seed=seed),
                          loader_seed=seed + 3)
    learning.record("train_loop", loss_ratio=history[-1]["train_loss"] / history[0]["train_loss"],
                    accuracy=history[-1]["test_accuracy"])
    assert [r["epoch"] for r in history] == [1, 2, 3]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["test_accuracy"] > 0.8
    assert history[0]["lr"] == pytest.approx(0.1) and history[1]["lr"] == pytest.approx(0.08)
    assert all(r["device"] == "cpu" and r["train_samples"] == 96 for r in history)
    assert read_jsonl(tmp_path / "metrics.jsonl") == json.loads(json.dumps(history))
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert (tmp_path / "checkpoints" / "best.pt").exists()


def test_max_batches_caps_each_epoch(tmp_path):
    _, history = train(tmp_path, 1, max_batches=2)
    assert history[0]["train_samples"] == 32


def test_resume_at_an_epoch_boundary_gives_the_uninterrupted_numbers(tmp_path):
    straight, h_straight = train(tmp_path / "a", 4)
    train(tmp_path / "b", 2)
    resumed, h_resumed = train(tmp_path / "b", 4, task=make_task(init_seed=99))
    assert strip(h_resumed) == strip(h_straight)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert strip(read_jsonl(tmp_path / "b" / "metrics.jsonl")) == strip(h_straight)


@pytest.mark.parametrize("per_step", [False, True], ids=["lr-per-epoch", "lr-per-step"])
def test_resume_in_the_middle_of_an_epoch_gives_the_uninterrupted_numbers(tmp_path, per_step):
    """Also the epoch's recorded lr: the one it started with, though a per-step schedule has
    moved on by the time of the mid-epoch checkpoint."""
    straight, h_straight = train(tmp_path / "a", 2, task=make_task(per_step=per_step))
    with pytest.raises(KeyboardInterrupt):  # killed at step 9 of 12, saving every step
        train(tmp_path / "b", 2, task=make_task(interrupt_after=8, per_step=per_step),
              minutes=1e-9)
    ckpt = sorted((tmp_path / "b" / "checkpoints").glob("ckpt-*.pt"))[-1].name
    assert ckpt == "ckpt-e0001-b000002.pt"  # epoch 2 (index 1), two batches done
    resumed, h_resumed = train(tmp_path / "b", 2, task=make_task(init_seed=7, per_step=per_step))
    assert h_straight[1]["lr"] == pytest.approx(0.1 / (7 if per_step else 1.25))
    assert strip(h_resumed) == strip(h_straight)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_finished_run_is_not_trained_again(tmp_path):
    task, history = train(tmp_path, 2)
    again = make_task(init_seed=5)
    _, history2 = train(tmp_path, 2, task=again)
    assert strip(history2) == strip(history)
    for p, q in zip(task.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(p, q)  # restored from the checkpoint, not retrained


def test_batches_do_not_depend_on_the_number_of_workers():
    two_workers = dataclasses.replace(CPU, num_workers=2)
    a, _ = loaders(choice=CPU)
    b, _ = loaders(choice=two_workers)
    for loader in (a, b):
        loader.sampler.set_epoch(1)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_each_epoch_shuffles_differently_but_reproducibly():
    a, _ = loaders()
    a.sampler.set_epoch(0)
    e0 = [y.tolist() for _, y in a]
    a.sampler.set_epoch(1)
    e1 = [y.tolist() for _, y in a]
    a.sampler.set_epoch(0)
    assert e0 != e1 and e0 == [y.tolist() for _, y in a]


def test_a_training_set_smaller_than_a_batch_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="fewer than one batch of 128.*BATCH_SIZE to at most 96"):
        make_loader(Noisy(), 128, CPU, train=True, seed=0)


def test_the_epoch_after_a_mid_epoch_resume_is_whole():
    """Regression: a resume offset must not shorten the following epochs."""
    a, _ = loaders()
    a.sampler.set_epoch(1, start=32)
    assert len(list(a)) == 4  # 96 - 32 samples, 16 a batch
    assert len(a) == 6  # the epoch's length, which the loop counts batches against


class _Augmenting(Dataset):
    """Samples drawn from the global torch RNG, as random augmentation does."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.rand(3) + i, int(torch.randint(0, 100, ()))


def test_seeded_samples_depend_on_seed_epoch_and_index_only_and_keep_the_global_rng():
    ds = SeededDataset(_Augmenting(), seed=5)
    keys = [(e, i) for e in range(3) for i in range(8)]
    before = torch.get_rng_state()
    first = [ds[k] for k in keys]
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is restored
    torch.rand(7)  # whatever else draws in between changes nothing
    again = [ds[k] for k in reversed(keys)][::-1]
    for (a, la), (b, lb) in zip(first, again, strict=True):
        assert torch.equal(a, b) and la == lb
    assert not torch.equal(first[0][0], first[8][0])  # epochs differ
    assert not torch.equal(first[0][0], SeededDataset(_Augmenting(), seed=6)[(0, 0)][0])


# Held by a thread of the training process while its DataLoader starts workers: as glibc's
# atexit lock was, by a torch_xla thread, when a forked worker hung forever in the XLA lane.
HELD = threading.Lock()


class _WhoLoads(Dataset):
    """Each sample: (the worker's pid, its parent's pid); it needs `HELD`, as a module import
    needs the C library's locks."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if not HELD.acquire(timeout=3):
            raise RuntimeError("deadlocked: a lock held at fork time is never released here")
        HELD.release()
        return torch.tensor([os.getpid(), os.getppid()])


def test_xla_loader_workers_start_from_a_forkserver_without_the_locks_of_training_threads():
    """On XLA a worker forked from the training process inherits every lock its other threads
    held at that moment, locked for good; workers that fork from a forkserver do not (and a
    CUDA run keeps the platform's fork, whose start costs nothing). The choices are the ones
    `choose_device` makes on a Colab TPU and on a T4 (2 workers each)."""
    from tests.fake_cuda import cuda_choice

    xla = choose_device("xla", get_platform("colab_tpu"), Probe(xla_installed=True), environ={})
    assert (xla.num_workers, xla.worker_start) == (2, "forkserver")
    released, holding = threading.Event(), threading.Event()

    def hold():
        with HELD:
            holding.set()
            released.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait()
    try:
        rows = torch.cat(list(make_loader(_WhoLoads(), 4, xla, train=False, seed=0)))
    finally:
        released.set()
        thread.join()
    workers, parents = set(rows[:, 0].tolist()), set(rows[:, 1].tolist())
    assert len(workers) == 2 and os.getpid() not in parents and len(parents) == 1

    cuda = dataclasses.replace(cuda_choice(), pin_memory=False)  # no CUDA here to pin for
    assert (cuda.num_workers, cuda.worker_start) == (2, None)
    rows = torch.cat(list(make_loader(_WhoLoads(), 4, cuda, train=False, seed=0)))
    assert set(rows[:, 1].tolist()) == {os.getpid()}


def test_xla_loader_workers_cut_to_one_by_a_small_dev_shm_still_start_from_the_forkserver():
    """/dev/shm with room for one worker (`shm_workers` cuts 2 to 1): that one worker forks
    from the forkserver too, in the choice `choose_device` makes and in the loader it builds."""
    from lib.runtime.device import SHM_PER_WORKER

    probe = Probe(xla_installed=True, shm_free=int(1.5 * SHM_PER_WORKER))
    xla = choose_device("xla", get_platform("colab_tpu"), probe, environ={})
    assert (xla.num_workers, xla.worker_start) == (1, "forkserver"), xla
    assert any("DataLoader workers 2 -> 1" in note for note in xla.notes), xla.notes
    loader = make_loader(_WhoLoads(), 4, xla, train=False, seed=0)
    assert loader.num_workers == 1
    assert loader.multiprocessing_context.get_start_method() == "forkserver"
