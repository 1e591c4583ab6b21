"""Studio Lab, SageMaker and Paperspace notebooks in stand-ins of each service, as a user
starts them: the notebook alone in the service's working folder (Studio Lab's "Copy notebook
only", a file uploaded to a SageMaker space, Paperspace's /notebooks), the service's
environment variables, home and folders (lib/clouds.py says where each is documented) under
TA_CLOUD_ROOT, and the bootstrap's clone served from this checkout. SMOKE on the sample, then
the same notebook again with more epochs: it resumes from where the service keeps the run.

Fashion-MNIST resumes on each service; the other workloads run once, one per service, so
that every workload runs on a new platform and CI stays short (the SageMaker Distribution
image's pins are its lane's, tests/test_image_lanes.py).
"""

from __future__ import annotations

import os
import shutil
from unittest import mock

import nbformat
import papermill
import pytest

from lib.metrics import read_jsonl
from tests.cloud_standins import SERVICES
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


CASES = [("studiolab_t4", "fashion_mnist"), ("studiolab_t4", "mshnet"),
         ("sagemaker_gpu", "fashion_mnist"), ("sagemaker_gpu", "optimizer_study"),
         ("paperspace_gpu", "fashion_mnist"), ("paperspace_gpu", "mamba_spike")]
RESUMED = "fashion_mnist"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return ServedRepo(tmp_path_factory.mktemp("github"))


def run(platform, workload, served, root, cwd, env, epochs):
    opened = cwd / f"{workload}.ipynb"
    shutil.copy(ROOT / "notebooks" / platform / f"{workload}.ipynb", opened)
    executed = root / f"executed-{epochs}.ipynb"
    params = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=epochs, **SMALL[workload])
    kernel_env = {**served.env, **env, "TA_CLOUD_ROOT": str(root), "PYTHONPATH": "",
                  "OMP_NUM_THREADS": "1"}
    with mock.patch.dict(os.environ, kernel_env):  # the kernel inherits it
        papermill.execute_notebook(str(opened), str(executed), parameters=params,
                                   cwd=str(cwd), kernel_name="python3", progress_bar=False)
    return nbformat.read(executed, as_version=4)


@pytest.mark.parametrize("platform,workload", CASES)
def test_notebook_runs_in_the_service_keeps_its_run_there_and_resumes(
        platform, workload, served, tmp_path):
    root = tmp_path / "service"
    root.mkdir()
    env, cwd, ours = SERVICES[platform](root)
    cwd.mkdir(parents=True, exist_ok=True)
    nb = run(platform, workload, served, root, cwd, env, epochs=1)
    text = stream_text(nb)
    assert f"from train-anywhere/train-anywhere@main (cloned) at {cwd / 'train-anywhere'}" in text
    runtime = platform.split("_")[0]
    assert f"notebook on the {runtime} runtime" in text, text[-2000:]
    check_clean_outputs(nb)
    out = ours / "runs" / workload
    histories = sorted(out.rglob("metrics.jsonl"))
    assert histories, f"no metrics.jsonl under {out}"
    assert [r["epoch"] for r in read_jsonl(histories[0])] == [1]
    assert (ours / "data").is_dir()  # the sample was written where the service keeps data
    assert list(out.rglob("checkpoints/*.pt"))
    # Paperspace reserves folders named `checkpoints` in /notebooks: none of ours is there.
    assert not [p for p in (root / "notebooks").rglob("checkpoints") if p.is_dir()]
    if workload != RESUMED:
        return
    # Again with one more epoch: the run continues from the service's storage.
    again = stream_text(run(platform, workload, served, root, cwd, env, epochs=2))
    assert f"resumed from {out / 'checkpoints'}" in again, again[-2000:]
    for path in histories:
        assert [r["epoch"] for r in read_jsonl(path)] == [1, 2], path
