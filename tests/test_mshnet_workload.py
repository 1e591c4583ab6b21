"""The MSHNet workload: its parameters, default folders, task, figures and results table."""

from pathlib import Path

import pytest
import torch

from lib.config import ConfigError
from lib.data.irstd import PAPER_RESULTS
from lib.models.mshnet import MSHNet, MSHNetConfig
from lib.platforms import default_dirs
from lib.workloads.mshnet import (
    KAGGLE_INPUT,
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
    (dict(WARM_EPOCHS=-1), r"WARM_EPOCHS=-1 must be >= 0 \(0: no warm-up\)"),
    (dict(BASE_SIZE="256"), r"BASE_SIZE='256' has type str; expected int or None"),
])
def test_bad_parameters_get_one_clear_message(changes, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make(**changes)


def test_kaggle_reads_attached_datasets_and_writes_the_sample_where_it_can(monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    working_data, working_runs = default_dirs("mshnet", "kaggle")
    assert make().paths() == (KAGGLE_INPUT, working_runs)
    assert make(SAMPLE_DATA=True).paths()[0] == working_data  # /kaggle/input is read-only
    assert make(DATA_DIR="~/irstd").paths()[0] == Path("~/irstd").expanduser()


def test_colab_and_local_use_the_platform_defaults(monkeypatch):
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release")
    assert make(PLATFORM="colab_t4").paths() == default_dirs("mshnet", "colab")
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    assert make(PLATFORM="local_mps").paths() == default_dirs("mshnet", "local")


def test_task_is_adagrad_monitoring_miou_with_metrics_in_the_losss_phase():
    task, model_config = build_task(make(LR=0.1, WARM_EPOCHS=2), torch.device("cpu"))
    assert isinstance(task.optimizer, torch.optim.Adagrad)
    assert task.optimizer.param_groups[0]["lr"] == 0.1 and task.scheduler is None
    assert (task.monitor, task.monitor_mode) == ("test_mIoU", "max")
    phases = []
    for epoch in (0, 1, 2, 7):
        task.loss_fn.set_epoch(epoch)
        phases.append(task.metrics()[0].warm)
    assert phases == [True, True, False, False]
    rebuilt = MSHNet(MSHNetConfig(**model_config))  # what a checkpoint's model_config must allow
    rebuilt.load_state_dict(task.model.state_dict())


def test_results_table_puts_the_run_beside_the_papers_row():
    scores = {"test_mIoU": 12.345, "test_nIoU": 23.4, "test_Pd": 50.0, "test_Fa": 1234.5}
    table = results_table(scores, "NUDT-SIRST", sample=True)
    lines = table.splitlines()
    assert lines[0] == "| | this run (synthetic sample) | MSHNet paper (NUDT-SIRST) |"
    assert "| mIoU (%) | 12.35 | 80.55 |" in lines
    assert "| nIoU (%) | 23.40 | - |" in lines  # the paper reports no nIoU
    assert "| Fa (x1e-6) | 1234.50 | 11.77 |" in lines
    assert f"| Pd (%) | 50.00 | {PAPER_RESULTS['NUDT-SIRST']['Pd']:.2f} |" in lines
    assert "this run (IRSTD-1k)" in results_table(scores, "IRSTD-1k", sample=False)


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
