"""The run folder: writability checks, durable checkpoints, the ETA warning."""

import os
import time

import pytest
import torch

from lib.runs import folder as run_mod
from lib.runs.folder import RunFolder
from lib.runtime.clock import Clock
from lib.runtime.platforms import storage


def make(tmp_path, **kw):
    return RunFolder(tmp_path / "out", "w", {"m": 1}, tensorboard=False, progress=False, **kw)


def test_out_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(ValueError, match="OUT_DIR '.*out' is a file, not a folder"):
        make(tmp_path)


def test_unwritable_out_dir_is_refused(tmp_path, monkeypatch):
    def read_only(self, *a, **k):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(run_mod.Path, "write_text", read_only)
    with pytest.raises(ValueError, match=r"OUT_DIR '.*' is not writable \(Read-only file system\)"):
        make(tmp_path)


def test_every_checkpoint_and_its_rename_are_fsynced(tmp_path, monkeypatch):
    """Each file whole on disk before its rename, and the rename itself synced; each
    checkpoint's completion marker last, after best.pt's (lib.base.durable)."""
    synced, real_fsync = [], os.fsync

    def fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    make(tmp_path).save({"w": torch.ones(1)}, 1, 0, best=True)
    files = [n for n in synced if n.endswith(".tmp")]  # written under a temporary name
    assert len(files) == 4 and files[0].startswith(".ckpt-e0001-b000000.pt.")
    assert files[1].startswith(".best.pt.") and files[2].startswith(".best.pt.done.")
    assert files[3].startswith(".ckpt-e0001-b000000.pt.done.")
    assert synced.count("checkpoints") == 4


@pytest.mark.parametrize("runtime, advice", [
    ("kaggle", "Save Version again with this version's output attached"),
    ("colab", "re-run the notebook: it resumes from the run folder on Drive")])
def test_eta_beyond_the_time_left_warns_once_with_the_platforms_fix(tmp_path, capsys, runtime,
                                                                    advice, monkeypatch):
    """Measured against the time this session has left (10 of 12 h gone: 2 h), not the
    whole limit: 5 h of training fit in 12 h but not in the 2 h left."""
    monkeypatch.setenv("TA_COLAB_DRIVE", str(tmp_path / "drive"))
    (tmp_path / "drive" / "MyDrive").mkdir(parents=True)  # Drive mounted
    clock = Clock(time.time() - 10 * 3600, 12.0)
    run = make(tmp_path, clock=clock, storage=storage(runtime))
    run.begin([], 0)
    record = {"epoch": 1, "seconds": 3600.0, "samples_per_s": 10.0, "train_loss": 1.0}
    run.end_epoch(record, epochs=6, progress=run.progress(1))
    run.end_epoch(dict(record, epoch=2), epochs=6, progress=run.progress(1))
    out = capsys.readouterr().out
    assert out.count("WARNING") == 1
    assert "the remaining 5.0 h of training exceed the 2.0 h left in this session" in out
    assert "ETA 5.0 h" in out and advice in out and "now at epoch 1" in out


def test_no_warning_without_a_limit(tmp_path, capsys):
    run = make(tmp_path)  # a local session
    run.begin([], 0)
    run.end_epoch({"epoch": 1, "seconds": 3600.0, "samples_per_s": 1.0}, 300, run.progress(1))
    assert "WARNING" not in capsys.readouterr().out


def test_no_warning_within_the_limit(tmp_path, capsys):
    run = make(tmp_path, session_hours=12.0)
    run.begin([], 0)
    run.end_epoch({"epoch": 1, "seconds": 60.0, "samples_per_s": 1.0}, 3, run.progress(1))
    assert "WARNING" not in capsys.readouterr().out


def test_only_the_main_process_writes(tmp_path):
    run = RunFolder(tmp_path / "o", "w", {}, main=False, tensorboard=False)
    run.begin([], 0)
    run.save({"w": torch.ones(1)}, 1, 0)
    run.end_epoch({"epoch": 1, "seconds": 1.0, "samples_per_s": 1.0}, 2, run.progress(1))
    assert not (tmp_path / "o").exists()
