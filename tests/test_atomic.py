"""Whole-or-nothing writes: a failure mid-write keeps the old file and leaves no litter."""

import os
import stat

import pytest

from lib.base import atomic
from lib.data import fashion


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path, monkeypatch):
    path = atomic.write_text(tmp_path / "results.csv", "old\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644

    def cut(src, dst):  # the process dies between writing and renaming
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", cut)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_a_fashion_sample_cut_short_is_written_again_whole(tmp_path, monkeypatch):
    """The sample counts as present once all four IDX files exist; a run killed while
    writing the last one must not leave a cut file that the next run trusts."""
    real, calls = atomic.write_bytes, []

    def dies_on_the_fourth(path, data):
        calls.append(path.name)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(atomic, "write_bytes", dies_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        fashion.write_sample(tmp_path, n_train=20, n_test=10)
    monkeypatch.setattr(atomic, "write_bytes", real)
    raw = tmp_path / "FashionMNIST" / "raw"
    assert len(list(raw.iterdir())) == 3  # nothing half-written
    fashion.write_sample(tmp_path, n_train=20, n_test=10)
    test = fashion.load(tmp_path, False, download=False)
    assert len(test) == 10 and len(fashion.load(tmp_path, True, download=False)) == 20
