"""`train-anywhere sweep --on slurm` against a real single-node Slurm (tests/slurm_cluster.py).

`make test` runs this file in its own pytest, inside `python -m tests.slurm_cluster run --`,
which starts the cluster (and stops it afterwards) and sets TA_SLURM=cluster. Where no
cluster can be had (not root, not Debian) it sets TA_SLURM=local and says so: the end-to-end
sweep then runs on submitit's local executor, and the tests that need a scheduler (time
limits, GRES, partitions) are reported as skipped with that reason (`-rs`), never silently.
Run alone (`pytest tests/test_sweep_slurm.py`), the session fixture starts the cluster itself.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import slurm_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.notebook]
ROOT = Path(__file__).resolve().parent.parent
NOISE = ("WARNING", "Bypassing", "submitit", "Traceback", "DeprecationWarning")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """'cluster' with SLURM_CONF set, or 'local' (the reason printed) where none can start."""
    mode = os.environ.get("TA_SLURM")
    if mode in ("cluster", "local"):
        print("\nslurm tests: " + ("a real single-node Slurm" if mode == "cluster" else
                                   "submitit's local executor (no single-node Slurm here)"))
        yield mode, os.environ.get("TA_SLURM_WHY", "")
        return
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        slurm_cluster.ensure_installed()
        cluster.start()
    except slurm_cluster.NoCluster as exc:
        cluster.stop()
        print(f"\nslurm tests: no single-node Slurm here ({exc}); submitit's local executor")
        yield "local", str(exc)
        return
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    print(f"\nslurm tests: a real single-node Slurm (SLURM_CONF={cluster.conf})")
    try:
        yield "cluster", ""
    finally:
        cluster.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


@pytest.fixture
def cluster(slurm):
    mode, why = slurm
    if mode != "cluster":
        pytest.skip(f"needs the single-node Slurm, which could not start here: {why}")
    return mode


def sweep(out: Path, data: Path, *args: str, timeout: float = 600,
          env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lib", "sweep", "fashion_mnist", "-p", "SMOKE", "True",
           "-p", "SAMPLE_DATA", "True", "-p", "DATA_DIR", str(data), "--out", str(out),
           "--on", "slurm", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def quiet(proc: subprocess.CompletedProcess) -> None:
    text = proc.stdout + proc.stderr
    assert not [line for line in text.splitlines() if any(w in line for w in NOISE)], text


def submission(out: Path) -> str:
    scripts = sorted(out.glob("slurm/**/*_submission.sh"))
    assert scripts, f"no submission script under {out / 'slurm'}"
    return scripts[-1].read_text()


def test_sweep_runs_as_one_array_and_is_quiet(slurm, tmp_path):
    """Two cells as one array of parallelism 2 (--jobs); the output holds the cells' lines,
    the summary and, on a cluster without accounting, one line saying so, and nothing from
    submitit; a second submission finds both cells finished and submits nothing."""
    mode, _ = slurm
    out = tmp_path / "s"
    args = ["--grid", "SEED=0,1", "-p", "EPOCHS", "1", "--jobs", "2", "--time", "10"]
    if mode == "local":
        args += ["--cluster", "local"]
    proc = sweep(out, tmp_path / "data", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    quiet(proc)
    accounting = [line for line in proc.stdout.splitlines() if "accounting is off" in line]
    assert len(accounting) == (1 if mode == "cluster" else 0), proc.stdout
    cell_lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(cell_lines) == 2 and all("test_accuracy 0." in ln for ln in cell_lines)
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["SEED"], r["status"], r["epochs"]) for r in rows] == [("0", "done", "1"),
                                                                     ("1", "done", "1")]
    if mode == "cluster":
        assert "#SBATCH --array=0-1%2" in submission(out)
    again = sweep(out, tmp_path / "data", *args, timeout=300)
    assert again.returncode == 0 and "submitted" not in again.stdout
    assert "2 cells, 2 finished, 0 to run" in again.stdout


def test_cell_killed_at_its_time_limit_requeues_and_finishes(cluster, tmp_path):
    """--time 1 (minute) on a cell that needs more: 30 smoke epochs of six steps, each step
    held 0.35 s (TA_SLOWPOINTS, passed to the job by sbatch's exported environment), so over
    a minute of training on any machine, plus ~20 s to start each time. USR2 comes before the
    limit, the task requeues itself and its notebook goes on from the newest checkpoint until
    all epochs are done; each epoch is in metrics.jsonl once, and the cell's line says how
    many requeues it took. (Unheld, 60 smoke epochs fitted in one minute on a quiet machine:
    a test of a time limit must not depend on the machine's speed.) The cap is high so that a
    loaded machine still finishes."""
    out = tmp_path / "rq"
    epochs = 30
    proc = sweep(out, tmp_path / "data", "--grid", "SEED=0", "-p", "EPOCHS", str(epochs),
                 "--time", "1", "--max-requeues", "20", timeout=1200,
                 env={"TA_SLOWPOINTS": "train.step=0.35"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    quiet(proc)
    cell = out / "cells" / "seed=0"
    requeues = len((cell / "requeues.jsonl").read_text().splitlines())
    assert requeues >= 1
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("[1/1]"))
    assert f"requeued {requeues} time" in line, line
    records = [json.loads(r) for r in (cell / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, epochs + 1))
    # Trained in several sessions; not always one per start (a start may find all epochs
    # done and only finish the notebook's last cells).
    sessions = (cell / "run" / "sessions.jsonl").read_text().splitlines()
    assert 2 <= len(sessions) <= requeues + 1


def test_unknown_partition_is_one_line_naming_sinfos(cluster, tmp_path):
    proc = sweep(tmp_path / "p", tmp_path / "data", "--grid", "SEED=0", "--partition", "gpus",
                 timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--partition gpus" in lines[0], proc.stderr
    assert "sinfo lists debug, gpu" in lines[0]
    assert not (tmp_path / "p" / "slurm").exists()


def test_gpus_become_the_gres_line_the_scheduler_allocates(cluster, tmp_path):
    """--gpus 2 is `--gres=gpu:2` in the array's script, which Slurm reads as two GPUs per
    node (the job's TresPerNode) and runs on the node's two; more GPUs than the node has is
    sbatch's refusal in one line."""
    out = tmp_path / "g"
    proc = sweep(out, tmp_path / "data", "--grid", "SEED=0", "-p", "EPOCHS", "1",
                 "--partition", "gpu", "--gpus", "2", "--time", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    quiet(proc)
    script = submission(out)
    assert "#SBATCH --gres=gpu:2" in script and "#SBATCH --partition=gpu" in script
    job = json.loads((out / "cells" / "seed=0" / "slurm.json").read_text())["job_id"]
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                           text=True, timeout=60)
    assert "TresPerNode=gres:gpu:2" in shown.stdout and "Partition=gpu" in shown.stdout, \
        shown.stdout + shown.stderr

    too_many = sweep(tmp_path / "g3", tmp_path / "data", "--grid", "SEED=0", "--gpus", "3",
                     timeout=120)
    assert too_many.returncode == 2
    lines = too_many.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train-anywhere sweep: sbatch refused"), \
        too_many.stderr


def test_cell_requeued_by_the_scheduler_goes_on_from_its_checkpoint(cluster, tmp_path):
    """What PreemptMode=REQUEUE does to a running task (`scontrol requeue`, slurm.conf(5)):
    killed and queued again. The task starts over, its notebook resumes from the newest
    checkpoint, and each epoch is recorded once. Each step is held 0.3 s (TA_SLOWPOINTS), so
    the 12 epochs left after the third take over 20 s on any machine, however fast: the
    requeue lands mid-run without 30 epochs of training (round seven: 30 unheld epochs)."""
    import time

    out, epochs = tmp_path / "pre", 15
    cmd = [sys.executable, "-m", "lib", "sweep", "fashion_mnist", "-p", "SMOKE", "True",
           "-p", "SAMPLE_DATA", "True", "-p", "DATA_DIR", str(tmp_path / "data"), "-p", "EPOCHS",
           str(epochs), "--grid", "SEED=0", "--out", str(out), "--on", "slurm", "--time", "30"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1",
                                           "TA_SLOWPOINTS": "train.step=0.3"})
    metrics = out / "cells" / "seed=0" / "run" / "metrics.jsonl"
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end and not (metrics.exists() and
                                               len(metrics.read_text().splitlines()) >= 3):
            time.sleep(1)
        done_before = len(metrics.read_text().splitlines())
        assert 3 <= done_before < epochs
        job = json.loads((out / "cells" / "seed=0" / "slurm.json").read_text())["job_id"]
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=60)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stdout + stderr
    records = [json.loads(r) for r in metrics.read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, epochs + 1))
    sessions = (out / "cells" / "seed=0" / "run" / "sessions.jsonl").read_text().splitlines()
    assert len(sessions) == 2
    why = [json.loads(r)["why"] for r in
           (out / "cells" / "seed=0" / "requeues.jsonl").read_text().splitlines()]
    assert why == ["requeued by the scheduler"]
    assert "(job " in stdout and ", requeued 1 time)" in stdout, stdout
