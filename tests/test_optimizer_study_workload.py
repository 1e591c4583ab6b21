"""The optimizer-study workload: parameters, the grid, one run's session and task."""

import math

import pytest
import torch

from lib import session
from lib.models.resnet import count_parameters
from lib.runtime.platforms import PLATFORMS
from lib.training.config import ConfigError
from lib.workloads.optimizer_study import (
    OptimizerStudyConfig,
    build_task,
    cell_session,
    datasets,
    plan,
    study_eta,
)

GOOD = dict(PLATFORM="colab_t4", DEVICE="cpu", DATA_DIR=None, OUT_DIR=None, SAMPLE_DATA=False,
            SMOKE=False, BATCH_SIZE=None)


def make(**changes) -> OptimizerStudyConfig:
    return OptimizerStudyConfig.from_params({**GOOD, **changes})


def test_defaults_are_the_study_design():
    cfg = make()
    assert cfg.grid_optimizers() == ["sgd", "adam", "adamw", "lion", "radam"]
    assert cfg.grid_seeds() == [0, 1, 2]
    assert (cfg.epochs, cfg.label_noise, cfg.noise_mode, cfg.dataset) == (
        200, 0.2, "symmetric", "cifar10")
    assert cfg.hparams("lion") == (2e-4, 0.25) and cfg.hparams("sgd") == (0.1, 5e-4)
    assert make(LR=0.05, WEIGHT_DECAY=0.0).hparams("lion") == (0.05, 0.0)


def test_every_platform_trains_with_a_global_batch_of_128():
    for name, platform in PLATFORMS.items():
        per_device = make(PLATFORM=name).resolved_batch_size()
        assert per_device * platform.devices == 128, name


def test_the_grid_and_its_single_run_overrides():
    cfg = make(OPTIMIZERS=["SGD", "adamw"], SEEDS=[3, 4], DATASET="CIFAR-100")
    assert [s.name for s in plan(cfg)] == [
        "cifar100-sgd-seed3-sym0.2", "cifar100-sgd-seed4-sym0.2",
        "cifar100-adamw-seed3-sym0.2", "cifar100-adamw-seed4-sym0.2"]
    one = make(OPTIMIZER="lion", SEED=7, LABEL_NOISE=0.4, NOISE_MODE="asymmetric")
    assert [s.name for s in plan(one)] == ["cifar10-lion-seed7-asym0.4"]


@pytest.mark.parametrize("changes,pattern", [
    (dict(OPTIMIZERS=["sgd", "adagrad"]),
     r"OPTIMIZERS: unknown optimizer 'adagrad'; valid choices are sgd, adam, adamw, lion, radam"),
    (dict(OPTIMIZER="nadam"), r"OPTIMIZER: unknown optimizer 'nadam'"),
    (dict(LABEL_NOISE=1.5), r"LABEL_NOISE=1.5 is outside \[0, 1\].*LABEL_NOISE = 0.2"),
    (dict(LABEL_NOISE=-0.1), r"LABEL_NOISE=-0.1 is outside \[0, 1\]"),
    (dict(NOISE_MODE="pairs"), r"unknown NOISE_MODE 'pairs'; expected one of"),
    (dict(DATASET="svhn"), r"DATASET: DATASET='svhn' is not one of \['cifar10', 'cifar100'\]"),
    (dict(SEEDS=[]), r"must not be empty; e.g. OPTIMIZERS = \['sgd', 'adamw'\] and SEEDS"),
    (dict(SEEDS=[0, -2]), r"SEEDS=\[0, -2\] has negative seeds \[-2\]"),
    (dict(SEEDS="0,1"), r"SEEDS='0,1' has type str; expected a list of int"),
    (dict(WEIGHT_DECAY=-1e-4), r"WEIGHT_DECAY=-0.0001 must be >= 0"),
    (dict(WARMUP_EPOCHS=-1), r"WARMUP_EPOCHS=-1 must be >= 0"),
    (dict(LR=0.0), r"LR=0.0 must be > 0"),
])
def test_bad_parameters_get_one_clear_message(changes, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make(**changes)


def test_one_seed_gives_every_optimizer_the_same_labels_and_initial_weights(tmp_path):
    """Only the update rule differs between the runs of one seed."""
    s = session.start(make(SAMPLE_DATA=True, DATA_DIR=str(tmp_path / "data"),
                           OUT_DIR=str(tmp_path / "out"), SEEDS=[0, 1]), announce=False)
    weights, labels = {}, {}
    for spec in plan(s.cfg):
        rs = cell_session(s, spec)
        assert rs.out_dir == tmp_path / "out" / spec.name and rs.cfg.optimizer == spec.optimizer
        train_set, test_set, _ = datasets(rs)
        labels[spec.name] = (list(train_set.targets), list(test_set.targets))
        task, _ = build_task(rs.cfg, rs.device, 10, steps_per_epoch=8)
        weights[spec.name] = task.model.state_dict()
        assert type(task.optimizer).__name__.lower() == spec.optimizer
    for seed in (0, 1):
        same = [n for n in weights if f"-seed{seed}-" in n]
        assert len(same) == 5
        for name in same[1:]:
            assert labels[name] == labels[same[0]]
            assert all(torch.equal(weights[name][k], weights[same[0]][k]) for k in weights[name])
    a, b = "cifar10-sgd-seed0-sym0.2", "cifar10-sgd-seed1-sym0.2"
    assert labels[a][0] != labels[b][0] and labels[a][1] == labels[b][1]  # test set clean
    assert not torch.equal(weights[a]["conv1.weight"], weights[b]["conv1.weight"])


def test_task_is_resnet18_with_warmup_then_cosine_per_step(tmp_path):
    cfg = make(EPOCHS=4, WARMUP_EPOCHS=1, OPTIMIZER="adamw", SEED=0)
    task, model_config = build_task(cfg, torch.device("cpu"), 100, steps_per_epoch=5)
    assert model_config["num_classes"] == 100 and count_parameters(task.model) == 11_220_132
    assert task.scheduler_interval == "step" and task.monitor == "test_accuracy"
    lrs = []
    for _ in range(20):
        lrs.append(task.optimizer.param_groups[0]["lr"])
        task.optimizer.step()
        task.scheduler.step()
    assert lrs[:5] == pytest.approx([2e-4, 4e-4, 6e-4, 8e-4, 1e-3])  # warm-up, 1 epoch
    assert all(x > y for x, y in zip(lrs[5:], lrs[6:], strict=False))  # then cosine down
    # the last of 20 steps: cosine at 14/15 of its 15 steps
    assert lrs[-1] == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi * 14 / 15)))


def test_study_eta_adds_up_the_runs_left_and_warns_past_the_session():
    assert study_eta([600.0, 1200.0], 4, 12.0) == "study: 4 run(s) left, about 1.0 h"
    assert study_eta([60.0], 3, None) == "study: 3 run(s) left, about 3.0 min"
    line = study_eta([3 * 3600.0], 5, 12.0)
    assert line.startswith("study: 5 run(s) left, about 15.0 h. WARNING: more than this "
                           "platform's 12 h session")
    assert "finished runs are skipped" in line


def test_smoke_trains_two_runs_of_the_default_grid_and_any_grid_set_by_hand():
    assert (make(SMOKE=True).grid_optimizers(), make(SMOKE=True).grid_seeds()) == (
        ["sgd", "adam"], [0])
    assert len(plan(make(SMOKE=True))) == 2 and len(plan(make())) == 15
    hand = make(SMOKE=True, OPTIMIZERS=["sgd", "lion", "adamw"], SEEDS=[0, 1])
    assert len(plan(hand)) == 6
    assert plan(make(SMOKE=True, OPTIMIZER="lion", SEED=2))[0].name == "cifar10-lion-seed2-sym0.2"


def test_smoke_takes_small_batches_unless_batch_size_is_set():
    assert make(SMOKE=True).resolved_batch_size() == 16
    assert make(SMOKE=True, BATCH_SIZE=64).resolved_batch_size() == 64
    assert make().resolved_batch_size() == 128  # colab_t4: the whole global batch
