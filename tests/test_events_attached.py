"""An event dataset attached extracted and read-only (as Kaggle mounts datasets) is read
without the archive tonic's own check asks for, and without a download."""

import stat

import pytest
import tonic

from lib.base.errors import DataNotFound
from lib.data import events
from lib.data.events_sample import write_nmnist_sample


@pytest.fixture
def attached(tmp_path, monkeypatch):
    root = tmp_path / "input" / "datasets" / "someone" / "nmnist"
    write_nmnist_sample(root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    def offline(self):
        raise OSError("no internet")

    monkeypatch.setattr(tonic.datasets.NMNIST, "download", offline)
    yield root
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_a_complete_extracted_dataset_without_its_archive_is_read(attached, monkeypatch):
    n = len(list((attached / "NMNIST" / "Train").rglob("*.bin")))  # where tonic counts
    monkeypatch.setitem(events.EXTRACTED, "nmnist", (n, ".bin"))  # the sample is small
    ds = events.load_events("nmnist", attached, train=True)
    assert len(ds) > 0 and not list(attached.rglob("*.zip"))


def test_an_incomplete_one_says_what_it_holds(attached, monkeypatch):
    n = len(list(attached.rglob("*.bin")))
    monkeypatch.setitem(events.EXTRACTED, "nmnist", (n + 1, ".bin"))
    with pytest.raises(DataNotFound, match=rf"holds only {n} recordings"):
        events.load_events("nmnist", attached, train=True)
