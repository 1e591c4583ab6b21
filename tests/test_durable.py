"""Checkpoints on a mount synced in the background (Colab's Drive): written on scratch,
copied whole, marker last; resume takes only complete copies (lib/base/durable.py)."""

import errno
import json

import torch

from lib.base import durable
from lib.runs.checkpoints import Checkpoints
from lib.runtime.platforms import Storage, staging

MODEL = {"width": 8}


def staged(tmp_path, logs=None):
    return Checkpoints(tmp_path / "drive" / "ck", "w", MODEL, stage=tmp_path / "scratch",
                       log=(logs.append if logs is not None else lambda m: None))


def state(value):
    return {"weights": torch.full((3,), float(value)), "history": [{"epoch": value}]}


def test_a_staged_checkpoint_reaches_the_folder_whole_with_its_marker(tmp_path):
    c = staged(tmp_path)
    path = c.save(state(1), 1, 0, best=True)
    for name in (path, c.best_path):
        marker = json.loads(durable.marker_path(name).read_text())
        assert marker["size"] == name.stat().st_size
        assert durable.check(name, name.read_bytes()) is None
    assert not list((tmp_path / "scratch").iterdir())  # nothing left on scratch
    c.save(state(2), 2, 0)
    c.save(state(3), 3, 0)
    assert sorted(p.name for p in c.dir.iterdir()) == [  # the oldest went with its marker
        "best.pt", "best.pt.done", "ckpt-e0002-b000000.pt", "ckpt-e0002-b000000.pt.done",
        "ckpt-e0003-b000000.pt", "ckpt-e0003-b000000.pt.done"]
    assert c.latest()["position"] == [3, 0] and c.best()["position"] == [1, 0]


def test_a_copy_that_did_not_finish_is_never_resumed_from(tmp_path):
    """The newest file cut (its marker never written), or whole but its marker from another
    copy: both skipped, saying why; the previous complete checkpoint is used."""
    logs = []
    c = staged(tmp_path, logs)
    c.save(state(1), 1, 0)
    second = c.save(state(2), 2, 0)
    data = second.read_bytes()
    durable.marker_path(second).unlink()
    second.write_bytes(data[: len(data) // 2])
    assert c.latest()["position"] == [1, 0]
    assert "ckpt-e0002-b000000.pt is not a complete copy (no completion marker" in logs[-1]
    third = c.save(state(3), 3, 0)  # the cut copy goes; the two complete ones stay
    assert sorted(c.paths()) == [c.dir / "ckpt-e0001-b000000.pt", third]
    durable.mark(third, data)  # a marker that arrived before its file's new bytes
    assert c.latest()["position"] == [1, 0]
    assert "differ from its completion marker's" in logs[-1]


def test_older_checkpoints_without_markers_still_resume(tmp_path):
    """A run folder from before markers: its files are read as before (loaded and checked)."""
    c = staged(tmp_path)
    c.save(state(1), 1, 0)
    for marker in c.dir.glob("*.done"):
        marker.unlink()
    assert c.latest()["position"] == [1, 0]
    c.save(state(2), 2, 0)
    durable.marker_path(c.dir / "ckpt-e0002-b000000.pt").unlink()
    c.save(state(3), 3, 0)  # marked: the unmarked ones below it are older files
    assert c.latest()["position"] == [3, 0]


def test_a_failed_copy_is_one_warning_and_the_next_save_tries_again(tmp_path, monkeypatch):
    logs = []
    c = staged(tmp_path, logs)
    real = durable.copy_checked

    def full(src, dst, *args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable, "copy_checked", full)
    c.save(state(1), 1, 0)
    assert len(logs) == 1 and logs[0].startswith("WARNING: checkpoint ckpt-e0001-b000000.pt "
                                                 "was saved on this VM's disk")
    assert "(No space left on device)" in logs[0]
    assert (tmp_path / "scratch" / "ckpt-e0001-b000000.pt").is_file()  # kept there
    monkeypatch.setattr(durable, "copy_checked", real)
    c.save(state(2), 2, 0)
    assert c.latest()["position"] == [2, 0]
    assert not list((tmp_path / "scratch").iterdir())


def test_only_run_folders_on_a_synced_mount_are_staged(tmp_path):
    roles = Storage(tmp_path / "scratch", tmp_path / "drive" / "runs",
                    synced=tmp_path / "drive")
    stage = staging(roles, tmp_path / "drive" / "runs" / "w")
    assert stage.parent == tmp_path / "scratch" / "staging"
    assert stage != staging(roles, tmp_path / "drive" / "runs" / "v")  # one per run folder
    assert staging(roles, tmp_path / "elsewhere") is None
    assert staging(Storage(tmp_path / "data", tmp_path / "runs"), tmp_path / "runs") is None


def test_best_is_taken_only_whole(tmp_path):
    """best.pt not matching its marker (half pushed) gives way, saying so, to the newest
    complete checkpoint; a best.pt from before markers is read as before."""
    logs = []
    c = staged(tmp_path, logs)
    c.save(state(1), 1, 0, best=True)
    c.save(state(2), 2, 0)
    c.best_path.write_bytes(c.best_path.read_bytes()[:100])
    assert c.best()["position"] == [2, 0]
    assert "best.pt cannot be used (not a complete copy:" in logs[-1]
    c.save(state(3), 3, 0, best=True)
    durable.marker_path(c.best_path).unlink()
    assert c.best()["position"] == [3, 0]
