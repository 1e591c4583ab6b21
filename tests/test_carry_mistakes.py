"""`train-anywhere carry`'s one-line answers to a wrong folder or name, before anything moves
(the journeys that move runs: tests/test_carry.py, tests/test_carry_journey.py)."""

from __future__ import annotations

import json

import pytest

from lib.cli import carry
from lib.cli.params import UsageError
from lib.runs import identity as experiment
from tests.test_carry import recorded_run


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def test_a_path_that_is_not_a_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UsageError) as err:
        carry.check(tmp_path / "notes.txt")
    assert "is not a folder; pass the run folder" in one_line(err)


def test_a_folder_with_no_run_in_it(tmp_path):
    with pytest.raises(UsageError) as err:
        carry.check(tmp_path)
    assert "is not a run folder: no config.json" in one_line(err)


def test_a_config_this_project_did_not_write(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / experiment.CONFIG).write_text(json.dumps({"workload": "x"}))
    with pytest.raises(UsageError) as err:
        carry.check(run)
    assert "records no experiment" in one_line(err)


def test_a_run_without_a_complete_checkpoint(tmp_path):
    run = recorded_run(tmp_path / "run", 256)
    with pytest.raises(UsageError) as err:
        carry.check(run)
    assert "holds no complete checkpoint" in one_line(err)


def test_runs_of_two_workloads_in_one_folder(tmp_path):
    (recorded_run(tmp_path / "grid" / "a", 256) / "DONE.json").write_text("{}")  # finished
    other = recorded_run(tmp_path / "grid" / "b", 256)
    config = json.loads((other / experiment.CONFIG).read_text())
    config["experiment"]["workload"] = "mshnet"
    (other / experiment.CONFIG).write_text(json.dumps(config))
    with pytest.raises(UsageError) as err:
        carry.check(tmp_path / "grid")
    assert "holds runs of fashion_mnist and mshnet; carry one run folder at a time" \
        in one_line(err)


@pytest.mark.parametrize("kernel", ["fashion", "me/", "me/a/b"])
def test_from_kaggle_names_the_kernel_shape(kernel, tmp_path):
    with pytest.raises(UsageError) as err:
        carry.from_kaggle(kernel, tmp_path / "dest", api=object())
    assert f"{kernel!r} is not owner/kernel-slug" in one_line(err)


def test_an_output_with_several_runs_or_none(tmp_path):
    with pytest.raises(UsageError) as err:
        carry._locate(tmp_path)
    assert "the output holds no run folder" in one_line(err)
    for name in ("one", "two"):  # two runs that trained (an epoch record each)
        recorded_run(tmp_path / "out" / name, 256)
    assert len(experiment.run_folders(tmp_path / "out")) == 2
    with pytest.raises(UsageError) as err:
        carry._locate(tmp_path / "out")
    assert "the output holds several runs: one, two" in one_line(err)
