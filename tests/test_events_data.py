"""Event datasets: sample formats read by the real tonic classes, framing, caching, split."""

import shutil
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import tonic
import torch

from lib.data import events, events_sample, samples
from lib.data.events import (
    DVSGESTURE_LIGHTING,
    FramesToTensor,
    SparseFrames,
    collate_fn,
    dense_frames,
    frame_hw,
    frame_picture,
    load_events,
    pad_collate,
)
from lib.data.events import (
    build_datasets as event_datasets,
)


def _missing(*modules: str) -> list[str]:
    missing = []
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    return missing


# Writing the CIFAR10-DVS sample needs dv-processing, reading it needs aedat (dev extras).
MISSING_AEDAT4 = _missing("dv_processing", "aedat")
NEEDS_DV = pytest.mark.skipif(
    bool(MISSING_AEDAT4), reason=f"{MISSING_AEDAT4} not installed (pip install dv-processing "
    "aedat), so the CIFAR10-DVS .aedat4 sample cannot be written and read")
FRAMING = {"nmnist": dict(n_time_bins=12), "dvsgesture": dict(n_time_bins=10, downsample=4),
           "cifar10dvs": dict(n_time_bins=10, downsample=4)}
SIZES = {"nmnist": (40, 20, 10), "dvsgesture": (33, 11, 11), "cifar10dvs": (54, 6, 10)}
DATASETS = ["nmnist", "dvsgesture", pytest.param("cifar10dvs", marks=NEEDS_DV)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("events")


@pytest.mark.parametrize("name", DATASETS)
def test_sample_frames_shape_content_and_cache(name, data_dir):
    train, test, info = event_datasets(name, data_dir, sample=True, **FRAMING[name])
    n_train, n_test, n_classes = SIZES[name]
    assert (len(train), len(test), info["num_classes"]) == (n_train, n_test, n_classes)
    h, w = frame_hw(name, FRAMING[name].get("downsample", 1))
    first = [train[i] for i in range(len(train))]
    for frames, label in first:
        assert frames.shape == (info["T"], 2, h, w) and frames.dtype == torch.uint8
        assert frames.sum() > 50 and isinstance(label, int)
    assert sorted({label for _, label in first}) == list(range(n_classes))
    # Once packed, reads come from the shards: remove the recordings and read again.
    events.warm_cache(train, test, progress=False)
    shutil.move(str(data_dir / "sample"), str(data_dir / "moved"))
    try:
        again = [train[i] for i in range(len(train))]
    finally:
        shutil.move(str(data_dir / "moved"), str(data_dir / "sample"))
    assert all(torch.equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(first, again, strict=True))
    shards = [p for p in (data_dir / "cache").rglob("shard-*.npy") if name in p.parent.name]
    assert 2 <= len(shards) <= 6  # data + index per split: few files, not one per recording


def _leave_one_out_nearest_mean(x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy of a nearest-class-mean classifier, each recording scored against class means
    of all the others (the test splits alone are too small: 6 recordings for CIFAR10-DVS)."""
    sums = torch.zeros(int(y.max()) + 1, x.shape[1]).index_add_(0, y, x)
    counts = torch.bincount(y).float()
    distance = torch.cdist(x, sums / counts[:, None])
    own_mean = (sums[y] - x) / (counts[y] - 1)[:, None]
    distance[torch.arange(len(y)), y] = (x - own_mean).norm(dim=1)
    return (distance.argmin(1) == y).float().mean().item()


@pytest.mark.parametrize("name", DATASETS)
def test_samples_are_learnable_by_position_but_not_trivially(name, data_dir):
    """A nearest-class-mean classifier on time-summed frames beats chance (0.1, 0.09) by far
    but is wrong on many recordings (the old sample, one blob per class, scored 1.0):
    neighbouring classes overlap, and blobs of another class and distractors mislead it."""
    train, test, _ = event_datasets(name, data_dir, sample=True, **FRAMING[name])
    recordings = [ds[i] for ds in (train, test) for i in range(len(ds))]
    x = torch.stack([frames.sum(0).flatten().float() for frames, _ in recordings])
    y = torch.tensor([label for _, label in recordings])
    assert 0.3 < _leave_one_out_nearest_mean(x, y) < 0.9


def test_frames_of_an_older_sample_are_never_read_for_a_new_one(tmp_path, monkeypatch):
    """The cache folder names the sample generator's version: a new generator rewrites the
    sample (lib.data.samples) and frames it afresh instead of reading the old frames."""
    train, _, _ = event_datasets("nmnist", tmp_path, sample=True, n_time_bins=4)
    assert f"_sample-v{samples.VERSIONS['events']}_" in Path(train.cache_path).name
    old = train[0][0]
    monkeypatch.setitem(samples.VERSIONS, "events", samples.VERSIONS["events"] + 1)
    monkeypatch.setattr(events_sample, "blob_events", _shifted(events_sample.blob_events))
    new, _, _ = event_datasets("nmnist", tmp_path, sample=True, n_time_bins=4)
    assert new.cache_path != train.cache_path and not torch.equal(new[0][0], old)


def _shifted(blob_events):
    """`blob_events` of a different generator: every event one pixel to the right."""
    def shifted(*args):
        ev = blob_events(*args)
        return {**ev, "x": np.minimum(ev["x"] + 1, 33)}
    return shifted


def test_nmnist_bin_round_trips_through_tonics_reader(tmp_path):
    rng = np.random.default_rng(1)
    ev = events_sample.blob_events(rng, 3, 10, 34, 300_000, 200)
    path = tmp_path / "x.bin"
    path.write_bytes(events_sample.nmnist_bytes(ev))
    read = tonic.io.read_mnist_file(str(path), dtype=tonic.datasets.NMNIST.dtype)
    for key in "xytp":
        assert np.array_equal(read[key], ev[key])


def test_dvsgesture_sample_has_users_lighting_and_microseconds(data_dir):
    root = events_sample.write_dvsgesture_sample(data_dir / "sample")
    ds = load_events("dvsgesture", root, train=False, sample=True)
    events, label = ds[0]
    assert set(ds.users) == {24} and ds.lighting[0] in DVSGESTURE_LIGHTING
    assert events["t"].max() > 1_000_000  # 1.5 s recordings stored in ms, read back in us
    assert ds.data == sorted(ds.data) and label == ds.targets[0]


def test_sample_writers_are_deterministic_and_write_only_once(tmp_path):
    a = events_sample.write_nmnist_sample(tmp_path / "a", n_train=1, n_test=1)
    b = events_sample.write_nmnist_sample(tmp_path / "b", n_train=1, n_test=1)
    file_a, file_b = a / "NMNIST/Train/7/00000.bin", b / "NMNIST/Train/7/00000.bin"
    assert file_a.read_bytes() == file_b.read_bytes()
    file_a.write_bytes(b"marker")
    events_sample.write_nmnist_sample(tmp_path / "a", n_train=1, n_test=1)
    assert file_a.read_bytes() == b"marker"


def test_denoise_keeps_most_sample_events():
    rng = np.random.default_rng(0)
    for size, duration in ((34, 300_000), (128, 1_000_000)):
        ev = events_sample.blob_events(rng, 2, 10, size, duration, 4000)
        arr = np.zeros(len(ev["t"]), dtype=tonic.datasets.NMNIST.dtype)
        for key in "xytp":
            arr[key] = ev[key]
        assert len(tonic.transforms.Denoise(filter_time=10_000)(arr)) > 0.6 * len(arr)


@NEEDS_DV
def test_cifar10dvs_split_is_seeded_disjoint_and_90_10(data_dir):
    tr1, te1, _ = event_datasets("cifar10dvs", data_dir, sample=True, **FRAMING["cifar10dvs"])
    tr2, te2, _ = event_datasets("cifar10dvs", data_dir, sample=True, **FRAMING["cifar10dvs"])
    tr3, _, _ = event_datasets("cifar10dvs", data_dir, sample=True, seed=7,
                                     **FRAMING["cifar10dvs"])
    assert (len(tr1), len(te1)) == (54, 6)
    assert tr1.indices == tr2.indices and te1.indices == te2.indices
    assert not set(tr1.indices) & set(te1.indices)
    assert sorted(tr1.indices + te1.indices) == list(range(60))
    assert tr3.indices != tr1.indices


def test_dt_framing_gives_true_bins_and_fixed_t_pads_or_crops(data_dir):
    train, _, info = event_datasets("nmnist", data_dir, sample=True, dt_us=50_000)
    assert info["T"] is None and collate_fn(info) is pad_collate
    frames, _ = train[0]
    assert frames.shape[0] == 6  # 300 ms of events in 50 ms bins
    fixed, _, info = event_datasets("nmnist", data_dir, sample=True, dt_us=50_000,
                                          fixed_t=8)
    assert info["T"] == 8 and collate_fn(info) is None
    x = fixed[0][0]
    assert x.shape[0] == 8 and torch.equal(x[:6], frames) and x[6:].sum() == 0
    assert torch.equal(FramesToTensor(4)(frames.numpy()), frames[:4])
    batch, labels = pad_collate([(frames[:3], 1), (frames, 2)])
    assert batch.shape == (2, 6, 2, 34, 34) and batch.dtype == torch.uint8
    assert torch.equal(batch[0, :3], frames[:3]) and batch[0, 3:].sum() == 0
    assert labels.tolist() == [1, 2]


def test_the_cache_holds_sparse_frames_that_read_back_exactly(data_dir):
    """The pack stores the non-zero counts and their places, not the dense array; the frames
    read from it equal tonic's framing of the recording (and dense frames still load)."""
    train, test, _ = event_datasets("nmnist", data_dir, sample=True, n_time_bins=300)
    fresh = train.dataset[3][0]  # the unpacked path: events -> frames -> SparseFrames
    events.warm_cache(train, test, progress=False)
    stored, label = train.reader.get(3)
    frames = train[3][0]
    assert stored.ndim == 1 and stored[:5].tolist() == [4, 300, 2, 34, 34]
    assert len(stored) - 5 == int((frames != 0).sum()) < 0.02 * frames.numel()
    assert torch.equal(dense_frames(fresh), frames) and label == train.dataset[3][1]
    raw = frames.numpy().astype(np.int16)
    assert torch.equal(FramesToTensor()(raw), frames)  # a dense cache entry still loads
    assert torch.equal(dense_frames(SparseFrames()(raw)), frames)
    with pytest.raises(ValueError, match=r"counts per bin must be in \[0, 65535\]"):
        SparseFrames()(np.full((1, 2, 1, 1), 70_000))


def test_a_build_killed_mid_way_keeps_complete_shards_and_resumes_after_them(
        tmp_path, monkeypatch):
    """Shards are renamed into place whole: a kill leaves complete shards and at most a
    temporary file that no reader takes; the next build frames only what is missing, and a
    reader never mistakes the unpacked rest for packed."""
    from lib.data import packed

    train, _, _ = event_datasets("nmnist", tmp_path, sample=True, n_time_bins=12)
    expected = [train[i] for i in range(len(train))]  # framed from the events, not packed
    monkeypatch.setattr(packed, "SHARD_BYTES", 1)  # a shard per recording: many boundaries
    real_add, added = packed.PackWriter.add, []

    def add_then_die(self, record, label):
        if len(added) == 7:
            raise KeyboardInterrupt  # a lost runtime between two shards
        added.append(1)
        real_add(self, record, label)

    monkeypatch.setattr(packed.PackWriter, "add", add_then_die)
    with pytest.raises(KeyboardInterrupt):
        events.warm_cache(train, progress=False)
    assert packed.PackReader(train.cache_path).packed() == 7
    assert packed.read_manifest(train.cache_path) is None
    assert torch.equal(train[8][0], expected[8][0])  # not yet packed: framed, right
    monkeypatch.setattr(packed.PackWriter, "add", real_add)
    assert events.warm_cache(train, progress=False) == len(train) - 7
    assert packed.read_manifest(train.cache_path)["records"] == len(train)
    assert all(torch.equal(train[i][0], x) and train[i][1] == y
               for i, (x, y) in enumerate(expected))


def test_counts_above_255_are_clipped_with_a_note_once(monkeypatch, capsys):
    frames = np.zeros((2, 2, 3, 3), dtype=np.int16)
    frames[0, 0, 1, 1], frames[1, 1, 2, 0] = 300, 7
    monkeypatch.setattr(events, "_clip_noted", [False])
    for packed in (SparseFrames()(frames), frames):
        x = dense_frames(packed)
        assert x.dtype == torch.uint8 and x[0, 0, 1, 1] == 255 and x[1, 1, 2, 0] == 7
        assert int(x.sum()) == 262
    out = capsys.readouterr().out
    assert out.count("note: a pixel has 300 events in one time bin") == 1, out
    assert "clipped to 255" in out


def test_frame_picture_colours_polarities():
    frames = torch.zeros(3, 2, 4, 5)
    frames[1, 0, 2, 3] = 4.0  # ON
    frames[2, 1, 0, 0] = 1.0  # OFF
    picture = frame_picture(frames)
    assert picture.shape == (4, 5, 3)
    assert picture[2, 3, 0] == 1.0 and picture[2, 3, 2] == 0.0
    assert picture[0, 0, 2] > 0 and picture[0, 0, 0] == 0.0


def test_framing_and_name_errors_say_what_to_set(data_dir):
    with pytest.raises(ValueError, match="exactly one"):
        event_datasets("nmnist", data_dir, sample=True, n_time_bins=10, dt_us=1000)
    with pytest.raises(ValueError, match="FIXED_T"):
        event_datasets("nmnist", data_dir, sample=True, dt_us=1000, static_shapes=True)
    with pytest.raises(ValueError, match="DOWNSAMPLE"):
        event_datasets("nmnist", data_dir, sample=True, n_time_bins=10, downsample=0)
    with pytest.raises(ValueError, match="DATASET"):
        event_datasets("mnist", data_dir)


def test_missing_real_data_raises_file_not_found_with_the_fix(tmp_path):
    offline = mock.patch.object(tonic.datasets.NMNIST, "download",
                                side_effect=OSError("no network"))
    with offline, pytest.raises(FileNotFoundError, match="SAMPLE_DATA"):
        event_datasets("nmnist", tmp_path, n_time_bins=10)


def test_cifar10dvs_without_aedat_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "aedat", None)  # makes `import aedat` fail
    with pytest.raises(ModuleNotFoundError, match="pip install aedat"):
        load_events("cifar10dvs", tmp_path, None, sample=True)
