"""Packed prepared data: shards, copies from a durable place to scratch, space before work."""

import shutil
from collections import namedtuple

import numpy as np
import pytest
import torch

from lib.data import event_cache, events, packed, space
from lib.data.events import build_datasets as event_datasets

Usage = namedtuple("Usage", "total used free")


def _pack(folder, n=50, shard_bytes=2000):
    rng = np.random.default_rng(0)
    records = [rng.integers(0, 1000, size=rng.integers(1, 60)) for _ in range(n)]
    writer = packed.PackWriter(folder, n, shard_bytes)
    for i, r in enumerate(records):
        writer.add(r, i % 7)
    assert writer.close()
    return records


def test_records_read_back_from_few_shards(tmp_path):
    records = _pack(tmp_path / "p")
    reader = packed.PackReader(tmp_path / "p")
    assert 2 <= len(reader.shards) < 50 and reader.packed() == 50
    for i, r in enumerate(records):
        got, label = reader.get(i)
        assert np.array_equal(got, r) and label == i % 7
    assert reader.get(50) is None


def test_copy_to_scratch_is_checked_and_done_once(tmp_path):
    records = _pack(tmp_path / "durable")
    assert packed.copy_pack(tmp_path / "durable", tmp_path / "scratch")
    assert not packed.copy_pack(tmp_path / "durable", tmp_path / "scratch")  # same pack: kept
    got, _ = packed.PackReader(tmp_path / "scratch").get(7)
    assert np.array_equal(got, records[7])
    # a durable copy damaged after it was written is refused, and no manifest is left behind
    shutil.rmtree(tmp_path / "scratch")
    first = sorted((tmp_path / "durable").glob("shard-*.npy"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(OSError, match="does not match its manifest"):
        packed.copy_pack(tmp_path / "durable", tmp_path / "scratch")
    assert packed.read_manifest(tmp_path / "scratch") is None
    assert not list((tmp_path / "scratch").glob("*.tmp"))


def test_an_incomplete_pack_is_not_copied(tmp_path):
    writer = packed.PackWriter(tmp_path / "p", 10, 1)
    writer.add(np.arange(3), 1)
    assert not writer.close()
    with pytest.raises(FileNotFoundError, match="no complete pack"):
        packed.copy_pack(tmp_path / "p", tmp_path / "q")


def test_no_space_is_one_line_with_both_numbers_before_anything_is_written(
        tmp_path, monkeypatch):
    _pack(tmp_path / "durable")
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 10**5, 10**5))
    with pytest.raises(space.NoSpace) as err:
        packed.copy_pack(tmp_path / "durable", tmp_path / "scratch")
    line = err.value.one_line()
    assert "\n" not in line and "needs 0.00 GB" in line and "has 0.00 GB free" in line
    assert "point DATA_DIR" in line and not (tmp_path / "scratch").exists()


def test_a_frame_cache_that_will_not_fit_stops_before_framing(tmp_path, monkeypatch):
    train, test, _ = event_datasets("nmnist", tmp_path, sample=True, n_time_bins=12)
    free = 300 * 2**20  # the margin fits, the frames (monkeypatched to 1 GB) do not
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: Usage(10**12, 0, free))
    monkeypatch.setattr(event_cache, "cache_bytes_estimate", lambda cached, probe=8: 10**9 * 4)
    with pytest.raises(space.NoSpace, match=r"framing 40 recordings .* needs 4\.00 GB .* "
                                            r"has 0\.31 GB free"):
        events.warm_cache(train, progress=False)
    assert not list(tmp_path.rglob("shard-*"))


def test_require_measures_the_nearest_existing_folder(tmp_path):
    space.require(tmp_path / "not" / "yet", 1, "a test")  # no error: the parent has room
    with pytest.raises(space.NoSpace, match="a test needs"):
        space.require(tmp_path / "not" / "yet", 10**18, "a test")


def test_a_download_that_will_not_fit_stops_before_tonic_writes(tmp_path, monkeypatch):
    """DVS Gesture needs ~8 GB (its README: 3 GB tar + 5 GB extracted): with less free, one
    line before tonic downloads anything; with the folder already there, no check."""
    import tonic

    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: Usage(10**12, 0, 2 * 10**9))
    called = []
    monkeypatch.setattr(tonic.datasets.DVSGesture, "__init__",
                        lambda self, *a, **k: called.append(1) or (_ for _ in ()).throw(
                            RuntimeError("download failed")))
    with pytest.raises(space.NoSpace, match=r"downloading and unpacking DVSGesture needs "
                                            r"8\.00 GB .* has 2\.00 GB free"):
        events.load_events("dvsgesture", tmp_path, True)
    assert called == [] and not (tmp_path / "DVSGesture").exists()
    (tmp_path / "DVSGesture").mkdir()  # present (complete or not): tonic decides, as before
    with pytest.raises(FileNotFoundError, match="downloading it failed"):
        events.load_events("dvsgesture", tmp_path, True)
    assert called == [1]


def test_a_pack_kept_on_durable_storage_is_restored_and_a_new_one_kept(tmp_path):
    """A new session copies the kept pack to scratch instead of preparing it; a pack prepared
    on scratch is kept for the next one, only where it fits; a damaged kept copy is refused
    (prepare again), never read."""
    records = _pack(tmp_path / "scratch1")
    assert packed.restore(tmp_path / "scratch1", tmp_path / "kept") is None  # nothing kept
    assert packed.keep(tmp_path / "scratch1", tmp_path / "kept").startswith("kept the prepared")
    assert packed.keep(tmp_path / "scratch1", tmp_path / "kept") is None  # same pack: once
    line = packed.restore(tmp_path / "scratch2", tmp_path / "kept")
    assert line.startswith("copied the prepared data kept in")
    assert np.array_equal(packed.PackReader(tmp_path / "scratch2").get(7)[0], records[7])
    assert packed.restore(tmp_path / "scratch2", tmp_path / "kept") is None  # complete there
    shard = sorted((tmp_path / "kept").glob("shard-*.npy"))[-1]
    shard.write_bytes(shard.read_bytes()[:-8])
    line = packed.restore(tmp_path / "scratch3", tmp_path / "kept")
    assert "was not usable" in line and "does not match its manifest" in line
    assert packed.read_manifest(tmp_path / "scratch3") is None


def test_a_pack_that_does_not_fit_is_not_kept(tmp_path, monkeypatch):
    _pack(tmp_path / "scratch")
    monkeypatch.setattr(space, "free_bytes", lambda path: 1000)
    line = packed.keep(tmp_path / "scratch", tmp_path / "kept")
    assert "is not kept in" in line and "0.00 GB free: the next session prepares it" in line
    assert not (tmp_path / "kept").exists()


def test_a_new_session_reads_the_kept_frames_without_the_raw_recordings(tmp_path, monkeypatch):
    """Session 1 frames N-MNIST (the sample's files as the real dataset) on its scratch and
    keeps the packs; session 2, on an empty VM disk, copies them back and never loads (or
    downloads) a raw recording: same lengths, labels and frames, nothing framed."""
    monkeypatch.setattr(events, "EXTRACTED", {"nmnist": (1, ".bin")})
    real = events._write_sample("nmnist", tmp_path / "vm1" / "data")
    kept, kw = tmp_path / "drive" / "prepared", dict(n_time_bins=8, kept=tmp_path / "drive"
                                                     / "prepared")
    first = event_datasets("nmnist", real, cache_dir=tmp_path / "vm1" / "cache", **kw)
    lines = []
    assert events.warm_cache(*first[:2], progress=False, kept=kept, log=lines.append) == 60
    assert [line.startswith("kept the prepared data") for line in lines] == [True, True]

    def no_download(*args, **kwargs):
        raise AssertionError("a raw recording was asked for")

    monkeypatch.setattr(events, "load_events", no_download)
    second = event_datasets("nmnist", tmp_path / "vm2" / "data", cache_dir=tmp_path / "vm2"
                            / "cache", log=lines.append, **kw)
    assert sum("copied the prepared data kept in" in line for line in lines) == 2
    assert events.warm_cache(*second[:2], progress=False, kept=kept) == 0
    for a, b in zip(first[:2], second[:2], strict=True):
        assert len(a) == len(b) and a.dataset.targets == b.dataset.targets
        assert all(torch.equal(a[i][0], b[i][0]) and a[i][1] == b[i][1] for i in (0, len(a) - 1))
