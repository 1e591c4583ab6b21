"""The MSHNet workload: its parameters, default folders, task, figures and results table."""

import json
from pathlib import Path

import pytest
import torch

from lib.data.irstd import PAPER_RESULTS
from lib.models.mshnet import MSHNet, MSHNetConfig
from lib.runtime.platforms import default_dirs
from lib.training import batch
from lib.training.config import ConfigError
from lib.workloads.mshnet import (
    MSHNetRunConfig,
    build_task,
    prediction_grid,
    results_table,
)

GOOD = dict(PLATFORM="kaggle_p100", DEVICE="auto", DATA_DIR=None, OUT_DIR=None,
            SAMPLE_DATA=False, SMOKE=False, BATCH_SIZE=None, SEED=1)


def make(**changes) -> MSHNetRunConfig:
    return MSHNetRunConfig.from_params({**GOOD, **changes})


def test_defaults_are_the_official_training():
    cfg = make()
    assert (cfg.epochs, cfg.lr, cfg.warm_epochs, cfg.dataset) == (400, 0.05, 5, "IRSTD-1k")
    assert (cfg.warmup_rule, cfg.warmup_epochs()) == ("official", 6)  # main.py: epoch <= 5
    assert cfg.image_sizes() == (256, 256)
    assert make(SAMPLE_DATA=True).image_sizes() == (64, 64)  # CPU smoke runs take seconds
    assert make(BASE_SIZE=128).image_sizes() == (128, 128)
    assert make(BASE_SIZE=320, CROP_SIZE=256).image_sizes() == (320, 256)
    assert cfg.resolved_batch_size() == 8 and make(PLATFORM="colab_tpu").resolved_batch_size() == 16


@pytest.mark.parametrize("changes,pattern", [
    (dict(DATASET="SIRST"),
     r"unknown DATASET 'SIRST'; expected one of \['IRSTD-1k', 'NUDT-SIRST'\]"),
    (dict(BASE_SIZE=100), r"BASE_SIZE=100 must be a multiple of 16 .*BASE_SIZE = 256"),
    (dict(CROP_SIZE=8), r"CROP_SIZE=8 must be a multiple of 16 that is >= 16"),
    (dict(WARM_EPOCHS=-1), r"WARM_EPOCHS=-1 must be >= 0 \(with WARMUP_RULE = 'paper', 0: no "
                           r"warm-up\)"),
    (dict(WARMUP_RULE="text"), r"unknown WARMUP_RULE 'text'; expected one of \['official', "
                               r"'paper'\]"),
    (dict(BASE_SIZE="256"), r"BASE_SIZE='256' has type str; expected int or None"),
])
def test_bad_parameters_get_one_clear_message(changes, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make(**changes)


@pytest.mark.parametrize("attached", ["datasets/someone/irstd-1k", "irstd-1k", None])
def test_kaggle_reads_attached_datasets_and_writes_the_sample_where_it_can(
        attached, tmp_path, monkeypatch):
    """Both layouts Kaggle mounts datasets in (current: three levels, older: one); nothing
    attached: /kaggle/input itself, whose reader then says what it expected."""
    from lib.data.irstd_sample import write_irstd_sample

    monkeypatch.setenv("TA_KAGGLE_ROOT", str(tmp_path))
    (tmp_path / "input" / "notebooks" / "me" / "an-unrelated-run").mkdir(parents=True)
    if attached:
        write_irstd_sample(tmp_path / "input" / attached, n_train=2, n_test=2, size=32)
    scratch_data, working_runs = default_dirs("mshnet", "kaggle")
    assert working_runs == tmp_path / "working" / "runs" / "mshnet"
    assert not scratch_data.is_relative_to(tmp_path / "working")  # the output keeps results
    want = tmp_path / "input" / attached if attached else tmp_path / "input"
    assert make().paths("kaggle") == (want, working_runs)
    # /kaggle/input is read-only: the sample goes to scratch
    assert make(SAMPLE_DATA=True).paths("kaggle")[0] == scratch_data
    assert make(DATA_DIR="~/irstd").paths("kaggle")[0] == Path("~/irstd").expanduser()


def test_colab_and_local_use_the_platform_defaults():
    assert make(PLATFORM="colab_t4").paths("colab") == default_dirs("mshnet", "colab")
    assert make(PLATFORM="local").paths("local") == default_dirs("mshnet", "local")


def _phases(cfg: MSHNetRunConfig, epochs: int) -> list[bool]:
    """Per 0-based epoch: is the built task's loss (and the metrics told its phase) warming up?"""
    task, _ = build_task(cfg, torch.device("cpu"))
    phases = []
    for epoch in range(epochs):
        task.loss_fn.set_epoch(epoch)
        assert task.metrics()[0].warm == task.loss_fn.warm
        phases.append(task.loss_fn.warm)
    return phases


def test_task_is_adagrad_monitoring_miou_with_metrics_in_the_losss_phase():
    task, model_config = build_task(make(LR=0.1, WARM_EPOCHS=2), torch.device("cpu"))
    assert isinstance(task.optimizer, torch.optim.Adagrad)
    assert task.optimizer.param_groups[0]["lr"] == 0.1 and task.scheduler is None
    assert (task.monitor, task.monitor_mode) == ("test_mIoU", "max")
    rebuilt = MSHNet(MSHNetConfig(**model_config))  # what a checkpoint's model_config must allow
    rebuilt.load_state_dict(task.model.state_dict())


def test_the_default_warm_up_is_the_official_loops_six_epochs():
    # main.py trains epochs 0, 1, ... and uses the warm-up loss while epoch <= --warm-epoch (5)
    assert _phases(make(), 8) == [True] * 6 + [False] * 2
    assert _phases(make(WARM_EPOCHS=2), 4) == [True, True, True, False]
    assert _phases(make(WARM_EPOCHS=0), 2) == [True, False]  # epoch 0 <= 0


def test_the_papers_reading_warms_up_for_warm_epochs():
    assert _phases(make(WARMUP_RULE="paper"), 8) == [True] * 5 + [False] * 3
    assert _phases(make(WARMUP_RULE="paper", WARM_EPOCHS=2), 4) == [True, True, False, False]
    assert _phases(make(WARMUP_RULE="paper", WARM_EPOCHS=0), 2) == [False, False]


def test_the_official_defaults_have_no_deviations_and_each_change_is_named():
    cfg = make(PLATFORM="local")  # its default batch is the official 4
    assert cfg.deviations() == []
    assert str(cfg).endswith("warm-up: 6 epochs of soft-IoU\n"
                             "  deviations from the official code: none")
    found = make(PLATFORM="local", WARMUP_RULE="paper", EPOCHS=10, BASE_SIZE=128,
                 SMOKE=True).deviations()
    assert found == ["EPOCHS = 10 (official: 400)",
                     "WARMUP_RULE = 'paper': 5 warm-up epochs (official: WARM_EPOCHS + 1 = 6)",
                     "BASE_SIZE/CROP_SIZE = 128/128 px (official: 256/256)",
                     "SMOKE = True (6 batches per epoch)"]
    # A new run trains with the official batch on every platform (BATCH_SIZES: what a step
    # holds there); the batch's deviations are the session's, from what the sessions ran.
    assert {make(PLATFORM=p).default_global_batch(n, "cuda") for p, n in
            [("kaggle_p100", 1), ("kaggle_t4x2", 2), ("kaggle_tpu", 8)]} == {4}
    assert batch.deviations(4, 8, []) == ["global batch 8 (official: 4 on one GPU)"]
    two_t4s = [{"batch_norm": True, "micro_batch": 2, "accumulation": 1}]  # 2 per device x 2
    assert batch.deviations(4, 4, two_t4s) == [
        "BatchNorm over 2 samples per step, not the global batch of 4 (micro-batches or "
        "devices; accumulation is exact only for models without batch statistics)"]
    assert batch.deviations(4, 4, [{"batch_norm": True, "micro_batch": 4}]) == []
    assert "deviations from the official code: WARMUP_RULE = 'paper'" in str(
        make(PLATFORM="local", WARMUP_RULE="paper"))


def test_results_table_puts_the_run_beside_the_papers_row():
    scores = {"test_mIoU": 12.345, "test_nIoU": 23.4, "test_Pd": 50.0, "test_Fa": 1234.5,
              "test_Fa_all": 2000.0}
    table = results_table(scores, "NUDT-SIRST", True, ["SMOKE = True (6 batches per epoch)"])
    lines = table.splitlines()
    assert lines[0] == "| | this run (synthetic sample) | MSHNet paper (NUDT-SIRST) |"
    assert "| mIoU (%) | 12.35 | 80.55 |" in lines
    assert "| nIoU (%) | 23.40 | - |" in lines  # the paper reports no nIoU
    assert "| Fa (x1e-6) | 1234.50 | 11.77 |" in lines
    assert "| Fa, every unmatched pixel (x1e-6) | 2000.00 | - |" in lines
    assert f"| Pd (%) | 50.00 | {PAPER_RESULTS['NUDT-SIRST']['Pd']:.2f} |" in lines
    assert lines[-1] == ("| deviations from the official code | SMOKE = True (6 batches per "
                         "epoch) | - |")
    table = results_table(scores, "IRSTD-1k", False, [])
    assert "this run (IRSTD-1k)" in table
    assert table.splitlines()[-1] == "| deviations from the official code | none | - |"


class _Fixed(torch.nn.Module):
    """Predicts a fixed logit map: target where the ground truth of image 0 is."""

    def forward(self, x):
        logit = torch.full((x.shape[0], 1, *x.shape[-2:]), -5.0)
        logit[0, 0, 2:4, 2:4] = 5.0
        return logit, [logit]


def test_prediction_grid_titles_each_image_with_its_iou():
    from types import SimpleNamespace

    y0 = torch.zeros(1, 16, 16)
    y0[0, 2:4, 2:6] = 1  # 4 of these 8 pixels are predicted
    data = [(torch.zeros(3, 16, 16), y0), (torch.zeros(3, 16, 16), torch.zeros(1, 16, 16))]
    task = SimpleNamespace(model=_Fixed(), loss_fn=SimpleNamespace(warm=False))
    fig = prediction_grid(task, data, torch.device("cpu"))
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["IoU 0.50", "IoU 1.00"]  # an empty image with no prediction is perfect
    assert "not yet learnt" not in fig._suptitle.get_text()
    # A model that marks every pixel (MSHNet before it learns the background) is said to be so.
    task.model.forward = lambda x: (torch.ones(x.shape[0], 1, *x.shape[-2:]),) * 2
    title = prediction_grid(task, data, torch.device("cpu"))._suptitle.get_text()
    assert title.endswith("\n100% of pixels marked as target: the model has not yet learnt the "
                          "background")


def test_the_results_list_batchnorm_over_micro_batches_beside_the_other_deviations(tmp_path):
    """A run whose second session accumulated 2 x 2 (a device that held 2): the session's
    deviations, which the results table shows, name it before SAMPLE_DATA and SMOKE."""
    from lib import session

    run = tmp_path / "run"
    cfg = make(PLATFORM="local", DEVICE="cpu", SMOKE=True, SAMPLE_DATA=True, OUT_DIR=str(run))
    s = session.start(cfg, runtime="local")
    assert s.global_batch == 4  # the paper's, in smoke mode too (4 per step on the CPU)
    rows = [{"micro_batch": 4, "accumulation": 1, "batch_norm": True},
            {"micro_batch": 2, "accumulation": 2, "batch_norm": True}]
    (run / "sessions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = s.deviations()
    assert found[-3:] == [
        "BatchNorm over 2 samples per step, not the global batch of 4 (micro-batches or "
        "devices; accumulation is exact only for models without batch statistics)",
        "SAMPLE_DATA = True (the offline sample, not the dataset)",
        "SMOKE = True (6 batches per epoch)"]
