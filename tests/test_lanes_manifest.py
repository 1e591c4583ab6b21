"""images.toml and the lane builder, without building a lane (test_image_lanes.py runs them)."""

import pytest

from lib.bootstrap import REQUIREMENTS
from lib.platforms import PLATFORMS
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
