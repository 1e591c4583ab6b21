"""Data parallelism on CPUs: two gloo processes started by torchrun through lib.launch."""

import json
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from lib.data.common import make_loader
from lib.launch import launch
from lib.session import start
from lib.training.config import RunConfig
from lib.training.loop import Task, fit

pytestmark = pytest.mark.notebook  # multi-process: slow-ish


@dataclass
class ToyConfig(RunConfig):
    WORKLOAD = "fashion_mnist"  # borrows its batch-size table; the data are below
    epochs: int = 2
    lr: float = 0.05


class Blobs(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.arange(n) % 3
        self.x = torch.randn(n, 6, generator=g) + 1.5 * nn.functional.one_hot(self.y, 6)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i] + 0.05 * torch.randn(6), self.y[i]  # seeded per sample


def toy_train(s):
    """A workload without dropout, so one process and two can compute the same thing."""
    dist = s.dist
    torch.manual_seed(s.cfg.seed)
    model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3)).to(s.device)
    task = Task(model, nn.functional.cross_entropy,
                torch.optim.SGD(model.parameters(), lr=s.cfg.lr, momentum=0.9))
    train = make_loader(Blobs(192, 0), s.batch_size, s.choice, train=True, seed=s.cfg.seed,
                        rank=dist.rank, world_size=dist.world_size)
    test = make_loader(Blobs(60, 1), 30, s.choice, train=False, seed=s.cfg.seed)
    run = s.open_run({"toy": 1})
    history = fit(task, train, test, s.choice, run, s.cfg.epochs, dist=dist, device=s.device,
                  checkpoint_minutes=s.cfg.checkpoint_minutes, plan=s.plan)
    run.close()
    torch.save(model.state_dict(), s.out_dir / f"rank{dist.rank}.pt")
    return history


def session(tmp_path, name, batch, **changes):
    cfg = ToyConfig(platform="colab_t4", device="cpu", out_dir=str(tmp_path / name),
                    batch_size=batch, seed=4, **changes)
    return start(cfg)


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, monkeypatch):
    """Also in micro-batches: one process takes its 32 whole; the two processes, on devices
    that hold 5 samples a step (TA_TEST_MEMORY_CAP), agree in their first step to halve 16
    to 8 to 4 (every backward's all-reduce held back until they agree), then accumulate
    4 x 4 (DDP's all-reduce on the last micro-batch only, `no_sync` on the others)."""
    single = launch(toy_train, session(tmp_path, "one", 32))
    monkeypatch.setenv("TA_TEST_MEMORY_CAP", "5")  # the ranks inherit it
    double = launch(toy_train, session(tmp_path, "two", 16), nprocs=2)
    rows = [json.loads(line) for line in (tmp_path / "two" / "sessions.jsonl").open()]
    assert [(r["micro_batch"], r["accumulation"], r["micro_batch_found"]) for r in rows] == [
        (4, 4, True)]
    w0 = torch.load(tmp_path / "two" / "rank0.pt", weights_only=True)
    w1 = torch.load(tmp_path / "two" / "rank1.pt", weights_only=True)
    w = torch.load(tmp_path / "one" / "rank0.pt", weights_only=True)
    for k in w:
        assert torch.equal(w0[k], w1[k]), k  # DDP keeps the replicas bit-identical
        # Same data and gradients, summed in another order: equal up to float rounding.
        torch.testing.assert_close(w0[k], w[k], rtol=1e-5, atol=1e-6)
    assert [r["epoch"] for r in double] == [1, 2]
    assert double[-1]["train_samples"] == single[-1]["train_samples"] == 192
    assert double[-1]["train_loss"] == pytest.approx(single[-1]["train_loss"], rel=1e-5)
    assert not (tmp_path / "two" / "rank1").exists()
    assert len(list((tmp_path / "two" / "checkpoints").glob("ckpt-*.pt"))) == 2  # rank 0 only


@pytest.fixture(scope="module")
def one_rank_oom(tmp_path_factory):
    """tests/ddp_one_rank_oom.py on two gloo processes: rank 1 alone runs out of memory in
    the first step's second micro-batch, after the first one's backward."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("one_rank_oom")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.ddp_one_rank_oom", str(out)], cwd=root, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1"))
        for r in (0, 1)]
    said = []
    for p in procs:  # both, each to its end: a rank left waiting says where (its stacks)
        try:  # the worker ends a hang itself (gloo's timeout, faulthandler) before this
            said.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            said.append(p.communicate()[0])
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{said[r][-6000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)], [
        torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]


def test_an_out_of_memory_on_one_rank_alone_halves_both_and_matches_one_process(one_rank_oom):
    """The case that could leave the other rank waiting forever in an all-reduce: rank 1 alone
    runs out of memory after a backward, rank 0's step succeeds. Both learn it (one
    all-reduce of a flag, every backward's held back until then), both halve 4 -> 2 and redo
    the step, and the weights are those of one process taking the whole global batch."""
    from tests import ddp_one_rank_oom as w

    records, weights = one_rank_oom
    assert [r["halvings"] for r in records] == [[[4, 2]], [[4, 2]]]
    assert [[s["micro"] for s in r["steps"]] for r in records] == [[2] * w.STEPS] * 2
    net = w.model()
    opt = w.optimizer(net)
    for step in range(w.STEPS):
        x, y = w.global_batch(step)
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    for k, v in net.state_dict().items():
        assert torch.equal(weights[0][k], weights[1][k]), k  # the replicas stay identical
        torch.testing.assert_close(weights[0][k], v, rtol=1e-5, atol=1e-6)


def test_a_step_in_micro_batches_all_reduces_once(one_rank_oom):
    """DDP's all-reduce runs once per optimizer step, on the last micro-batch's backward
    (`no_sync` on the 3 others), not once per micro-batch. The first step holds every
    backward's back: flags (the failed try, the redo), then each gradient once."""
    from tests import ddp_one_rank_oom as w

    records, _ = one_rank_oom
    params = len(list(w.model().parameters()))
    for r in records:
        first, *later = r["steps"]
        assert (first["rounds"], first["all_reduce"]) == (0, 2 + params)
        assert [(s["rounds"], s["all_reduce"]) for s in later] == [(1, 1)] * (w.STEPS - 1)


def test_a_function_defined_in_a_notebook_is_refused_with_the_fix(tmp_path):
    def local_train(s, dist):
        return []

    with pytest.raises(ValueError, match="Move it into a module under lib/"):
        launch(local_train, session(tmp_path, "x", 16), nprocs=2)


def test_a_distributed_run_killed_mid_epoch_loses_at_most_one_checkpoint_interval(
        tmp_path, monkeypatch, capfd):
    """Two gloo processes save mid-epoch when the main one says so (every step here: the
    interval is ~0); both are SIGKILLed at their 8th step (epoch 2, 7 steps done), and the
    relaunched run resumes at epoch 2, batch 1: only the step in flight is lost. The epoch's
    sums span the kill, so it ends with the uninterrupted run's numbers. Given a third epoch,
    the finished run resumes on every rank (the ranks' weights equal)."""
    clean = launch(toy_train, session(tmp_path, "clean", 16), nprocs=2)
    s = session(tmp_path, "killed", 16, checkpoint_minutes=1e-9)
    monkeypatch.setenv("TA_FAILPOINTS", "train.step@8")
    with pytest.raises(RuntimeError, match="torchrun exited"):
        launch(toy_train, s, nprocs=2)
    monkeypatch.delenv("TA_FAILPOINTS")
    capfd.readouterr()
    history = launch(toy_train, s, nprocs=2)
    # the checkpoint counts the optimizer steps and samples of all processes: 6 + 1 of 32
    assert ("at epoch 1, batch 1 (1 epochs in the history; 7 optimizer steps, 224 samples)"
            in capfd.readouterr().out)
    assert [r["epoch"] for r in history] == [1, 2]
    assert history[-1]["train_samples"] == clean[-1]["train_samples"] == 192
    assert history[-1]["train_loss"] == pytest.approx(clean[-1]["train_loss"], rel=1e-5)
    w = torch.load(tmp_path / "clean" / "rank0.pt", weights_only=True)
    for name in ("rank0.pt", "rank1.pt"):
        wk = torch.load(tmp_path / "killed" / name, weights_only=True)
        for k in w:
            torch.testing.assert_close(wk[k], w[k], rtol=1e-5, atol=1e-6)
    # A finished run given one more epoch resumes on every rank from its last epoch's end.
    s.cfg.epochs = 3
    history = launch(toy_train, s, nprocs=2)
    assert [r["epoch"] for r in history] == [1, 2, 3]
    w0, w1 = (torch.load(tmp_path / "killed" / n, weights_only=True) for n in ("rank0.pt",
                                                                             "rank1.pt"))
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert any(not torch.equal(w0[k], w[k]) for k in w0)  # the third epoch trained
