"""`train-anywhere sweep`: the grid's cells, resume after a kill, local and submitit backends."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lib.cli import main as cli
from lib.cli.sweep import cell_name, parse_grid
from tests.fault_harness import kill_when
from tests.notebook_run import report_without_torch

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def smoke(data: Path) -> list[str]:
    return ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True", "-p", "EPOCHS", "1",
            "-p", "DATA_DIR", str(data)]


def sweep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lib", "sweep", *args]


def test_grid_parsing_keeps_order_and_types():
    grid = parse_grid(["OPTIMIZER=sgd,adam,sgd", "SEED=0,1", "LABEL_NOISE=0.2"],
                      "optimizer_study")
    assert grid == {"OPTIMIZER": ["sgd", "adam"], "SEED": [0, 1], "LABEL_NOISE": [0.2]}
    assert cell_name({"OPTIMIZER": "adam", "SEED": 1}) == "optimizer=adam__seed=1"


def test_plan_validates_every_cell_before_running_any(tmp_path, capsys):
    """SEED=3 is fine, LR=-1 in the second cell is not: nothing is written or run."""
    code = cli.main(["sweep", "fashion_mnist", "--grid", "LR=0.5,-1", "--out", str(tmp_path)])
    assert code == 2
    assert "LR=-1 must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "sweep.json").exists() and not (tmp_path / "cells").exists()


@pytest.mark.notebook
def test_local_sweep_killed_halfway_trains_only_the_missing_cells(tmp_path):
    """A 2x2 optimizer grid on 2 local workers, SIGKILLed (workers and kernels too) once the
    first cell has finished; the same command again runs only the others and writes the
    study's summary table over all four runs."""
    out = tmp_path / "study"
    args = ["optimizer_study", "--grid", "OPTIMIZER=sgd,adam", "--grid", "SEED=0,1",
            *smoke(tmp_path / "data"), "--out", str(out), "--on", "local", "--jobs", "2"]
    kill_when(sweep_cmd(*args), lambda: any(out.glob("cells/*/DONE.json")), cwd=ROOT, env=ENV)
    done_before = {p.parent.name: p.read_text() for p in out.glob("cells/*/DONE.json")}
    assert 1 <= len(done_before) < 4
    notebooks_before = {n: (out / "cells" / n / "notebook.ipynb").stat().st_mtime_ns
                        for n in done_before}

    proc = subprocess.run(sweep_cmd(*args), capture_output=True, text=True, cwd=ROOT, env=ENV,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert f"4 cells, {len(done_before)} finished, {4 - len(done_before)} to run" in proc.stdout
    ran = [line.split("] ")[1].split(":")[0] for line in proc.stdout.splitlines()
           if line.startswith("[")]
    assert sorted(ran) == sorted(set(cell_name({"OPTIMIZER": o, "SEED": s})
                                     for o in ("sgd", "adam") for s in (0, 1)) - set(done_before))
    for name, text in done_before.items():  # untouched: not trained again
        assert (out / "cells" / name / "DONE.json").read_text() == text
        assert (out / "cells" / name / "notebook.ipynb").stat().st_mtime_ns == \
            notebooks_before[name]
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["optimizer"], r["seed"]) for r in rows) == [
        ("adam", "0"), ("adam", "1"), ("sgd", "0"), ("sgd", "1")]
    table = proc.stdout.split("all 4 cells finished")[1]
    # the grid trains on the offline sample: the summary says so (issue 52)
    assert "| cifar10 (synthetic sample) | sym 0.2" in table
    assert "| sgd | 2 |" in table and "| adam | 2 |" in table
    assert (out / "summary.md").exists() and (out / "curves-cifar10-sym0.2.png").exists()

    again = subprocess.run(sweep_cmd(*args), capture_output=True, text=True, cwd=ROOT, env=ENV,
                           timeout=300)
    assert again.returncode == 0 and "4 cells, 4 finished, 0 to run" in again.stdout
    assert "| sgd | 2 |" in report_without_torch(out)  # a sweep of the study, without torch


@pytest.mark.notebook
def test_slurm_sweep_through_submitits_local_executor(tmp_path):
    """The same job array submitit sends to Slurm, run by its local executor; a second
    submission finds both cells finished and submits nothing."""
    out = tmp_path / "s"
    args = ["fashion_mnist", "--grid", "SEED=1,2", *smoke(tmp_path / "data"), "--out", str(out),
            "--on", "slurm", "--cluster", "local", "--jobs", "2", "--time", "20"]
    proc = subprocess.run(sweep_cmd(*args), capture_output=True, text=True, cwd=ROOT, env=ENV,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "submitted array of 2 task(s)" in proc.stdout
    jobs = {json.loads((out / "cells" / f"seed={s}" / "slurm.json").read_text())["job_id"]
            for s in (1, 2)}
    assert len(jobs) == 2 and all((out / "slurm" / j).is_dir() for j in jobs)
    assert "| 1 | test_accuracy | " in proc.stdout and "| 2 | test_accuracy | " in proc.stdout
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["SEED"], r["status"], r["epochs"]) for r in rows] == [("1", "done", "1"),
                                                                     ("2", "done", "1")]
    again = subprocess.run(sweep_cmd(*args), capture_output=True, text=True, cwd=ROOT, env=ENV,
                           timeout=300)
    assert again.returncode == 0 and "submitted" not in again.stdout
    assert "2 cells, 2 finished, 0 to run" in again.stdout
    assert "| 2 | test_accuracy | " in report_without_torch(out)  # a sweep, without torch


@pytest.mark.notebook
def test_local_cell_that_fails_is_one_line_and_the_grid_is_kept(tmp_path):
    """Valid parameters the session refuses on this machine (DEVICE cuda, CUDA hidden)."""
    out = tmp_path / "f"
    args = ["fashion_mnist", "--grid", "SEED=1", *smoke(tmp_path / "data"), "-p", "DEVICE",
            "cuda", "--out", str(out)]
    proc = subprocess.run(sweep_cmd(*args), capture_output=True, text=True, cwd=ROOT,
                          env={**ENV, "NO_CUDA": "1"}, timeout=600)
    assert proc.returncode == 1
    failed = [line for line in proc.stderr.splitlines() if line.startswith("cell ")]
    assert len(failed) == 1 and failed[0].startswith("cell seed=1 failed: DeviceError: ")
    assert "1 of 1 cells failed" in proc.stderr and "run the same command again" in proc.stderr
    assert (out / "cells" / "seed=1" / "FAILED.json").exists()
    assert not (out / "cells" / "seed=1" / "DONE.json").exists()
