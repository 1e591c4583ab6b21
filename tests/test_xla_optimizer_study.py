"""The optimizer-study TPU notebook for real: torch_xla on the CPU (PJRT_DEVICE=CPU)."""

import json
import math

import pytest
import torch

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla", reason="the XLA lane's environment has torch_xla")

from lib.data.cifar import build_datasets as cifar_datasets  # noqa: E402
from lib.models.resnet import CifarResNet18, ResNetConfig  # noqa: E402
from lib.runs.records import read_jsonl  # noqa: E402
from lib.study.grid import read_results  # noqa: E402
from tests.notebook_run import XLA_ON_CPU, execute, stream_text  # noqa: E402
from tests.xla_checks import compiles_per_epoch, cpu_and_xla_outputs  # noqa: E402

RUN = "cifar10-adamw-seed0-sym0.2"


@pytest.fixture(scope="module")
def tpu_run(tmp_path_factory):
    """The colab_tpu study notebook, one run (AdamW, seed 0) of three smoke epochs: the lr
    changes every step (warm-up), which must not recompile the step."""
    tmp = tmp_path_factory.mktemp("tpu")
    nb = execute("optimizer_study", "colab_tpu", tmp, env=XLA_ON_CPU, SMOKE=True,
                 SAMPLE_DATA=True, EPOCHS=3, SMOKE_BATCHES=2, BATCH_SIZE=16, OPTIMIZER="adamw",
                 SEED=0, DATA_DIR=str(tmp / "data"), OUT_DIR=str(tmp / "study"))
    return tmp, nb


def test_the_tpu_study_really_ran_on_xla_in_bf16(tpu_run):
    tmp, nb = tpu_run
    history = read_jsonl(tmp / "study" / RUN / "metrics.jsonl")
    assert [r["device"] for r in history] == ["xla"] * 3
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["test_loss"]) for r in history)
    assert len({r["lr"] for r in history}) == 3  # the schedule moved between epochs
    config = json.loads((tmp / "study" / RUN / "config.json").read_text())
    assert config["resolved"]["device"] == "xla" and config["resolved"]["precision"] == "bf16"
    assert "device xla (bf16)" in stream_text(nb)
    (row,) = read_results(tmp / "study" / "results.csv")
    assert row["run"] == RUN and row["epochs"] == 3
    assert (tmp / "study" / "bars-cifar10-sym0.2.png").stat().st_size > 10_000


def test_compilations_stop_after_the_first_epoch(tpu_run):
    """Static shapes and the lr as device data: step, evaluation and metrics compile once."""
    tmp, _ = tpu_run
    assert len(compiles_per_epoch(tmp / "study" / RUN / "metrics.jsonl")) == 3


def test_an_xla_checkpoint_gives_the_same_predictions_on_a_plain_cpu(tpu_run):
    tmp, _ = tpu_run
    _, test_set, _ = cifar_datasets("cifar10", tmp / "data", True)
    images = torch.stack([test_set[i][0] for i in range(16)])
    on_cpu, on_xla = cpu_and_xla_outputs(lambda c: CifarResNet18(ResNetConfig(**c)),
                                         tmp / "study" / RUN / "checkpoints" / "best.pt", images)
    assert torch.equal(on_xla.argmax(1), on_cpu.argmax(1))
    assert (on_xla - on_cpu).abs().max() <= 1e-3 * max(1.0, on_cpu.abs().max().item())
