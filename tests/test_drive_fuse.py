"""The Drive stand-in (tests/drive_fuse.py): latency per operation, a bandwidth cap, Drive's
quota, always unmounted; and the packed frame cache reads through it with few opens."""

import os
import shutil
import time

import pytest

from bench import opens
from lib.data import events
from lib.data.common import make_loader
from tests import drive_fuse
from tests.drive_fuse import mounted

drive = drive_fuse.drive  # the fixture: a mounted stand-in in a temp folder


def _elapsed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def test_each_open_stat_and_listing_waits_the_configured_latency(tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    for i in range(10):
        (backing / f"{i}.bin").write_bytes(b"x" * 100)
    with mounted(backing, tmp_path / "mnt", latency_s=0.03, bandwidth=0) as m:
        names = sorted(os.listdir(m.path))
        assert names == sorted(os.listdir(backing))  # a passthrough: the same files
        stat_s = _elapsed(lambda: [os.stat(m.path / n) for n in names])
        read_s = _elapsed(lambda: [(m.path / n).read_bytes() for n in names])
        list_s = _elapsed(os.listdir, m.path)
        assert (m.path / "3.bin").read_bytes() == b"x" * 100
    # lower bounds only (the sleeps guarantee them; a loaded machine only adds time)
    assert stat_s >= 10 * 0.03 and read_s >= 10 * 2 * 0.03 and list_s >= 0.03


def test_reads_and_writes_share_one_bandwidth_cap(tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    (backing / "big.bin").write_bytes(os.urandom(3 * 10**6))
    with mounted(backing, tmp_path / "mnt", latency_s=0, bandwidth=10e6) as m:
        read_s = _elapsed((m.path / "big.bin").read_bytes)
        write_s = _elapsed((m.path / "copy.bin").write_bytes, b"y" * 10**6)
    assert read_s >= 0.3 and write_s >= 0.1
    assert (backing / "copy.bin").read_bytes() == b"y" * 10**6


def test_free_space_is_drives_quota_less_what_it_holds(drive):
    (drive.path / "a.bin").write_bytes(b"z" * 10**6)
    usage = shutil.disk_usage(drive.path)
    assert abs(usage.total - 15 * 10**9) < 4096 and abs(usage.used - 10**6) < 8192


def test_it_is_unmounted_whatever_happens_inside(tmp_path):
    with pytest.raises(KeyError), mounted(tmp_path / "b", tmp_path / "m", latency_s=0) as m:
        assert os.path.ismount(m.path)
        raise KeyError("a failing test")
    assert not os.path.ismount(tmp_path / "m")


def test_the_packed_frame_cache_on_drive_opens_few_files_per_epoch(drive, tmp_path):
    """Recordings on scratch, their frames packed onto the Drive stand-in: an epoch after the
    first opens at most 16 files (two loader workers included), where the recordings are 60
    files. (Raw recordings on the stand-in take ~1 minute to write and frame: that is the
    point of keeping them on scratch.)"""
    scratch = tmp_path / "scratch"
    train, test, _ = events.build_datasets("nmnist", scratch, sample=True, n_time_bins=12,
                                           cache_dir=drive.path / "cache")
    events.warm_cache(train, test, progress=False)
    assert len(list((drive.root / "cache").rglob("*"))) <= 2 * (2 * 2 + 1)  # + manifests
    choice = type("Choice", (), {"num_workers": 2, "pin_memory": False, "worker_start": None})()
    loader = make_loader(train, 8, choice, train=True, seed=0)
    opens.install()
    epochs = []
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        with opens.counting() as count:
            batches = [labels for _, labels in loader]
        epochs.append(count.n)
    assert sum(len(b) for b in batches) == 40
    assert epochs[0] > 0  # the workers' first opens are counted (the hook reaches them)
    assert max(epochs[1:]) <= 16 < len(train), epochs
    assert len(list((scratch / "sample").rglob("*.bin"))) == 60  # one file per recording
