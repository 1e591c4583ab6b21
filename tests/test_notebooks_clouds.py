"""Every workload's Studio Lab, SageMaker and Paperspace notebook in a stand-in of each service,
started as a user starts it there, from an empty folder: the service's environment
variables, home and folders (lib/runtime/clouds.py says where each is documented) under
TA_CLOUD_ROOT, and GitHub served from this checkout.

How a user opens a notebook there (more-clouds.md): Studio Lab's badge offers "Clone Entire
Repo" (the repository lands in /home/studio-lab-user/<repo>, the notebook opens from it) or
"Copy notebook only" (the notebook alone in the home; the bootstrap clones beside it);
SageMaker users clone in JupyterLab's Git menu (~/<repo>) or upload the notebook, in a Studio
space or on a notebook instance (whose Jupyter root is ~/SageMaker, where repositories
attached at creation are cloned); Paperspace's "Run on Gradient" puts the notebook in
/notebooks (whether it copies the whole repository is unconfirmed: the bootstrap clones it).
Each AWS flow is run, on different workloads.

Each case is two sessions of the same notebook, SMOKE on the sample: the first reaches a
session limit (TA_SESSION_HOURS, shortened) after its first step, stops itself saved in the
service's persistent folder and says what to do there; the second (the user re-runs the
notebook) resumes from that checkpoint and finishes. Two short kernels per case; each way of
opening a notebook on each service once (CASES).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

from lib.runs.records import read_jsonl
from lib.runtime import clouds
from tests.cloud_standins import SERVICES, fill, sagemaker_instance
from tests.notebook_run import ROOT, check_clean_outputs, stream_text
from tests.served_repo import ServedRepo

pytestmark = pytest.mark.notebook
SMALL = {
    "fashion_mnist": dict(SMOKE_BATCHES=2),
    "mshnet": dict(SMOKE_BATCHES=2, BATCH_SIZE=4),
    "mamba_spike": dict(SMOKE_BATCHES=2, BATCH_SIZE=4, DATASET="nmnist", N_TIME_BINS=4,
                        DOWNSAMPLE=2, D_MODEL=16, N_LAYERS=1, SPIKE_CHANNELS=8),
    "optimizer_study": dict(SMOKE_BATCHES=2, BATCH_SIZE=16, OPTIMIZERS=["adamw"], SEEDS=[0]),
}
# Opened from a clone of the whole repository (Studio Lab's "Clone Entire Repo", JupyterLab's
# Git clone); the other AWS cases open the notebook alone in the home.
CLONED = {("studiolab_t4", "fashion_mnist"), ("sagemaker_gpu", "mshnet"),
          ("sagemaker_gpu", "optimizer_study")}
# Each way a user opens a notebook on each service once (Studio Lab: clone, copy; SageMaker:
# a Studio space or a notebook instance, each cloned and copied; Paperspace: copied), every
# workload at least once. What differs per service is the session, the storage roles and the
# clone, not the workload: the 4 x 3 matrix this replaced ran each of those paths 2-4 times.
# Every workload's notebook of every service is still rendered and checked (test_builder.py),
# and the SageMaker Distribution lane runs the AWS notebooks on that image.
CASES = [("studiolab_t4", "fashion_mnist"), ("studiolab_t4", "mshnet"),
         ("sagemaker_gpu", "mshnet"), ("sagemaker_gpu", "fashion_mnist"),
         ("sagemaker_gpu", "optimizer_study"), ("sagemaker_gpu", "mamba_spike"),
         ("paperspace_gpu", "optimizer_study")]
# What each service's limit line advises (lib.runtime.clouds.storage's carry_over).
ADVICE = {"studiolab_t4": "caps GPU time per day", "sagemaker_gpu": "idle shutdown",
          "paperspace_gpu": "shuts down after 6 h"}
# SageMaker's notebook instances (the same notebook) run these; its Studio spaces the others.
INSTANCE = {("sagemaker_gpu", "optimizer_study"), ("sagemaker_gpu", "mamba_spike")}
# What each service keeps between sessions (more-clouds.md, 4; lib/runtime/clouds.py's sources).
KEPT = {"studiolab_t4": "home/studio-lab-user", "sagemaker_gpu": "home/sagemaker-user",
        "paperspace_gpu": "storage", "instance": "home/ec2-user/SageMaker"}
REPO = "train-anywhere"
BLOB = f"github/{REPO}/{REPO}/blob/main/notebooks/{{platform}}/{{workload}}.ipynb"
# The header the user sees: the service's badge, opening this very notebook (paid SageMaker
# has none: the README's steps and a link to the file).
BADGE = {"studiolab_t4": "[![Open In SageMaker Studio Lab](https://studiolab.sagemaker.aws/"
                         "studiolab.svg)](https://studiolab.sagemaker.aws/import/" + BLOB + ")",
         "paperspace_gpu": "[![Run on Gradient](https://assets.paperspace.io/img/gradient-badge"
                           ".svg)](https://console.paperspace.com/" + BLOB + ")",
         "sagemaker_gpu": "[SageMaker Studio / notebook instance](notebooks/{platform}/"
                          "{workload}.ipynb)"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return ServedRepo(tmp_path_factory.mktemp("github"))


def open_notebook(platform, workload, served, home) -> Path:
    """The notebook where the user has it after opening it on this service."""
    if (platform, workload) in CLONED:
        clone = home / REPO
        if not clone.exists():
            subprocess.run(["git", "clone", "--quiet", f"https://github.com/{REPO}/{REPO}.git",
                            str(clone)], check=True, env={**os.environ, **served.env})
        return clone / "notebooks" / platform / f"{workload}.ipynb"
    opened = home / f"{workload}.ipynb"
    shutil.copy(ROOT / "notebooks" / platform / f"{workload}.ipynb", opened)
    return opened


def session(opened, workload, served, root, env, name, executed_in=None, **more_env):
    """One session: the notebook run in its folder (Jupyter's kernel starts there); the
    executed notebook goes to `executed_in` (default: the service's root)."""
    executed = (executed_in or root) / f"executed-{name}.ipynb"
    params = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=1, **SMALL[workload])
    kernel_env = {**served.env, **env, "TA_CLOUD_ROOT": str(root), "PYTHONPATH": "",
                  "OMP_NUM_THREADS": "1", **more_env}
    with mock.patch.dict(os.environ, kernel_env):  # the kernel inherits it
        papermill.execute_notebook(str(opened), str(executed), parameters=params,
                                   cwd=str(opened.parent), kernel_name="python3",
                                   progress_bar=False)
    nb = nbformat.read(executed, as_version=4)
    check_clean_outputs(nb)
    return stream_text(nb)


@pytest.mark.parametrize("platform,workload", CASES)
def test_each_workload_runs_in_the_service_stops_before_its_limit_and_resumes_there(
        platform, workload, served, tmp_path):
    root = tmp_path / "service"
    root.mkdir()
    instance = (platform, workload) in INSTANCE
    env, home, ours = (sagemaker_instance if instance else SERVICES[platform])(root)
    home.mkdir(parents=True, exist_ok=True)
    opened = open_notebook(platform, workload, served, home)
    header = nbformat.read(opened, as_version=4).cells[0].source
    assert header.startswith(BADGE[platform].format(platform=platform, workload=workload))
    before = set(home.iterdir())
    out = ours / "runs" / workload
    assert root / KEPT["instance" if instance else platform] in out.parents

    text = session(opened, workload, served, root, env, "first", TA_SESSION_HOURS="1e-9")
    if (platform, workload) in CLONED:
        assert f"from the checkout at {home / REPO}" in text, text[:2000]
    else:
        assert f"from {REPO}/{REPO}@main (cloned) at {home / REPO}" in text, text[:2000]
    assert f"notebook on the {platform.split('_')[0]} runtime" in text, text[-2000:]
    stopped = re.findall(r"STOPPED before the session limit \(.*?\): saved at epoch 1, "
                         r"batch 1 in (\S+)\. To continue: (.*)", text)
    assert len(stopped) == 1, text[-3000:]
    run_dir, advice = Path(stopped[0][0]), stopped[0][1]
    assert out in (run_dir, *run_dir.parents) and ADVICE[platform] in advice
    assert [p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt")] == [
        "ckpt-e0000-b000001.pt"]
    assert (run_dir / "STOPPED.json").is_file()
    assert (ours / "data").is_dir()  # the sample was written where the service keeps data
    # Beside the user's files only the clone and our folder (dot folders: Jupyter's own).
    added = {p.name for p in set(home.iterdir()) - before if not p.name.startswith(".")}
    assert added <= {REPO, ours.name if ours.parent == home else REPO}, added

    again = session(opened, workload, served, root, env, "second")
    assert f"resumed from {run_dir / 'checkpoints'}" in again and "at epoch 0, batch 1" in again
    assert [r["epoch"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1]
    assert not (run_dir / "STOPPED.json").exists()
    assert "STOPPED" not in again
    if platform == "paperspace_gpu":  # a folder named `checkpoints` in /notebooks is reserved
        assert not [p for p in (root / "notebooks").rglob(clouds.PAPERSPACE_RESERVED)]
        assert (root / "notebooks" / REPO / "lib").is_dir()  # the clone is there, and checked


@pytest.mark.parametrize("platform,torch,fix", [
    ("paperspace_gpu", "2.1.1+cu121", "https://download.pytorch.org/whl/cu126"),
    ("studiolab_t4", "2.0.1", "train-anywhere kernel built from environment.yml"),
    ("sagemaker_gpu", "2.2.0", "`%pip install -U torch torchvision`"),
], ids=["paperspace-image", "studiolab", "sagemaker"])
def test_a_torch_too_old_stops_the_bootstrap_with_one_line_and_the_services_fix(
        platform, torch, fix, served, tmp_path):
    """Paperspace's default image ships torch 2.1.1+cu121 (more-clouds.md, 3), older than the
    project's torch.amp API, so no image lane runs its notebooks; an old kernel elsewhere is
    the same case. Opened there, the notebook stops in the bootstrap cell with one line and the
    fix, before pip adds anything beside that torch. The torch's metadata stands in for it."""
    root = tmp_path / "service"
    root.mkdir()
    env, home, _ = SERVICES[platform](root)
    home.mkdir(parents=True, exist_ok=True)
    site = tmp_path / "image-site-packages" / f"torch-{torch}.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    opened = open_notebook(platform, "fashion_mnist", served, home)
    executed = root / "executed.ipynb"
    kernel_env = {**served.env, **env, "TA_CLOUD_ROOT": str(root),
                  "PYTHONPATH": str(site.parent), "OMP_NUM_THREADS": "1"}
    with mock.patch.dict(os.environ, kernel_env), pytest.raises(
            papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(str(opened), str(executed), parameters=dict(SMOKE=True),
                                   cwd=str(opened.parent), kernel_name="python3",
                                   progress_bar=False)
    assert err.value.ename == "EnvironmentTooOld"
    line = err.value.evalue
    assert line.startswith(f"this kernel has torch {torch}; the project needs torch 2.3 or "
                           "newer; fix: "), line
    assert fix in line and "\n" not in line
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert [o["traceback"] for o in errors] == [[f"EnvironmentTooOld: {line}"]]
    assert "installing what this runtime lacks" not in stream_text(nb)


def test_studio_labs_full_project_stops_the_download_with_one_line_before_it_starts(
        served, tmp_path):
    """Studio Lab's 15 GB project holds the home, conda environments included: CIFAR10-DVS
    (about 14 GB to download and unpack) cannot fit beside 14 GB already there, so the notebook
    stops at its data cell with one line (both numbers, what to remove) before tonic writes or
    fetches anything; a missing check would end in another error (the kernel's web proxy is a
    closed port: nothing is downloaded either way)."""
    root = tmp_path / "service"
    root.mkdir()
    env, home, ours = SERVICES["studiolab_t4"](root)
    fill(home, 14 * 10**9)  # the train-anywhere environment, other environments and projects
    opened = open_notebook("studiolab_t4", "mamba_spike", served, home)
    params = dict(SMOKE=True, SAMPLE_DATA=False, DATASET="cifar10dvs", EPOCHS=1)
    closed = "http://127.0.0.1:9"
    kernel_env = {**served.env, **env, "TA_CLOUD_ROOT": str(root), "PYTHONPATH": "",
                  "OMP_NUM_THREADS": "1", "http_proxy": closed, "https_proxy": closed}
    with mock.patch.dict(os.environ, kernel_env), pytest.raises(
            papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(str(opened), str(root / "executed.ipynb"), parameters=params,
                                   cwd=str(home), kernel_name="python3", progress_bar=False)
    assert err.value.ename == "NoSpace", (err.value.ename, err.value.evalue)
    line = err.value.evalue
    said = re.match(r"downloading and unpacking CIFAR10DVS needs 14\.00 GB at '(.+)' but Studio "
                    r"Lab's 15 GB project storage has (\d+\.\d\d) GB free \((\d+\.\d\d) GB of "
                    r"15\.00 GB used", line)
    assert said and said[1] == str(ours / "data"), line
    # the project's clone, which the bootstrap makes in the home first, counts too (5 MB, and
    # growing with the project's history: 14.01 GB used since it passed 5 MB)
    free, used = float(said[2]), float(said[3])
    assert 14.0 <= used < 14.05 and free + used == pytest.approx(15.0, abs=0.011), line
    assert "conda env remove" in line and "\n" not in line
    assert not (ours / "data" / "CIFAR10DVS").exists()
