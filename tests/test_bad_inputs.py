"""The bad-input catalogue: every mistake a notebook user can make gets one clear message
naming the value, what was expected and the fix, and no file in OUT_DIR (which already holds a
good checkpoint) is touched: every file's bytes compared (tests/unchanged.py).

Each case runs the notebook source itself (in this process, parameters overridden the way
papermill does) against an OUT_DIR that already holds a good checkpoint.
"""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pytest
import torch

from lib.base.errors import UserError
from lib.runs.checkpoints import Checkpoints
from tests.fault_harness import notebook_script
from tests.unchanged import assert_unchanged, snapshot

ROOT = Path(__file__).resolve().parent.parent


def fashion_checkpoint(out: Path) -> None:
    from dataclasses import asdict

    from lib.models.cnn import CNN, CNNConfig

    model = CNN(CNNConfig())
    Checkpoints(out / "checkpoints", "fashion_mnist", asdict(CNNConfig())).save(
        {"model": model.state_dict()}, 1, 0)


def _half_downloaded(data: Path) -> None:
    raw = data / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03")  # the rest never came


def _other_dataset(data: Path) -> None:
    (data / "cifar-10-batches-py").mkdir(parents=True)
    (data / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"x")


def _data_file(data: Path) -> None:
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("not a folder")


def _irstd(data: Path, break_it=None) -> None:
    """A small IRSTD-1k folder in DATA_DIR (official layout; train sample0000-0003, test
    sample0004-0005, 64 px), then `break_it(folder)`."""
    from lib.data.irstd_sample import write_irstd_sample

    root = write_irstd_sample(data / "IRSTD-1k", n_train=4, n_test=2, size=64)
    if break_it is not None:
        break_it(root)


def _small_mask(root: Path) -> None:
    from PIL import Image

    Image.new("L", (32, 64)).save(root / "masks" / "sample0001.png")


def _nmnist_recordings(data: Path, n: int = 1) -> None:
    """DATA_DIR/NMNIST/ with `n` recordings and a cut train.zip: a download that stopped."""
    folder = data / "NMNIST" / "Train" / "0"
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"{i:05d}.bin").write_bytes(bytes(5))
    (data / "NMNIST" / "train.zip").write_bytes(b"PK\x03\x04")


# (id, workload, parameter overrides, setup(data_dir), message parts that must all appear)
CASES = [
    ("platform", "fashion_mnist", dict(PLATFORM="colab_v100"), None,
     ["'colab_v100'", "expected one of", "colab_t4"]),
    ("device", "fashion_mnist", dict(DEVICE="gpu"), None,
     ["'gpu'", "expected one of", 'DEVICE = "auto"']),
    ("device-absent", "fashion_mnist", dict(DEVICE="cuda"), None,
     ['DEVICE="cuda"', "no cuda device", 'DEVICE = "auto"']),
    ("epochs-zero", "fashion_mnist", dict(EPOCHS=0), None, ["EPOCHS=0", "must be > 0"]),
    ("epochs-negative", "fashion_mnist", dict(EPOCHS=-5), None, ["EPOCHS=-5", "must be > 0"]),
    ("epochs-text", "fashion_mnist", dict(EPOCHS="ten"), None,
     ["EPOCHS='ten'", "expected int", "set EPOCHS = 14 in the parameters cell"]),
    ("batch-zero", "fashion_mnist", dict(BATCH_SIZE=0), None, ["BATCH_SIZE=0", "must be > 0"]),
    ("batch-negative", "fashion_mnist", dict(BATCH_SIZE=-32), None, ["BATCH_SIZE=-32", "> 0"]),
    ("batch-too-big", "fashion_mnist", dict(BATCH_SIZE=100000, SMOKE=False), None,
     ["fewer than one batch of 100000", "BATCH_SIZE to at most"]),
    ("micro-batch-text", "fashion_mnist", dict(MICRO_BATCH="half"), None,
     ["MICRO_BATCH='half' is not a choice", 'expected "auto"', 'MICRO_BATCH = "auto"']),
    ("micro-batch-zero", "fashion_mnist", dict(MICRO_BATCH=0), None,
     ["MICRO_BATCH=0", "must be > 0", 'MICRO_BATCH = "auto"']),
    ("micro-batch-uneven", "fashion_mnist", dict(MICRO_BATCH=5), None,
     ["MICRO_BATCH=5 does not divide the 32 samples each device takes per step",
      "expected one of [1, 2, 4, 8, 16, 32]", 'MICRO_BATCH = "auto"']),
    ("lr-zero", "fashion_mnist", dict(LR=0.0), None, ["LR=0.0", "must be > 0"]),
    ("lr-negative", "fashion_mnist", dict(LR=-1e-3), None, ["LR=-0.001", "must be > 0"]),
    ("lr-text", "fashion_mnist", dict(LR="1e-3"), None, ["LR='1e-3'", "expected float"]),
    ("seed-negative", "fashion_mnist", dict(SEED=-1), None, ["SEED=-1", "negative"]),
    ("smoke-text", "fashion_mnist", dict(SMOKE="True"), None, ["SMOKE='True'", "expected bool"]),
    ("gamma", "fashion_mnist", dict(GAMMA=2.0), None, ["GAMMA=2.0", "(0, 1]"]),
    ("data-dir-empty", "fashion_mnist", dict(SAMPLE_DATA=False), lambda d: d.mkdir(),
     ["not in DATA_DIR", "FashionMNIST/raw", "SAMPLE_DATA = True"]),
    ("data-dir-is-file", "fashion_mnist", dict(SAMPLE_DATA=False), _data_file,
     ["is a file", "set DATA_DIR to a folder"]),
    ("data-dir-other-dataset", "fashion_mnist", dict(SAMPLE_DATA=False), _other_dataset,
     ["not in DATA_DIR", "train-images-idx3-ubyte", "point DATA_DIR"]),
    ("half-downloaded", "fashion_mnist", dict(SAMPLE_DATA=False), _half_downloaded,
     ["not in DATA_DIR", "copy the four files there"]),
    ("mshnet-missing-folder", "mshnet", dict(SAMPLE_DATA=False), None,
     ["IRSTD DATA_DIR", "is not a folder", "/kaggle/input", "SAMPLE_DATA = True"]),
    ("mshnet-missing-masks", "mshnet", dict(SAMPLE_DATA=False),
     lambda d: _irstd(d, lambda r: shutil.rmtree(r / "masks")),
     ["has images/ but no mask folder", "masks/, IRSTD1k_Label/", "copy the masks there"]),
    ("mshnet-name-without-image", "mshnet", dict(SAMPLE_DATA=False),
     lambda d: _irstd(d, lambda r: (r / "images" / "sample0005.png").unlink()),
     ["1 name(s) in", "test.txt", "no image in", "['sample0005']", "remove the names"]),
    ("mshnet-name-without-mask", "mshnet", dict(SAMPLE_DATA=False),
     lambda d: _irstd(d, lambda r: (r / "masks" / "sample0002.png").unlink()),
     ["trainval.txt", "no mask in", "['sample0002']", "add the files"]),
    ("mshnet-size-mismatch", "mshnet", dict(SAMPLE_DATA=False), lambda d: _irstd(d, _small_mask),
     ["sample0001.png' is 64x64 but its mask", "is 32x64", "replace the mask"]),
    ("mshnet-empty-split", "mshnet", dict(SAMPLE_DATA=False),
     lambda d: _irstd(d, lambda r: (r / "test.txt").write_text("\n\n")),
     ["test.txt", "lists no images", "one name per line"]),
    ("mshnet-other-dataset", "mshnet", dict(SAMPLE_DATA=False, DATASET="NUDT-SIRST"), _irstd,
     ["DATASET='NUDT-SIRST'", "is IRSTD-1k", "set DATASET = 'IRSTD-1k'"]),
    ("mshnet-dataset", "mshnet", dict(DATASET="SIRST"), None,
     ["unknown DATASET 'SIRST'", "['IRSTD-1k', 'NUDT-SIRST']"]),
    ("mshnet-base-size", "mshnet", dict(BASE_SIZE=100), None,
     ["BASE_SIZE=100", "multiple of 16", "BASE_SIZE = 256"]),
    ("mamba-dataset", "mamba_spike", dict(DATASET="n-mnist"), None,
     ["unknown DATASET 'n-mnist'", "['cifar10dvs', 'dvsgesture', 'nmnist']"]),
    ("mamba-bins-and-dt", "mamba_spike", dict(N_TIME_BINS=300, DT_US=1000), None,
     ["N_TIME_BINS=300 and DT_US=1000 are both set", "set DT_US = None", "N_TIME_BINS = None"]),
    ("mamba-fixed-t-without-dt", "mamba_spike", dict(FIXED_T=100), None,
     ["FIXED_T=100 is set but DT_US is None", "Set FIXED_T = None, or set DT_US"]),
    ("mamba-bins-zero", "mamba_spike", dict(N_TIME_BINS=0), None,
     ["N_TIME_BINS=0", "positive integer or None", "official 300"]),
    ("mamba-other-dataset", "mamba_spike", dict(SAMPLE_DATA=False, DATASET="dvsgesture"),
     lambda d: _nmnist_recordings(d, 3),
     ["dvsgesture is not in DATA_DIR", "DVSGesture/", "holds NMNIST/ instead",
      "set DATASET = 'nmnist'", "downloading it failed", "SAMPLE_DATA = True"]),
    ("mamba-half-downloaded", "mamba_spike", dict(SAMPLE_DATA=False), _nmnist_recordings,
     ["nmnist is not in DATA_DIR", "NMNIST/ there holds only 1 recordings",
      "delete the folder to download again", "point DATA_DIR"]),
    ("study-optimizer", "optimizer_study", dict(OPTIMIZERS=["sgd", "adagrad"]), None,
     ["OPTIMIZERS: unknown optimizer 'adagrad'", "valid choices are sgd, adam, adamw, lion"]),
    ("study-one-optimizer", "optimizer_study", dict(OPTIMIZER="nadam"), None,
     ["OPTIMIZER: unknown optimizer 'nadam'", "Fix the OPTIMIZERS parameter"]),
    ("study-label-noise-above-1", "optimizer_study", dict(LABEL_NOISE=1.2), None,
     ["LABEL_NOISE=1.2", "outside [0, 1]", "LABEL_NOISE = 0.2"]),
    ("study-label-noise-negative", "optimizer_study", dict(LABEL_NOISE=-0.1), None,
     ["LABEL_NOISE=-0.1", "outside [0, 1]"]),
    ("study-noise-mode", "optimizer_study", dict(NOISE_MODE="pairs"), None,
     ["unknown NOISE_MODE 'pairs'", "['asymmetric', 'symmetric']"]),
    ("study-dataset", "optimizer_study", dict(DATASET="svhn"), None,
     ["DATASET='svhn'", "set DATASET to 'cifar10' or 'cifar100'"]),
    ("study-seeds-text", "optimizer_study", dict(SEEDS="0,1"), None,
     ["SEEDS='0,1'", "expected a list of int", "set SEEDS = [0, 1, 2] in the parameters cell"]),
    ("study-data-dir-empty", "optimizer_study", dict(SAMPLE_DATA=False), lambda d: d.mkdir(),
     ["cifar10 is not in DATA_DIR", "cifar-10-batches-py/", "downloading it failed",
      "SAMPLE_DATA = True"]),
    ("study-half-downloaded", "optimizer_study", dict(SAMPLE_DATA=False), _other_dataset,
     ["cifar10 is not in DATA_DIR", "checksums verified", "extract the official"]),
    ("study-other-dataset", "optimizer_study", dict(SAMPLE_DATA=False, DATASET="cifar100"),
     _other_dataset, ["cifar100 is not in DATA_DIR", "cifar-100-python/", "point DATA_DIR"]),
    ("study-data-dir-is-file", "optimizer_study", dict(SAMPLE_DATA=False), _data_file,
     ["is a file", "set DATA_DIR to a folder"]),
    # Names a workload does not know: a typo would otherwise train the defaults.
    ("unknown-name", "fashion_mnist", dict(EPOCH=1), None,
     ["unknown parameter EPOCH", "did you mean EPOCHS?", "GAMMA",
      "Fix the name in the parameters cell"]),
    ("mshnet-unknown-name", "mshnet", dict(WARMUP_EPOCHS=6), None,
     ["unknown parameter WARMUP_EPOCHS for mshnet", "did you mean WARM_EPOCHS?"]),
    ("mamba-unknown-name", "mamba_spike", dict(NTIME_BINS=100), None,
     ["unknown parameter NTIME_BINS for mamba_spike", "did you mean N_TIME_BINS?"]),
    ("study-unknown-name", "optimizer_study", dict(OPTIMISERS=["sgd"]), None,
     ["unknown parameter OPTIMISERS", "did you mean OPTIMIZERS?"]),
    ("unknown-name-far", "fashion_mnist", dict(MOMENTUM=0.9), None,
     ["unknown parameter MOMENTUM", "Its parameters are PLATFORM, EPOCHS"]),
    ("resume-value", "fashion_mnist", dict(RESUME="yes"), None,
     ["unknown RESUME 'yes'", "['auto', 'new', 'require']"]),
    ("device-number", "fashion_mnist", dict(DEVICE=0), None, ["DEVICE=0", "expected str"]),
    ("device-upper", "fashion_mnist", dict(DEVICE="CUDA"), None,
     ["unknown DEVICE 'CUDA'", 'DEVICE = "auto"']),
    ("checkpoint-minutes-zero", "fashion_mnist", dict(CHECKPOINT_MINUTES=0), None,
     ["CHECKPOINT_MINUTES=0", "must be > 0"]),
    ("checkpoint-minutes-negative", "mshnet", dict(CHECKPOINT_MINUTES=-1.0), None,
     ["CHECKPOINT_MINUTES=-1.0", "must be > 0"]),
    ("smoke-batches-zero", "fashion_mnist", dict(SMOKE_BATCHES=0), None,
     ["SMOKE_BATCHES=0", "must be > 0"]),
    ("sample-data-text", "mshnet", dict(SAMPLE_DATA="yes"), None,
     ["SAMPLE_DATA='yes'", "expected bool"]),
    ("out-dir-number", "fashion_mnist", dict(OUT_DIR=3), None, ["OUT_DIR=3", "expected str"]),
    ("data-dir-list", "mamba_spike", dict(DATA_DIR=["data"]), None,
     ["DATA_DIR=['data']", "expected str or None"]),
    ("mshnet-crop-size", "mshnet", dict(CROP_SIZE=8), None, ["CROP_SIZE=8", "multiple of 16"]),
    ("mshnet-warm-negative", "mshnet", dict(WARM_EPOCHS=-1), None,
     ["WARM_EPOCHS=-1", "must be >= 0"]),
    ("mshnet-lr-zero", "mshnet", dict(LR=0.0), None, ["LR=0.0", "must be > 0"]),
    ("mamba-downsample-zero", "mamba_spike", dict(DOWNSAMPLE=0), None,
     ["DOWNSAMPLE=0", "positive integer or None"]),
    ("mamba-dt-negative", "mamba_spike", dict(N_TIME_BINS=None, DT_US=-5), None,
     ["DT_US=-5", "positive integer or None"]),
    ("mamba-denoise-negative", "mamba_spike", dict(DENOISE_US=-1), None,
     ["DENOISE_US=-1", "must be >= 0"]),
    ("study-weight-decay", "optimizer_study", dict(WEIGHT_DECAY=-1e-4), None,
     ["WEIGHT_DECAY=-0.0001", "must be >= 0"]),
    ("study-warmup-negative", "optimizer_study", dict(WARMUP_EPOCHS=-1), None,
     ["WARMUP_EPOCHS=-1", "must be >= 0"]),
    ("study-seeds-negative", "optimizer_study", dict(SEEDS=[0, -1]), None,
     ["SEEDS=[0, -1]", "negative seeds [-1]"]),
    ("study-seeds-empty", "optimizer_study", dict(SEEDS=[]), None,
     ["SEEDS=[]", "must not be empty"]),
    ("study-optimizers-empty", "optimizer_study", dict(OPTIMIZERS=[]), None,
     ["OPTIMIZERS=[]", "must not be empty"]),
]


def run_notebook(workload: str, params: dict, tmp_path: Path):
    script = notebook_script(workload, params, tmp_path / f"{workload}.py")
    runpy.run_path(str(script), run_name="__notebook__")


@pytest.fixture(autouse=True)
def _offline_downloads(monkeypatch):
    """Downloads fail at once here, like a runtime without internet."""
    from torchvision import datasets

    monkeypatch.setattr(datasets.FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])
    for cls in (datasets.CIFAR10, datasets.CIFAR100):
        monkeypatch.setattr(cls, "url", "http://127.0.0.1:9/" + cls.filename)
    import tonic

    for cls, attrs in ((tonic.datasets.NMNIST, ("train_url", "test_url")),
                       (tonic.datasets.DVSGesture, ("train_url", "test_url")),
                       (tonic.datasets.CIFAR10DVS, ("url",))):
        for attr in attrs:
            monkeypatch.setattr(cls, attr, "http://127.0.0.1:9/")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_clear_message_and_checkpoints_are_untouched(case, tmp_path):
    _, workload, overrides, setup, parts = case
    data, out = tmp_path / "data", tmp_path / "out"
    fashion_checkpoint(out)
    before = snapshot(out)
    if setup is not None:
        setup(data)
    params = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=1, DATA_DIR=str(data), OUT_DIR=str(out),
                  DEVICE="auto")
    params.update(overrides)
    with pytest.raises(Exception) as err:
        run_notebook(workload, params, tmp_path)
    message = str(err.value)
    assert isinstance(err.value, UserError), repr(err.value)
    assert err.value._render_traceback_() == [f"{type(err.value).__name__}: {message}"]
    assert "\n" not in message, message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    assert_unchanged(before, out)


def test_unwritable_out_dir(tmp_path, monkeypatch):
    from lib.runs import folder as run_mod

    def read_only(self, *a, **k):
        raise PermissionError(13, "Permission denied")

    params = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=1, DATA_DIR=str(tmp_path / "d"),
                  OUT_DIR=str(tmp_path / "ro"))
    script = notebook_script("fashion_mnist", params, tmp_path / "nb.py")
    monkeypatch.setattr(run_mod.Path, "write_text", read_only)
    with pytest.raises(ValueError, match=r"OUT_DIR '.*ro' is not writable \(Permission denied\)"):
        runpy.run_path(str(script), run_name="__notebook__")


def test_resuming_with_another_model_config_stops_before_touching_anything(tmp_path):
    out = tmp_path / "out"
    Checkpoints(out / "checkpoints", "fashion_mnist", {"width": 64}).save(
        {"model": {"w": torch.ones(1)}}, 1, 0)
    before = snapshot(out)
    params = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=2, DATA_DIR=str(tmp_path / "d"),
                  OUT_DIR=str(out))
    with pytest.raises(ValueError, match=r"model config \{'width': 64\}.*Set OUT_DIR to a new"):
        run_notebook("fashion_mnist", params, tmp_path)
    assert_unchanged(before, out)
    shutil.rmtree(out)


# A changed experiment in an old OUT_DIR: (id, workload, the first session's overrides, the
# second session's, message parts). The first session records its experiment and leaves a
# checkpoint; the second must be refused with every changed value, touching nothing.
SMALL = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=1)
CHANGED = [
    ("changed-lr", "fashion_mnist", {}, dict(LR=0.1), ["LR 1.0 -> 0.1", 'RESUME = "new"']),
    ("changed-seed", "fashion_mnist", dict(SEED=1), dict(SEED=2), ["SEED 1 -> 2", "new folder"]),
    ("changed-batch", "fashion_mnist", dict(BATCH_SIZE=16), dict(BATCH_SIZE=8),
     ["BATCH_SIZE x devices (global batch) 16 -> 8"]),
    ("changed-sample", "fashion_mnist", {}, dict(SAMPLE_DATA=False, SMOKE=False),
     ["SAMPLE_DATA True -> False", "SMOKE True -> False"]),
    ("changed-gamma-two", "fashion_mnist", {}, dict(GAMMA=0.5, LR=0.5),
     ["LR 1.0 -> 0.5", "GAMMA 0.7 -> 0.5"]),
    ("mshnet-changed-warm", "mshnet", {}, dict(WARM_EPOCHS=2), ["WARM_EPOCHS 5 -> 2"]),
    ("mshnet-changed-size", "mshnet", {}, dict(BASE_SIZE=32), ["BASE_SIZE None -> 32"]),
    ("mamba-changed-width", "mamba_spike", {}, dict(D_MODEL=32), ["D_MODEL None -> 32"]),
    ("mamba-changed-epochs", "mamba_spike", {}, dict(EPOCHS=3),
     ["EPOCHS 1 -> 3"]),  # the cosine schedule spans EPOCHS: more epochs, another run
    ("study-changed-warmup", "optimizer_study", dict(OPTIMIZERS=["sgd"], SEEDS=[0]),
     dict(OPTIMIZERS=["sgd"], SEEDS=[0], WARMUP_EPOCHS=1),
     ["cifar10-sgd-seed0-sym0.2", "WARMUP_EPOCHS 5 -> 1"]),
]


def _first_session(workload: str, params: dict) -> None:
    """What a first session leaves in OUT_DIR: its recorded experiment and a checkpoint."""
    import importlib

    from lib import session

    module = importlib.import_module(f"lib.workloads.{workload}")
    cls = next(v for v in vars(module).values()
               if isinstance(v, type) and getattr(v, "WORKLOAD", None) == workload)
    cfg = cls.from_params(dict(PLATFORM="local", DEVICE="cpu", **params))
    s = session.start(cfg, announce=False)
    runs = [s.out_dir / rel for rel, _ in cfg.experiments(s.global_batch)] if cfg.GRID else [
        s.out_dir]
    for run_dir in runs:
        if cfg.GRID:
            cell = cfg.cell(cfg.optimizers[0], cfg.seeds[0], out_dir=str(run_dir))
            session.start(cell, announce=False, grid=False)
        Checkpoints(run_dir / "checkpoints", workload, {}).save({"model": {}}, 1, 0)


@pytest.mark.parametrize("case", CHANGED, ids=[c[0] for c in CHANGED])
def test_a_changed_experiment_is_refused_and_out_dir_is_byte_identical(case, tmp_path):
    _, workload, first, second, parts = case
    base = dict(SMALL, DATA_DIR=str(tmp_path / "data"), OUT_DIR=str(tmp_path / "out"))
    _first_session(workload, dict(base, **first))
    before = snapshot(tmp_path / "out")
    with pytest.raises(UserError) as err:
        run_notebook(workload, dict(base, DEVICE="cpu", **second), tmp_path)
    message = str(err.value)
    assert type(err.value).__name__ == "ExperimentChanged" and "\n" not in message
    for part in parts + ["holds a", "Nothing in it was changed", "restore those values"]:
        assert part in message, f"{part!r} not in {message!r}"
    assert_unchanged(before, tmp_path / "out")


def test_resume_require_with_nothing_to_resume_is_refused(tmp_path):
    params = dict(SMALL, DATA_DIR=str(tmp_path / "d"), OUT_DIR=str(tmp_path / "out"),
                  RESUME="require")
    with pytest.raises(UserError, match=r'RESUME = "require" but .*out\' holds no run to '
                                        r'resume.*RESUME = "auto"'):
        run_notebook("fashion_mnist", params, tmp_path)
    assert not (tmp_path / "out").exists()
