"""A run the user can trust, through papermill as a user runs it: a changed experiment, a
misspelt parameter, RESUME, corrupt checkpoints, and errors that read as one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import papermill
import pytest

from lib.base import durable
from lib.runs.records import read_jsonl
from tests.notebook_run import execute, stream_text
from tests.unchanged import assert_same, assert_unchanged, snapshot

pytestmark = pytest.mark.notebook
SMALL = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished two-epoch fashion_mnist run on the sample; tests work on copies."""
    tmp = tmp_path_factory.mktemp("trained")
    execute("fashion_mnist", "local", tmp, DATA_DIR=str(tmp / "data"),
            OUT_DIR=str(tmp / "run"), **SMALL)
    return tmp


def _copy(trained: Path, tmp_path: Path) -> tuple[Path, dict]:
    shutil.copytree(trained / "run", tmp_path / "run")
    return tmp_path / "run", dict(SMALL, DATA_DIR=str(trained / "data"),
                                  OUT_DIR=str(tmp_path / "run"))


def _fails(tmp_path: Path, env: dict | None = None,
           **params) -> papermill.PapermillExecutionError:
    with pytest.raises(papermill.PapermillExecutionError) as err:
        execute("fashion_mnist", "local", tmp_path / "nb", env=env, **params)
    return err.value


def _error_outputs(path: Path) -> list[dict]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


def test_a_changed_lr_stops_before_training_and_touches_nothing(trained, tmp_path):
    run, params = _copy(trained, tmp_path)
    before = snapshot(run)
    err = _fails(tmp_path, **dict(params, LR=0.1, BATCH_SIZE=16, EPOCHS=5))
    assert err.ename == "ExperimentChanged"
    assert "LR 1.0 -> 0.1" in err.evalue and "(global batch) 32 -> 16" in err.evalue
    assert_unchanged(before, run)  # config.json, checkpoints, metrics.jsonl, tb/: byte-identical
    # In the notebook the error is one line, not a traceback through lib.
    (error,) = _error_outputs(tmp_path / "nb" / "local-fashion_mnist.ipynb")
    assert error["traceback"] == [f"ExperimentChanged: {err.evalue}"]


def test_more_epochs_resume_the_same_experiment(trained, tmp_path):
    run, params = _copy(trained, tmp_path)
    nb = execute("fashion_mnist", "local", tmp_path / "nb", **dict(params, EPOCHS=3))
    assert "resumed from " + str(run / "checkpoints" / "ckpt-e0002-b000000.pt") in \
        stream_text(nb)
    assert [r["epoch"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]
    assert [s["epochs"] for s in read_jsonl(run / "sessions.jsonl")] == [2, 3]


def test_a_misspelt_parameter_trains_nothing(tmp_path):
    err = _fails(tmp_path, **dict(SMALL, OUT_DIR=str(tmp_path / "run"), EPOCH=1))
    assert err.ename == "ConfigError"
    assert "unknown parameter EPOCH for fashion_mnist: did you mean EPOCHS?" in err.evalue
    assert not (tmp_path / "run").exists()
    (error,) = _error_outputs(tmp_path / "nb" / "local-fashion_mnist.ipynb")
    assert error["traceback"] == [f"ConfigError: {err.evalue}"]  # no lib traceback


def test_a_bug_keeps_its_traceback_and_the_switch_shows_a_user_errors_whole(tmp_path):
    """TA_TRACEBACK=1: the user error's whole traceback, for a bug report."""
    err = _fails(tmp_path, env={"TA_TRACEBACK": "1"},
                 **dict(SMALL, OUT_DIR=str(tmp_path / "run"), EPOCHS=-1))
    (error,) = _error_outputs(tmp_path / "nb" / "local-fashion_mnist.ipynb")
    text = "".join(error["traceback"])
    assert err.ename == "ConfigError" and "EPOCHS=-1 must be > 0" in text
    assert "Traceback (most recent call last)" in text and "lib/training/config.py" in text


def test_resume_new_starts_afresh_in_a_sub_folder_and_keeps_the_old_run(trained, tmp_path):
    run, params = _copy(trained, tmp_path)
    before = snapshot(run)
    nb = execute("fashion_mnist", "local", tmp_path / "nb",
                 **dict(params, LR=0.5, RESUME="new"))
    assert f"this one starts afresh in {run / 'fresh-1'}" in stream_text(nb)
    assert_same(before, {k: v for k, v in snapshot(run).items()
                         if k != "fresh-1" and not k.startswith("fresh-1/")}, run)
    assert [r["epoch"] for r in read_jsonl(run / "fresh-1" / "metrics.jsonl")] == [1, 2]


def test_a_corrupt_best_checkpoint_falls_back_and_says_so(trained, tmp_path):
    run, params = _copy(trained, tmp_path)
    (run / "checkpoints" / "best.pt").write_bytes(b"not a checkpoint")
    text = stream_text(execute("fashion_mnist", "local", tmp_path / "nb", **params))
    assert (f"{run / 'checkpoints' / 'best.pt'} cannot be used (not a complete copy: 16 bytes "
            "that differ from its completion marker's") in text  # lib/base/durable.py's marker
    assert f"using the newest loadable checkpoint instead, {run / 'checkpoints'}" in text
    assert "weights_only" not in text


def test_when_every_checkpoint_is_corrupt_training_restarts_and_says_so(trained, tmp_path):
    run, params = _copy(trained, tmp_path)
    old_metrics = (run / "metrics.jsonl").read_bytes()
    for ckpt in (run / "checkpoints").glob("*.pt"):
        ckpt.write_bytes(ckpt.read_bytes()[:500])  # cut, as after a lost sync
        durable.marker_path(ckpt).unlink()  # a run from before completion markers: read as is
    text = stream_text(execute("fashion_mnist", "local", tmp_path / "nb", **params))
    assert f"no loadable checkpoint in {run / 'checkpoints'} (2 unusable): starting from " \
           "epoch 1" in text
    assert "PytorchStreamReader failed reading zip archive: failed finding central " \
           "directory" in text  # the reason, whole
    assert (run / "metrics-before-restart-1.jsonl").read_bytes() == old_metrics
