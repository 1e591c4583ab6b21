"""papermill runs every Fashion-MNIST notebook on the CPU and checks what it wrote."""

import json
import math

import pytest
import torch

from lib.metrics import read_jsonl
from lib.models.cnn import CNN, CNNConfig
from lib.platforms import PLATFORMS
from tests.notebook_run import FAKES, execute, stream_text

pytestmark = pytest.mark.notebook
SMOKE = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=2)


def check_run(out_dir, epochs=2):
    history = read_jsonl(out_dir / "metrics.jsonl")
    assert [r["epoch"] for r in history] == list(range(1, epochs + 1))
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["test_loss"]) for r in history)
    assert history[-1]["test_accuracy"] > 0.5  # chance is 0.1
    state = torch.load(out_dir / "checkpoints" / "best.pt", map_location="cpu", weights_only=True)
    model = CNN(CNNConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    assert list((out_dir / "tb").glob("events.out.tfevents.*"))
    assert (out_dir / "curves.png").stat().st_size > 0
    return history


@pytest.mark.parametrize("platform", [p for p in sorted(PLATFORMS) if p != "colab_tpu"])
def test_notebook_trains_on_the_cpu(platform, tmp_path):
    nb = execute("fashion_mnist", platform, tmp_path, DATA_DIR=str(tmp_path / "data"),
                 OUT_DIR=str(tmp_path / "run"), **SMOKE)
    history = check_run(tmp_path / "run")
    assert history[-1]["device"] == "cpu"
    text = stream_text(nb)
    assert "falls back to the CPU" in text
    assert f"test accuracy {history[-1]['test_accuracy']:.4f}" in text


def test_tpu_notebook_without_torch_xla_runs_on_the_cpu(tmp_path):
    from lib.xla import installed

    if installed():  # only when the whole suite is run inside the XLA lane's environment
        pytest.skip("torch_xla is installed here: tests/test_xla_lane.py covers this notebook")
    execute("fashion_mnist", "colab_tpu", tmp_path, DATA_DIR=str(tmp_path / "data"),
            OUT_DIR=str(tmp_path / "run"), **SMOKE)
    assert check_run(tmp_path / "run")[-1]["device"] == "cpu"


def test_colab_bootstrap_mounts_drive_writes_there_and_flushes(tmp_path):
    """The Colab path against tests/fakes/google/colab: defaults go to Drive."""
    drive = tmp_path / "drive"
    env = {"PYTHONPATH": str(FAKES), "COLAB_RELEASE_TAG": "release-colab-test",
           "TA_COLAB_DRIVE": str(drive), "TA_FAKE_COLAB_LOG": str(tmp_path)}
    nb = execute("fashion_mnist", "colab_t4", tmp_path, env=env, **SMOKE)
    out_dir = drive / "MyDrive" / "train-anywhere" / "runs" / "fashion_mnist"
    check_run(out_dir)
    assert (drive / "MyDrive" / "train-anywhere" / "data" / "sample" / "FashionMNIST").is_dir()
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["call"] for c in calls] == ["mount", "flush_and_unmount"]
    assert calls[0]["mountpoint"] == str(drive)
    text = stream_text(nb)
    assert "every requirement is already installed" in text
    assert "Colab T4 notebook on the colab runtime" in text
