"""The parameter contract: types, values and messages a user sees for a bad parameter."""

import pytest

from lib.training.config import ConfigError
from lib.workloads.fashion_mnist import FashionConfig

GOOD = dict(PLATFORM="colab_t4", DEVICE="auto", DATA_DIR=None, OUT_DIR=None,
            SAMPLE_DATA=False, SMOKE=False, EPOCHS=3, BATCH_SIZE=None, LR=1.0, SEED=1)


def make(**changes):
    return FashionConfig.from_params({**GOOD, **changes})


def test_parameters_become_a_typed_config():
    cfg = make(BATCH_SIZE=64, LR=2)  # an int where a float is expected is fine
    assert (cfg.epochs, cfg.batch_size, cfg.lr, cfg.gamma) == (3, 64, 2, 0.7)
    assert cfg.resolved_batch_size() == 64
    assert make().resolved_batch_size() == 256  # the colab_t4 default for this workload
    text = str(cfg)
    assert "EPOCHS" in text and "colab_t4" in text


def test_unrelated_notebook_globals_are_ignored():
    cfg = FashionConfig.from_params({**GOOD, "In": [], "torch": object(), "np": 1})
    assert cfg.platform == "colab_t4"


@pytest.mark.parametrize("changes,pattern", [
    (dict(EPOCHS="ten"),
     r"EPOCHS='ten' has type str; expected int; set EPOCHS = 14 in the parameters cell"),
    (dict(EPOCHS=2.5), r"EPOCHS=2.5 has type float; expected int"),
    (dict(SMOKE="yes"), r"SMOKE='yes' has type str; expected bool"),
    (dict(BATCH_SIZE="64"), r"BATCH_SIZE='64'.*expected int or None"),
    (dict(EPOCHS=0), r"EPOCHS=0 must be > 0"),
    (dict(EPOCHS=-3), r"EPOCHS=-3 must be > 0"),
    (dict(BATCH_SIZE=0), r"BATCH_SIZE=0 must be > 0"),
    (dict(LR=-0.1), r"LR=-0.1 must be > 0"),
    (dict(SEED=-1), r"SEED=-1 is negative"),
    (dict(PLATFORM="colab_a100"), r"unknown PLATFORM 'colab_a100'; expected one of \['colab_t4'"),
    (dict(GAMMA=1.5), r"GAMMA=1.5 must be in \(0, 1\]"),
])
def test_bad_parameters_fail_with_one_clear_message(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        make(**changes)


def test_a_missing_required_parameter_is_named():
    params = dict(GOOD)
    del params["PLATFORM"]
    with pytest.raises(ConfigError, match="parameter PLATFORM is missing"):
        FashionConfig.from_params(params)


def test_default_paths_follow_the_runtime(monkeypatch, tmp_path):
    data, out = make().paths("local")
    assert (str(data), str(out)) == ("data", "runs/fashion_mnist")
    data, out = make().paths("kaggle")
    assert str(out) == "/kaggle/working/runs/fashion_mnist"  # the version's output
    assert str(data) == "/kaggle/temp/train-anywhere/data"  # not counted against its 20 GB
    monkeypatch.setenv("TA_COLAB_DRIVE", str(tmp_path / "drive"))
    monkeypatch.setenv("TA_COLAB_CONTENT", str(tmp_path / "content"))
    data, out = make().paths("colab")  # Drive not mounted: all on the VM's disk
    assert out == tmp_path / "content/train-anywhere/runs/fashion_mnist"
    (tmp_path / "drive" / "MyDrive").mkdir(parents=True)  # mounted
    data, out = make().paths("colab")
    assert out == tmp_path / "drive/MyDrive/train-anywhere/runs/fashion_mnist"  # durable
    assert data == tmp_path / "content/train-anywhere/data"  # the VM's disk, not the FUSE mount
    assert make(OUT_DIR=str(tmp_path / "x")).paths("colab")[1] == tmp_path / "x"


@pytest.mark.parametrize("front_end,fix", [
    ("cli", "set it with -p EPOCHS 14."),
    ("papermill", "set it with papermill's -p EPOCHS 14."),
    ("notebook", "set EPOCHS = 14 in the parameters cell."),
])
def test_the_fix_is_phrased_for_the_front_end_in_use(front_end, fix, monkeypatch):
    """The terminal types `-p EPOCHS 14`, a notebook edits its parameters cell."""
    from lib.base.errors import FRONT_END_ENV

    monkeypatch.setenv(FRONT_END_ENV, front_end)
    with pytest.raises(ConfigError) as err:
        make(EPOCHS=-1)
    assert str(err.value) == f"EPOCHS=-1 must be > 0; {fix}"
