"""The Mamba-Spike TPU notebook for real: torch_xla on the CPU (PJRT_DEVICE=CPU), `make test-xla`.

The spiking front-end's loop over time is one XLA While loop (lib/kernels/lif_scan.py), so its
graph does not grow with T; 4 frames of the N-MNIST sample at half size and a tiny model keep
this run to about 85 s (tests/test_xla_lif_scan.py runs the preset's sizes at T = 50).

LR = 2e-3 rather than the official 1e-3: AdamW multiplies the weights by 1 - lr * wd, and with
the official values that product rounds to exactly 1.0 in fp32 once the cosine takes lr below
~3e-4 (epoch 3 of 3 here). torch_xla bakes the scalars 0 and 1 into the graph, so that step
compiles once more: a one-off in a real run, but not a shape change, which is what this lane
checks.
"""

import json
import math

import pytest
import torch

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla", reason="the XLA lane's environment has torch_xla")

from lib.data.events import build_datasets as event_datasets  # noqa: E402
from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig  # noqa: E402
from lib.runs.records import read_jsonl  # noqa: E402
from tests.notebook_run import XLA_ON_CPU, execute, stream_text  # noqa: E402
from tests.xla_checks import compiles_per_epoch, cpu_and_xla_outputs  # noqa: E402

SMALL = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=3, SMOKE_BATCHES=2, BATCH_SIZE=4, LR=2e-3,
             DATASET="nmnist", N_TIME_BINS=4, DOWNSAMPLE=2, D_MODEL=16, N_LAYERS=1,
             SPIKE_CHANNELS=8)


@pytest.fixture(scope="module")
def tpu_run(tmp_path_factory):
    """The colab_tpu Mamba-Spike notebook, three smoke epochs on the N-MNIST sample."""
    tmp = tmp_path_factory.mktemp("tpu")
    nb = execute("mamba_spike", "colab_tpu", tmp, env=XLA_ON_CPU,
                 DATA_DIR=str(tmp / "data"), OUT_DIR=str(tmp / "run"), **SMALL)
    return tmp, nb


def test_the_tpu_notebook_really_ran_on_xla_in_bf16(tpu_run):
    tmp, nb = tpu_run
    history = read_jsonl(tmp / "run" / "metrics.jsonl")
    assert [r["device"] for r in history] == ["xla"] * 3
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["test_loss"]) for r in history)
    config = json.loads((tmp / "run" / "config.json").read_text())
    assert config["resolved"]["device"] == "xla" and config["resolved"]["precision"] == "bf16"
    assert "device xla (bf16)" in stream_text(nb)
    for figure in ("confusion.png", "firing_rates.png"):
        assert (tmp / "run" / figure).stat().st_size > 5_000, figure
    assert "| layer1 firing rate / silent |" in (tmp / "run" / "results.md").read_text()


def test_compilations_stop_after_the_first_epoch(tpu_run):
    """Static shapes: fixed T, full batches; the step and the evaluation compile once."""
    tmp, _ = tpu_run
    assert len(compiles_per_epoch(tmp / "run" / "metrics.jsonl")) == 3


def test_an_xla_checkpoint_gives_the_same_logits_on_a_plain_cpu(tpu_run):
    tmp, _ = tpu_run
    _, test_set, _ = event_datasets("nmnist", tmp / "data", sample=True, n_time_bins=4,
                                       downsample=2)
    frames = torch.stack([test_set[i][0] for i in range(4)])
    on_cpu, on_xla = cpu_and_xla_outputs(lambda c: MambaSpike(MambaSpikeConfig(**c)),
                                         tmp / "run" / "checkpoints" / "best.pt", frames)
    torch.testing.assert_close(on_xla, on_cpu, rtol=1e-3, atol=1e-3)
