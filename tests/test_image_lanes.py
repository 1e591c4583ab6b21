"""Each platform's notebooks that its image's lane runs (images.toml: all, or those `workloads`
names), on a stand-in of the image, as a user starts them.

One lane per image of images.toml (`make test-lanes` builds them with uv, then runs this file
with `-m lane`): the notebook's kernel runs in the lane's environment (the image's Python and
pins, nothing the bootstrap installs), in an empty working folder, with the bootstrap's
clone served from this checkout (tests/served_repo.py), on the Colab stand-in
(tests/fakes) or in Kaggle's environment, XLA images with PJRT_DEVICE=CPU; SMOKE and
SAMPLE_DATA, at sizes an XLA-on-CPU lane finishes in minutes. A lane's tests run in one
process, in order (`python -m tests.lanes test` starts one pytest per lane, TA_LANE naming
it): the first notebook installs what the image lacks, the others find it installed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

from lib import workloads
from lib.runs.records import read_jsonl
from lib.runtime.platforms import PLATFORMS, storage
from tests import lanes
from tests.cloud_standins import SERVICES
from tests.notebook_run import FAKES, ROOT, XLA_ON_CPU, stream_text
from tests.served_repo import ServedRepo

pytestmark = pytest.mark.lane
IMAGES = lanes.images()
LANE = os.environ.get("TA_LANE")  # one lane per process; unset: every lane, one after another
if LANE and LANE not in IMAGES:
    raise pytest.UsageError(f"TA_LANE={LANE!r} is not an image of images.toml: {sorted(IMAGES)}")
RUN = {LANE: IMAGES[LANE]} if LANE else IMAGES
WORKLOADS = sorted(p.stem for p in (ROOT / "notebooks_src").glob("*.py"))
# SMOKE + SAMPLE_DATA, one epoch, at each workload's `tiny` sizes (its contract,
# lib/workloads) so that an XLA-on-CPU lane compiles in minutes.
PARAMETERS = {w: workloads.get(w).tiny for w in WORKLOADS}
CASES = [pytest.param(image, platform, workload, id=f"{image}-{platform}-{workload}")
         for image, spec in RUN.items() for platform, workload in lanes.notebooks(spec)]


def lane_python(image: str) -> Path:
    python = lanes.lane_python(image)
    if not python.exists():  # never a skip: a lane that did not run must fail
        pytest.fail(f"the {image} lane is not built: run `python -m tests.lanes build {image}` "
                    "(`make test-lanes` builds every lane, then runs these tests)")
    return python


def test_every_platform_is_on_exactly_one_image():
    on = [p for spec in IMAGES.values() for p in spec["platforms"]]
    # Paperspace's default image (torch 2.1.1) cannot run the project: its notebook stops with
    # one line (tests/test_clouds.py), and the stand-in covers it after the fix (images.toml).
    # Lightning and Modal publish no pinned image (images.toml): their stand-ins run the
    # notebooks (tests/test_notebooks_more_clouds.py).
    lane_less = ("local", "paperspace", "lightning", "modal")
    assert sorted(on) == sorted(p for p in PLATFORMS if PLATFORMS[p].runtime not in lane_less)
    assert len(on) == len(set(on))
    assert set(WORKLOADS) == set(PARAMETERS)


@pytest.mark.parametrize("image", list(RUN))
def test_the_lane_is_the_image(image):
    """The lane's Python and every pin are the manifest's; nothing the bootstrap would add."""
    python, spec = lane_python(image), IMAGES[image]
    version = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert ".".join(version) == spec["python"]
    have = lanes.installed(image)
    for name, pin in spec["pins"].items():
        assert have.get(name.lower().replace("_", "-"), "").split("+")[0] == pin, name


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return ServedRepo(tmp_path_factory.mktemp("github"))


@pytest.mark.parametrize("image,platform,workload", CASES)
def test_notebook_runs_on_its_image(image, platform, workload, served, tmp_path):
    profile = PLATFORMS[platform]
    opened = tmp_path / "opened" / f"{workload}.ipynb"  # where the user opened it from
    opened.parent.mkdir()
    shutil.copy(ROOT / "notebooks" / platform / f"{workload}.ipynb", opened)
    content = tmp_path / "content"  # the runtime's empty working folder
    content.mkdir()
    env = {**served.env, "JUPYTER_PATH": str(lanes.jupyter_path()), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": ""}
    params = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=1, **PARAMETERS[workload])
    if platform in SERVICES:  # Studio Lab, SageMaker: their stand-ins' folders
        service = tmp_path / "service"
        service.mkdir()
        service_env, content, ours = SERVICES[platform](service)
        content.mkdir(parents=True, exist_ok=True)
        env.update(service_env, TA_CLOUD_ROOT=str(service))
        out_dir = ours / "runs" / workload
    elif profile.runtime == "colab":
        drive = tmp_path / "drive"
        env.update(PYTHONPATH=str(FAKES), COLAB_RELEASE_TAG="release-colab-lane",
                   TA_COLAB_DRIVE=str(drive), TA_FAKE_COLAB_LOG=str(tmp_path),
                   TA_COLAB_CONTENT=str(content))
        out_dir = drive / "MyDrive" / "train-anywhere" / "runs" / workload
    else:  # Kaggle's defaults are under /kaggle: the stand-in's /kaggle is a temp folder
        env.update(KAGGLE_KERNEL_RUN_TYPE="Interactive", TA_KAGGLE_ROOT=str(tmp_path))
        out_dir = tmp_path / "working" / "runs" / workload
        content = tmp_path / "working"  # where a Kaggle kernel starts
        content.mkdir()
    if profile.accelerator == "xla":
        env.update(XLA_ON_CPU)
    executed = tmp_path / "executed.ipynb"
    with mock.patch.dict(os.environ, env):  # the kernel inherits it
        papermill.execute_notebook(str(opened), str(executed), parameters=params,
                                   cwd=str(content), kernel_name=lanes.kernel_name(image),
                                   progress_bar=False)
    nb = nbformat.read(executed, as_version=4)
    text = stream_text(nb)
    # No notice a hosted stack repeats on every step (torch_xla 2.8 without jax did, 57 times).
    lines = [ln for ln in text.splitlines() if ln.strip()]
    repeated = {ln for ln in lines if lines.count(ln) > 3 and "epoch" not in ln.lower()}
    assert not repeated, repeated
    assert "requires jax/pallas" not in text
    # The clone lands in the runtime's folder; on Kaggle on scratch (lib.runtime.platforms.storage),
    # since /kaggle/working is the version's output.
    with mock.patch.dict(os.environ, env):
        clone_home = storage("kaggle").scratch if profile.runtime == "kaggle" else content
    clone = (clone_home / "train-anywhere").resolve()
    assert f"from train-anywhere/train-anywhere@main (cloned) at {clone}" in text
    if profile.runtime == "kaggle":  # the output keeps results only
        assert sorted(p.name for p in content.iterdir()) == ["runs"]
    assert f"bootstrap: this runtime matches the {IMAGES[image]['title']} image" in text
    assert ("every requirement is already installed" in text or
            "bootstrap: installing what this runtime lacks" in text)
    histories = sorted(out_dir.rglob("metrics.jsonl"))
    assert histories, f"no metrics.jsonl under {out_dir}"
    for path in histories:
        rows = read_jsonl(path)
        assert [r["epoch"] for r in rows] == [1]
        assert all(math.isfinite(v) for r in rows for k, v in r.items()
                   if k.endswith("loss") and isinstance(v, float))
        assert rows[-1]["device"] == ("xla" if profile.accelerator == "xla" else "cpu")
    # the kernel ran in the lane: the bootstrap read the lane's own Python and torch
    pins = IMAGES[image]["pins"]
    assert f"(Python {IMAGES[image]['python']}, torch {pins['torch']})" in text
    # its imports were compiled once, beside the lane (tests/lanes.py build: the kernelspec)
    assert any((lanes.lane_dir(image) / ".pycache").rglob("site-packages/torch/__init__.*.pyc"))


@pytest.mark.parametrize("image", list(RUN))
def test_the_bootstrap_installed_exactly_the_image_lock(image):
    """After the lane's notebooks, what their bootstrap added is requirements/images/<image>.txt
    to the version: a user's runtime gets what this lane tested, not next year's releases."""
    lane_python(image)
    lock = lanes.LOCKS / f"{image}.txt"
    pinned = dict(line.split("==") for line in lock.read_text().splitlines()
                  if line and not line.startswith("#"))
    have = lanes.installed(image)
    assert {k: have.get(k) for k in pinned} == pinned
    # pip compiled none of it (lib/bootstrap.py pip_command: --no-compile): of what it added,
    # only the modules a notebook imported have bytecode, in the kernel's prefix or beside them
    # (pip compiles every module it installs: 1,937 of these 1,938 on the SageMaker image)
    compiled = json.loads(subprocess.run(
        [str(lane_python(image)), "-c", COMPILED, *pinned], capture_output=True, text=True,
        check=True, env={**os.environ, "PYTHONPYCACHEPREFIX": str(
            lanes.lane_dir(image) / ".pycache")}).stdout)
    assert 0 < sum(compiled.values()) < len(compiled) / 2, (sum(compiled.values()),
                                                           len(compiled))


# For each distribution named: its modules (.py files), each True when it has bytecode.
COMPILED = """
import importlib.metadata as m, importlib.util as u, json, os, sys
seen = {}
for name in sys.argv[1:]:
    for f in m.distribution(name).files or []:
        if f.suffix == ".py":
            path = str(f.locate())
            legacy = os.path.join(os.path.dirname(path), "__pycache__", os.path.basename(
                u.cache_from_source(path)))
            seen[str(f)] = os.path.exists(u.cache_from_source(path)) or os.path.exists(legacy)
print(json.dumps(seen))
"""
