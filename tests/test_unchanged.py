"""The one helper every refusal uses (tests/unchanged.py): each kind of change a refused run
could make is caught and named, and an untouched folder passes."""

from __future__ import annotations

import os

import pytest

from tests.unchanged import assert_unchanged, snapshot


@pytest.fixture
def run(tmp_path):
    """A run folder as a session leaves it, with a TensorBoard file and a link."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "tb").mkdir()
    (run / "checkpoints" / "ckpt-e0001-b000000.pt").write_bytes(b"weights")
    (run / "tb" / "events.out.tfevents.1").write_bytes(b"\x00\x01")
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n')
    os.symlink(tmp_path / "elsewhere", run / "input")
    return run


def test_an_untouched_folder_passes_and_a_missing_one_is_empty(run, tmp_path):
    before = snapshot(run)
    assert before["tb/events.out.tfevents.1"].startswith("sha256:")
    assert before["tb"] == "folder" and before["input"] == f"link -> {tmp_path / 'elsewhere'}"
    assert_unchanged(before, run)
    assert snapshot(tmp_path / "never") == {}


@pytest.mark.parametrize("change,named", [
    # the same size, one byte different, deep in a folder the old check skipped
    (lambda r: (r / "tb" / "events.out.tfevents.1").write_bytes(b"\x00\x02"),
     "tb/events.out.tfevents.1: bytes changed"),
    (lambda r: (r / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n'),
     "metrics.jsonl: bytes changed"),
    (lambda r: (r / "checkpoints" / "ckpt-e0001-b000000.pt").unlink(),
     "checkpoints/ckpt-e0001-b000000.pt: removed"),
    (lambda r: (r / "fresh-1").mkdir(), "fresh-1: added"),  # an empty folder is a change
    (lambda r: (r / "checkpoints" / ".ckpt.tmp").write_bytes(b""),
     "checkpoints/.ckpt.tmp: added"),
    (lambda r: (os.unlink(r / "input"), os.symlink(r, r / "input")),
     "input: was link -> "),
], ids=["tb-byte", "appended", "removed", "empty-folder", "empty-file", "link"])
def test_each_kind_of_change_is_caught_and_named(run, change, named):
    before = snapshot(run)
    change(run)
    with pytest.raises(AssertionError) as err:
        assert_unchanged(before, run)
    assert named in str(err.value), str(err.value)


def test_a_folder_a_refusal_creates_is_caught(tmp_path):
    before = snapshot(tmp_path / "working" / "runs")
    (tmp_path / "working" / "runs" / "fashion_mnist").mkdir(parents=True)
    with pytest.raises(AssertionError, match="fashion_mnist: added"):
        assert_unchanged(before, tmp_path / "working" / "runs")
    (tmp_path / "out").mkdir()  # the folder itself, left empty
    with pytest.raises(AssertionError, match=r"\.: added"):
        assert_unchanged({}, tmp_path / "out")
