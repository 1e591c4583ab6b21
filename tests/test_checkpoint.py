"""Atomic writes, newest-loadable resume, and what happens to bad checkpoint files."""

import pytest
import torch

from lib.runs.checkpoints import CheckpointMismatch, Checkpoints, atomic_save, to_cpu

MODEL = {"width": 8}


def ckpts(tmp_path, model_config=MODEL, workload="w", logs=None):
    return Checkpoints(tmp_path / "ck", workload, model_config,
                       log=(logs.append if logs is not None else lambda m: None))


def state(value):
    return {"weights": torch.full((3,), float(value)), "history": [{"epoch": value}]}


def test_atomic_save_leaves_the_old_file_whole_when_a_write_dies(tmp_path, monkeypatch):
    path = tmp_path / "a.pt"
    atomic_save({"v": torch.ones(2)}, path)

    def dying_save(obj, f):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt  # the process is killed mid-write

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        atomic_save({"v": torch.zeros(2)}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["v"], torch.ones(2))


def test_resume_takes_the_newest_position_and_keeps_two(tmp_path):
    c = ckpts(tmp_path)
    for epoch, batch in [(1, 0), (1, 5), (2, 0), (2, 3)]:
        c.save(state(epoch * 10 + batch), epoch, batch)
    assert [p.name for p in c.paths()] == ["ckpt-e0002-b000003.pt", "ckpt-e0002-b000000.pt"]
    latest = c.latest()
    assert latest["position"] == [2, 3] and latest["weights"][0] == 23


def test_best_is_a_copy_of_the_best_position(tmp_path):
    c = ckpts(tmp_path)
    c.save(state(1), 1, 0, best=True)
    c.save(state(2), 2, 0, best=False)
    best = torch.load(c.dir / "best.pt", weights_only=True)
    assert best["position"] == [1, 0]


@pytest.mark.parametrize("marked", [True, False])
@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "foreign_pickle"])
def test_a_bad_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage, marked):
    """With completion markers the damage is caught by the marker (size and SHA-256); in a
    folder written before markers existed, by loading."""
    logs = []
    c = ckpts(tmp_path, logs=logs)
    c.save(state(1), 1, 0)
    newest = c.save(state(2), 2, 0)
    if not marked:
        for marker in c.dir.glob("*.done"):
            marker.unlink()
    data = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        newest.write_bytes(bytes(reversed(data)))
    elif damage == "empty":
        newest.write_bytes(b"")
    else:  # a pickle with a custom class: refused by weights_only=True, never executed
        torch.save({"obj": torch.nn.Linear(2, 2)}, newest)
    latest = c.latest()
    assert latest["position"] == [1, 0]
    why = "is not a complete copy" if marked else "is unreadable"
    assert len(logs) == 1 and f"ckpt-e0002-b000000.pt {why}" in logs[0], logs


def test_a_checkpoint_of_another_workload_is_skipped(tmp_path):
    logs = []
    ckpts(tmp_path, workload="other").save(state(5), 5, 0)
    c = ckpts(tmp_path, logs=logs)
    c.save(state(1), 1, 0)
    assert c.latest()["position"] == [1, 0]
    assert "'other' checkpoint" in logs[0]


def test_a_different_model_config_stops_the_run_and_touches_nothing(tmp_path):
    ckpts(tmp_path).save(state(1), 1, 0)
    before = {p.name: p.read_bytes() for p in (tmp_path / "ck").iterdir()}
    with pytest.raises(CheckpointMismatch, match=r"\{'width': 8\}.*\{'width': 16\}.*OUT_DIR"):
        ckpts(tmp_path, model_config={"width": 16}).latest()
    assert {p.name: p.read_bytes() for p in (tmp_path / "ck").iterdir()} == before


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert ckpts(tmp_path).latest() is None


def test_state_is_detached_and_copied_to_the_cpu_keeping_its_structure():
    w = torch.ones(2, requires_grad=True)
    out = to_cpu({"a": [w, (w, 3)], "b": {"c": w * 2}, "n": "x"})
    assert out["a"][0].device.type == "cpu" and not out["a"][0].requires_grad
    assert isinstance(out["a"][1], tuple) and out["a"][1][1] == 3
    assert torch.equal(out["b"]["c"], torch.full((2,), 2.0)) and out["n"] == "x"


class _Foreign:
    """An object torch.load(weights_only=True) refuses to build."""


def test_a_refused_pickle_is_explained_without_the_unsafe_advice(tmp_path):
    from lib.runs.checkpoints import reason

    torch.save({"model": _Foreign()}, tmp_path / "x.pt")
    with pytest.raises(Exception) as err:
        torch.load(tmp_path / "x.pt", weights_only=True)
    assert "weights_only" in str(err.value)  # torch's own text advises turning it off
    text = reason(err.value)
    assert "weights_only" not in text and "\n" not in text
    assert text.startswith("UnpicklingError: not a checkpoint this project wrote (")
    assert "_Foreign" in text  # what torch refused, so the user can tell whose file it is
