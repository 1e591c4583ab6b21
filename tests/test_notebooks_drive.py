"""The Colab notebooks of all four workloads against the latency Drive stand-in
(tests/drive_fuse.py: a FUSE mount, 20 ms per operation, 32 MB/s), mounted before the kernel
starts, as a Drive a user mounted earlier: data on scratch (the VM's disk), the run folder on
"Drive" with every checkpoint's completion marker; a run killed mid-copy of a checkpoint and
re-run in a new session (a new VM: empty scratch) resumes from Drive, skips the cut copy, and
ends where an uninterrupted run ends. The stand-in needs /dev/fuse and fuse3 (`make fuse`):
without them these tests fail, never skip.
"""

import os

import pytest
import torch

from lib.base import durable
from lib.runs.records import read_jsonl
from tests.drive_fuse import mounted
from tests.fault_harness import strip_timing
from tests.notebook_run import FAKES, epoch_lines, execute, stream_text

pytestmark = pytest.mark.notebook
TINY = {  # smoke settings of each workload's notebook tests, smaller where it costs nothing
    "fashion_mnist": dict(EPOCHS=2),
    "mamba_spike": dict(EPOCHS=2, SMOKE_BATCHES=3, BATCH_SIZE=4, N_TIME_BINS=8, D_MODEL=16,
                        N_LAYERS=1, SPIKE_CHANNELS=8),
    "mshnet": dict(EPOCHS=2, WARM_EPOCHS=0, SMOKE_BATCHES=2, BATCH_SIZE=4),
    "optimizer_study": dict(EPOCHS=1, SMOKE_BATCHES=2, OPTIMIZERS=["sgd"], SEEDS=[0]),
}
KILL = "checkpoint.publish@2"  # mid-copy of epoch 2's checkpoint to Drive (one save an epoch)


@pytest.fixture(scope="module")
def drive(tmp_path_factory):
    """One Drive stand-in for the module, with MyDrive in it (each workload has its folder)."""
    root = tmp_path_factory.mktemp("colab")
    with mounted(root / "backing", root / "drive") as m:
        (m.path / "MyDrive").mkdir()
        yield m


def run(drive, workload, tmp_path, content="content", kill=None, **params):
    """The workload's colab_t4 notebook on the stand-in, /content at tmp_path / `content`."""
    env = {"PYTHONPATH": str(FAKES), "COLAB_RELEASE_TAG": "release-colab-test",
           "TA_COLAB_DRIVE": str(drive.path), "TA_FAKE_COLAB_LOG": str(tmp_path),
           "TA_COLAB_CONTENT": str(tmp_path / content)}
    if kill:
        env["TA_FAILPOINTS"] = kill
    params = dict(SMOKE=True, SAMPLE_DATA=True, **TINY[workload], **params)
    return execute(workload, "colab_t4", tmp_path / f"nb-{content}", env=env, **params)


def killed(drive, workload, tmp_path, **params):
    """Run with the kill armed: the kernel dies (SIGKILL) half-way through a copy to Drive."""
    from nbclient.exceptions import DeadKernelError

    with pytest.raises(DeadKernelError):
        run(drive, workload, tmp_path, kill=KILL, **params)


def check_on_drive(drive, workload, tmp_path, text, content="content"):
    """Data on scratch, none on Drive; the run folder on Drive, every checkpoint whole with
    its marker; nothing left in the staging folder; the line that says where things are."""
    scratch = tmp_path / content / "train-anywhere"
    runs = drive.root / "MyDrive" / "train-anywhere" / "runs" / workload
    assert (scratch / "data" / "sample").is_dir()
    assert not (drive.root / "MyDrive" / "train-anywhere" / "data").exists()
    files = sorted(runs.rglob("ckpt-*.pt")) + sorted(runs.rglob("best.pt"))
    assert files and list(runs.rglob("metrics.jsonl"))
    for path in files:
        assert durable.check(path, path.read_bytes()) is None, path
    assert not [p for p in scratch.rglob("*") if "staging" in p.parts and p.is_file()]
    assert (f"data in {scratch / 'data'}; results in {drive.path / 'MyDrive'}/train-anywhere/"
            f"runs/{workload}") in text
    return runs


def final_state(run_dir):
    newest = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    return newest.name, torch.load(newest, map_location="cpu", weights_only=True)["model"]


@pytest.mark.parametrize("workload", ["mshnet", "optimizer_study"])
def test_colab_notebook_keeps_data_on_scratch_and_its_run_on_drive(drive, workload, tmp_path):
    text = stream_text(run(drive, workload, tmp_path))
    runs = check_on_drive(drive, workload, tmp_path, text)
    assert "Drive flushed and unmounted" in text
    if workload == "optimizer_study":
        assert (runs / "results.csv").is_file()


def test_a_killed_colab_run_resumes_from_drive_as_if_never_killed(drive, tmp_path):
    """Killed half-way through copying epoch 2's checkpoint; DriveFS is taken to have pushed
    the cut file under its final name (the case the marker exists for). The re-run, on a new
    VM, skips it, resumes from epoch 1 and ends with the uninterrupted run's records and
    weights."""
    workload = "fashion_mnist"
    clean = run(drive, workload, tmp_path)  # the default OUT_DIR, on Drive
    runs = check_on_drive(drive, workload, tmp_path, stream_text(clean))
    out = drive.path / "MyDrive" / "killed"
    killed(drive, workload, tmp_path, OUT_DIR=str(out))
    ckpts = drive.root / "MyDrive" / "killed" / "checkpoints"
    (cut,) = ckpts.glob(".ckpt-e0002-b000000.pt.*.tmp")
    assert 0 < cut.stat().st_size < (ckpts / "ckpt-e0001-b000000.pt").stat().st_size
    os.replace(cut, ckpts / "ckpt-e0002-b000000.pt")
    nb = run(drive, workload, tmp_path, content="content-next-session", OUT_DIR=str(out))
    text = stream_text(nb)
    assert "ckpt-e0002-b000000.pt is not a complete copy (no completion marker" in text
    assert f"resumed from {out / 'checkpoints' / 'ckpt-e0001-b000000.pt'} at epoch 1" in text
    assert [line.split()[1] for line in epoch_lines(nb)] == ["2/2"]
    resumed, history = (read_jsonl(d / "metrics.jsonl") for d in (ckpts.parent, runs))
    assert [r["epoch"] for r in resumed] == [1, 2]
    assert strip_timing(resumed) == strip_timing(history)
    (name_a, a), (name_b, b) = final_state(runs), final_state(ckpts.parent)
    assert name_a == name_b and all(torch.equal(a[k], b[k]) for k in a)
    assert all(durable.check(p, p.read_bytes()) is None for p in ckpts.glob("*.pt"))


def test_a_new_session_copies_the_kept_frames_back_and_resumes_from_drive(drive, tmp_path):
    """Mamba-Spike: the first session frames the recordings on scratch and keeps the packed
    frames on Drive; killed mid-copy of a checkpoint, the next session (an empty VM disk)
    copies the frames back, checked, frames nothing, and resumes from Drive."""
    workload = "mamba_spike"
    killed(drive, workload, tmp_path)
    kept = drive.root / "MyDrive" / "train-anywhere" / "prepared"
    assert len(list(kept.glob("*/MANIFEST.json"))) == 2  # train and test
    nb = run(drive, workload, tmp_path, content="content-next-session")
    text = stream_text(nb)
    check_on_drive(drive, workload, tmp_path, text, content="content-next-session")
    assert text.count("copied the prepared data kept in") == 2
    assert "0 recordings framed into" in text
    assert "at epoch 1, batch 0" in text and "resumed from" in text
    runs = drive.root / "MyDrive" / "train-anywhere" / "runs" / workload
    assert [r["epoch"] for r in read_jsonl(runs / "metrics.jsonl")] == [1, 2]
