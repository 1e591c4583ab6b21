"""images.toml and the lane builder, without building a lane (test_image_lanes.py runs them)."""

import os
import threading
import time

import pytest

from lib.bootstrap import REQUIREMENTS
from lib.runtime.platforms import PLATFORMS
from tests import lanes


def test_every_image_names_its_python_pins_source_and_date():
    images = lanes.images()
    assert set(images) == {"colab_gpu", "colab_tpu", "kaggle_gpu", "kaggle_tpu",
                           "sagemaker_distribution"}
    for image in images.values():
        assert image["python"] in ("3.12", "3.13")
        assert {"torch", "torchvision"} <= set(image["pins"])
        assert image["source"] and image["read"]
        if any(PLATFORMS[p].accelerator == "xla" for p in image["platforms"]):
            assert image["pins"]["torch_xla"].split(".")[:2] == \
                image["pins"]["torch"].split(".")[:2]  # torch_xla X.Y needs torch X.Y


def test_a_lane_installs_exactly_the_pins_and_nothing_the_bootstrap_adds():
    image = lanes.images()["kaggle_tpu"]
    assert lanes.requirements(image) == [
        "torch==2.8.0", "torchvision==0.23.0", "torch_xla==2.8.0", "papermill", "ipykernel"]
    bootstrap_only = {r.split(">")[0] for r in REQUIREMENTS.values()} - {
        "tqdm", "matplotlib", "tensorboard", "einops", "scipy",  # Colab's image has these
        "ipywidgets"}  # SageMaker Distribution's too (its gpu.env.out: 8.1.9)
    for image in lanes.images().values():
        names = {r.split("==")[0] for r in lanes.requirements(image)}
        assert not names & bootstrap_only, names & bootstrap_only


def test_a_manifest_entry_without_its_python_is_refused(tmp_path):
    bad = tmp_path / "images.toml"
    bad.write_text('[images.x]\ntitle = "X"\nplatforms = []\nsource = "s"\nread = "r"\n'
                   '[images.x.pins]\ntorch = "1"\n')
    with pytest.raises(lanes.LaneError, match=r"image 'x' lacks \['python'\]"):
        lanes.images(bad)


def test_a_missing_python_fails_loudly_with_the_fix(tmp_path):
    env = {"PYENV_ROOT": str(tmp_path / "pyenv"), "PATH": str(tmp_path / "bin")}
    with pytest.raises(lanes.LaneError) as err:
        lanes.find_python("3.99", environ=env)
    message = str(err.value)
    assert "no Python 3.99 here" in message and "`pyenv install 3.99`" in message
    assert "\n" not in message


def test_a_pyenv_python_is_found_and_checked(tmp_path):
    import sys

    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    fake = tmp_path / "pyenv" / "versions" / f"{version}.0" / "bin" / f"python{version}"
    fake.parent.mkdir(parents=True)
    fake.symlink_to(sys.executable)
    env = {"PYENV_ROOT": str(tmp_path / "pyenv"), "PATH": ""}
    assert lanes.find_python(version, environ=env) == fake
    broken = tmp_path / "pyenv" / "versions" / "3.98.0" / "bin" / "python3.98"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)  # a pyenv shim of an inactive version is like this: it does not run
    with pytest.raises(lanes.LaneError):
        lanes.find_python("3.98", environ=env)


class FakeLanes:
    """build / check / remove for lanes.run, on marker folders: what is on disk, and when."""

    def __init__(self, root, fail=(), broken=()):
        self.root, self.fail, self.broken = root, set(fail), set(broken)
        self.most, self.events, self.lock = 0, [], threading.Lock()

    def on_disk(self):
        return sorted(p.name for p in self.root.iterdir())

    def build(self, name, image):
        if name in self.broken:
            raise lanes.LaneError(f"no Python {image['python']} here")
        (self.root / name).mkdir()
        with self.lock:
            self.most = max(self.most, len(set(self.on_disk()) - self.fail))  # a failed one stays
            self.events.append(("built", name))
        return 1.0

    def check(self, name, log):
        assert (self.root / name).is_dir()  # tested in the lane just built
        time.sleep(0.05)
        with self.lock:
            self.events.append(("tested", name))
        return 1 if name in self.fail else 0

    def remove(self, name):
        (self.root / name).rmdir()
        with self.lock:
            self.events.append(("removed", name))


def test_run_builds_each_lane_just_before_its_tests_and_removes_it_after(tmp_path, monkeypatch,
                                                                         capsys):
    """Five lanes, two at a time: never more than two on disk; each built, tested, removed, in
    that order; a failed lane is kept to look into, and the run fails naming it."""
    monkeypatch.setattr(lanes, "LANES", tmp_path / "lanes")
    disk = tmp_path / "disk"
    disk.mkdir()
    known = lanes.images()
    names = lanes.longest_first(list(known), known)
    fake = FakeLanes(disk, fail={"colab_gpu"})
    rc = lanes.run(names, known, jobs=2, build=fake.build, check=fake.check, remove=fake.remove)
    assert rc == 1
    assert fake.most == 2 and fake.on_disk() == ["colab_gpu"]
    for name in names:
        steps = [e for e, n in fake.events if n == name]
        assert steps == (["built", "tested"] if name == "colab_gpu" else
                         ["built", "tested", "removed"])
    built = [n for e, n in fake.events if e == "built"]
    assert set(built[:2]) == set(names[:2])  # the two longest start first
    out = capsys.readouterr().out
    assert "lanes: 4 passed, 1 failed (colab_gpu: kept in" in out
    assert "===== lane kaggle_tpu: exit 0 after" in out and ", removed =====" in out


def test_a_lane_that_cannot_be_built_fails_with_its_reason_and_the_others_run(tmp_path,
                                                                              monkeypatch, capsys):
    monkeypatch.setattr(lanes, "LANES", tmp_path / "lanes")
    disk = tmp_path / "disk"
    disk.mkdir()
    known = lanes.images()
    fake = FakeLanes(disk, broken={"kaggle_gpu"})
    rc = lanes.run(["kaggle_gpu", "sagemaker_distribution"], known, jobs=1, build=fake.build,
                   check=fake.check, remove=fake.remove)
    out = capsys.readouterr().out
    assert rc == 1 and "lane kaggle_gpu: the build failed: no Python 3.12 here" in out
    assert ("removed", "sagemaker_distribution") in fake.events and fake.on_disk() == []


def test_test_runs_the_lanes_there_are_and_keeps_them(tmp_path, monkeypatch):
    monkeypatch.setattr(lanes, "LANES", tmp_path / "lanes")
    disk = tmp_path / "disk"
    (disk / "colab_gpu").mkdir(parents=True)
    fake = FakeLanes(disk)
    assert lanes.run(["colab_gpu"], lanes.images(), fresh=False, keep=True, build=fake.build,
                     check=fake.check, remove=fake.remove) == 0
    assert fake.events == [("tested", "colab_gpu")] and fake.on_disk() == ["colab_gpu"]


def test_collect_removes_the_cache_entries_no_lane_links_to(tmp_path):
    """uv unpacks each wheel once into archive-v0/<id> and links its files into the lanes: an
    entry with a file still linked from a lane stays, whole; one linked from none goes."""
    archive = tmp_path / "cache" / "archive-v0"
    used, unused = archive / "used" / "torch", archive / "unused" / "nvidia"
    for folder in (used, unused):
        folder.mkdir(parents=True)
        (folder / "lib.so").write_bytes(b"x" * 1000)
        (folder / "RECORD").write_text("never linked")
    lane = tmp_path / "lane" / "site-packages"
    lane.mkdir(parents=True)
    os.link(used / "lib.so", lane / "lib.so")
    assert lanes.collect(tmp_path / "cache") == 1000 + len("never linked")
    assert sorted(p.name for p in archive.iterdir()) == ["used"]
    assert (used / "RECORD").exists()  # an entry in use is kept whole
    (lane / "lib.so").unlink()  # the lane removed: its entry goes next time
    lanes.collect(tmp_path / "cache")
    assert list(archive.iterdir()) == []
    assert lanes.collect(tmp_path / "nothing-here") == 0


def test_the_cache_is_kept_through_a_run_and_collected_after_its_last_lane(tmp_path,
                                                                          monkeypatch):
    """What two lanes share (torch 2.8 and its CUDA libraries: the Kaggle TPU and SageMaker
    images) is downloaded and unpacked once a run: a removed lane (the real `remove`) leaves
    its cache entries for the next; after the last lane, every entry no lane on disk links to
    goes (`collect`)."""
    monkeypatch.setattr(lanes, "LANES", tmp_path / "lanes")
    shared = lanes.cache_dir() / "archive-v0" / "torch-2.8.0" / "libtorch.so"
    shared.parent.mkdir(parents=True)
    shared.write_bytes(b"x" * 100)
    found = []

    def build(name, image):  # uv links the cached file into the lane
        lanes.lane_dir(name).mkdir(parents=True)
        found.append((name, shared.exists()))
        if shared.exists():
            os.link(shared, lanes.lane_dir(name) / "libtorch.so")
        return 1.0

    rc = lanes.run(["kaggle_tpu", "sagemaker_distribution"], lanes.images(), jobs=1,
                   build=build, check=lambda name, log: 0)
    assert rc == 0 and found == [("kaggle_tpu", True), ("sagemaker_distribution", True)]
    assert not lanes.lane_dir("sagemaker_distribution").exists()
    assert not shared.parent.exists()  # collected once the run ended
