"""Micro-batches and gradient accumulation in the loop, with toy models on the CPU: exact where
the model has no batch statistics, an out-of-memory step redone from the same state, a resume
exact whatever the micro-batch of either session (the checkpoint counts optimizer steps and
samples). The notebooks and the command line meet it in tests/test_notebooks_fashion.py."""

from __future__ import annotations

import io
import json

import pytest
import torch
from torch import nn

from lib.base import durable
from lib.runs.folder import RunFolder
from lib.runs.identity import read_sessions
from lib.training.backend import Backend
from lib.training.batch import MEMORY_CAP_ENV, BatchPlan, OutOfMemory
from lib.training.loop import Task, fit
from lib.training.metrics import Accuracy
from tests.test_train import CPU, killed_after, loaders, strip


class Float64(nn.Module):
    def forward(self, x):
        return x.double()


def exact_task(seed=0, interrupt_after=None):
    """No dropout, no batch statistics, float64: accumulation is exact up to rounding. SGD with
    momentum and an lr that moves every optimizer step."""
    torch.manual_seed(seed)
    model = nn.Sequential(Float64(), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (1 + step))
    return Task(model, killed_after(model, interrupt_after), opt,
                metrics=lambda: [Accuracy(2)], scheduler=sched, scheduler_interval="step")


def train(out, epochs, task, plan, minutes=10.0):
    run = RunFolder(out, "toy", {"hidden": 16}, tensorboard=False, progress=False,
                    session={"device": "cpu"})
    history = fit(task, *loaders(), CPU, run, epochs, checkpoint_minutes=minutes, plan=plan)
    run.close()
    return history


def newest(folder):
    path = sorted((folder / "checkpoints").glob("ckpt-*.pt"))[-1]
    return torch.load(path, map_location="cpu", weights_only=True), path


def test_one_global_batch_gives_the_gradients_of_its_accumulated_micro_batches():
    """One batch of 24 whole, in 4 x 6 and in 3 x 8: the same step (float64, SGD at lr 1:
    the weights move by the gradient), the same summed loss. The GradScaler steps once per
    optimizer step: with growth every 2 steps, two accumulated steps double its scale once."""
    x = torch.randn(24, 8, generator=torch.Generator().manual_seed(0))
    batch = [x, torch.arange(24) % 2]
    after = {}
    for micro in (24, 6, 8):
        task = exact_task()
        task.optimizer = torch.optim.SGD(task.model.parameters(), lr=1.0)
        loss, n = Backend(CPU, plan=BatchPlan(24, micro=micro)).train_step(task, batch)
        after[micro] = ([p.detach().clone() for p in task.model.parameters()], float(loss), n)
    for micro in (6, 8):
        for p, q in zip(after[24][0], after[micro][0], strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-14)
        assert after[micro][1:] == (pytest.approx(after[24][1], rel=1e-12), 24)
    task = exact_task()
    backend = Backend(CPU, plan=BatchPlan(24, micro=6))
    backend.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    for _ in range(2):
        backend.train_step(task, batch)
    assert backend.scaler.get_scale() == 2048.0


def test_an_out_of_memory_step_is_redone_from_the_same_state_with_half_the_micro_batch(
        tmp_path, capsys):
    """A device that runs out of memory in the second micro-batch of 8 of the first step,
    after the first one moved the dropout generator and BatchNorm's running statistics: the
    step is redone in micro-batches of 4, and the run is bit for bit the one that took 4 from
    its start (no sample skipped or seen twice, the state as before the failed step)."""

    def task_with_a_small_device(fail):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
                              nn.Linear(16, 2))
        calls = {"n": 0}

        def forward(x, inner=model.forward):
            calls["n"] += 1
            if fail and calls["n"] == 2 and model.training and len(x) == 8:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
            return inner(x)

        model.forward = forward
        return Task(model, nn.functional.cross_entropy,
                    torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                    metrics=lambda: [Accuracy(2)])

    found = train(tmp_path / "found", 2, task_with_a_small_device(True),
                  BatchPlan(16, micro=8, auto=True, where="a small GPU"))
    said = capsys.readouterr().out
    assert said.count("BatchNorm normalises each micro-batch of 8, not the 16 samples of a "
                      "device's step: gradient accumulation is exact only for models without "
                      "batch statistics") == 1  # said once, when the session accumulates
    fixed = train(tmp_path / "fixed", 2, task_with_a_small_device(False), BatchPlan(16, micro=4))
    assert strip(found) == strip(fixed)
    assert torch.equal(*[newest(tmp_path / name)[0]["model"]["1.running_mean"]
                         for name in ("found", "fixed")])
    (row,) = read_sessions(tmp_path / "found")
    assert (row["micro_batch"], row["accumulation"], row["micro_batch_found"],
            row["micro_batch_on"], row["batch_norm"]) == (4, 4, True, "a small GPU", True)


def test_the_memory_cap_stands_in_for_a_small_device_in_training_and_evaluation(
        tmp_path, monkeypatch, capsys):
    """TA_TEST_MEMORY_CAP=5: a step of more than 5 samples raises torch.OutOfMemoryError
    where a real device would; a session starting at 16 per step finds 4 (16 -> 8 -> 4),
    says so, records it, evaluates in pieces of 4, and matches a run at 4 from the start."""
    monkeypatch.setenv(MEMORY_CAP_ENV, "5")
    found = train(tmp_path / "found", 1, exact_task(), BatchPlan(16, auto=True,
                                                                 where="the CPU"))
    lines = [line for line in capsys.readouterr().out.splitlines() if "out of memory" in line]
    assert lines == [
        "out of memory at 16 per step on the CPU: the step redone from the same state; global "
        "batch 16: 8 per step x 2 accumulated, on 1 device",
        "out of memory at 8 per step on the CPU: the step redone from the same state; global "
        "batch 16: 4 per step x 4 accumulated, on 1 device"]
    assert read_sessions(tmp_path / "found")[-1]["micro_batch"] == 4
    with pytest.raises(OutOfMemory) as info:  # MICRO_BATCH set by hand: the fix, in a line
        train(tmp_path / "whole", 1, exact_task(), BatchPlan(16, micro=16))
    assert info.value.one_line().startswith("OutOfMemory: out of memory at 16 samples per step "
                                            "on the CPU (out of memory: 16 samples in one step")
    assert info.value.one_line().endswith('; set MICRO_BATCH = 8 (or "auto") and run again: '
                                          "it resumes from the newest checkpoint.")
    monkeypatch.delenv(MEMORY_CAP_ENV)
    fixed = train(tmp_path / "fixed", 1, exact_task(), BatchPlan(16, micro=4))
    assert strip(found) == strip(fixed)


def test_a_run_resumed_with_another_micro_batch_matches_one_that_never_stopped(tmp_path):
    """Killed in its second epoch (saving every step) while taking its 16 per step whole, the
    run resumes in micro-batches of 4 and ends where the uninterrupted run ends: the same
    numbers up to float64 rounding, the same per-step learning rates, and its checkpoint
    counts the same optimizer steps and samples. The first session's checkpoint is made to
    look older than the counters: they are derived from its position and history."""
    straight = train(tmp_path / "a", 2, exact_task(), BatchPlan(16))
    with pytest.raises(KeyboardInterrupt):  # killed at step 9 of 12 (loss calls = steps here)
        train(tmp_path / "b", 2, exact_task(interrupt_after=8), BatchPlan(16), minutes=1e-9)
    state, path = newest(tmp_path / "b")
    assert (path.name, state["steps"], state["samples"]) == ("ckpt-e0001-b000002.pt", 8, 128)
    del state["steps"], state["samples"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getvalue())
    durable.mark(path, buffer.getvalue())
    resumed = train(tmp_path / "b", 2, exact_task(seed=7), BatchPlan(16, micro=4))
    a, b = strip(straight), strip(resumed)
    assert [r["lr"] for r in a] == [r["lr"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for k, v in ra.items():
            assert rb[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v), k
    final_a, final_b = newest(tmp_path / "a")[0], newest(tmp_path / "b")[0]
    assert (final_b["steps"], final_b["samples"]) == (final_a["steps"], final_a["samples"]) \
        == (12, 192)
    assert final_b["scheduler"]["last_epoch"] == 12  # one lr step per optimizer step
    for k, v in final_a["model"].items():
        torch.testing.assert_close(final_b["model"][k], v, rtol=1e-9, atol=1e-12)
    rows = [json.loads(line) for line in (tmp_path / "b" / "sessions.jsonl").open()]
    assert [(r["micro_batch"], r["accumulation"]) for r in rows] == [(16, 1), (4, 4)]


@pytest.mark.parametrize("graph", ["forward and backward", "optimizer step"])
def test_an_xla_out_of_memory_after_the_first_step_is_the_one_line_naming_micro_batch(
        monkeypatch, graph):
    """On XLA a step's graphs run at `sync()`: the micro-batch's forward and backward at the
    sync after them, the optimizer step at its own. After the first step no error is redone,
    and RESOURCE_EXHAUSTED at either sync is the same one line with the fix as anywhere else
    (no torch_xla here: a fake sync that raises as torch_xla does)."""
    import dataclasses

    from lib.runtime import xla

    armed, syncs = {"on": False}, []

    def sync():
        syncs.append(armed["on"])
        if armed["on"] == graph:
            raise RuntimeError("Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating "
                               "device buffer: Attempting to allocate 1.2G. That was not "
                               "possible. There are 800.0M free.")

    def optimizer_step(optimizer):
        armed["on"] = "optimizer step" if armed["on"] else False
        optimizer.step()

    monkeypatch.setattr(xla, "sync", sync)
    monkeypatch.setattr(xla, "optimizer_step", optimizer_step)
    monkeypatch.setattr(xla, "compile_count", lambda: 0)  # torch_xla's metrics, faked too
    task = exact_task()
    backend = Backend(dataclasses.replace(CPU, type="xla", where="a TPU v3 core"),
                      torch.device("cpu"), plan=BatchPlan(16, micro=16, auto=True))
    batch = [torch.randn(16, 8), torch.arange(16) % 2]
    backend.train_step(task, batch)  # the first step: no error
    armed["on"] = "forward and backward"
    with pytest.raises(OutOfMemory) as caught:
        backend.train_step(task, batch)
    assert syncs[-1] == graph  # the sync that raised is the one of this case
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("out of memory at 16 samples per step on a TPU v3 core "
                           "(Bad StatusOr access: RESOURCE_EXHAUSTED")
    assert line.endswith("set MICRO_BATCH = 8 (or \"auto\") and run again: it resumes from "
                         "the newest checkpoint.")
