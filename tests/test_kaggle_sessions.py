"""Training past one Kaggle session, in the Kaggle stand-in: the quickstart notebook run as
Kaggle runs a Save Version (KAGGLE_KERNEL_RUN_TYPE=Batch), with /kaggle redirected to a
temp folder (TA_KAGGLE_ROOT) and a shortened session limit (TA_SESSION_HOURS).

An attached notebook output is mounted read-only under /kaggle/input, at
`notebooks/<owner>/<slug>/` in the current layout and `<slug>/` in the older one, holding
what that version left in /kaggle/working (../shared/reference/sessions.md; no official page
documents the layout). The tests lay out both.
"""

import os
import shutil
import stat

import pytest
import torch

from lib.runs.records import read_jsonl
from tests.fault_harness import ROOT, notebook_script, run_script, strip_timing
from tests.unchanged import assert_unchanged, snapshot

pytestmark = pytest.mark.notebook
PARAMS = dict(PLATFORM="kaggle_p100", DEVICE="cpu", SMOKE=True, SAMPLE_DATA=True, EPOCHS=3,
              SMOKE_BATCHES=3)
RUN = ("runs", "fashion_mnist")  # OUT_DIR's default under /kaggle/working


def kaggle_session(tmp_path, name, root, limit_h=None, **changes):
    """Run the quickstart as a Kaggle batch session with /kaggle at `root`; (rc, output)."""
    script = notebook_script("fashion_mnist", dict(PARAMS, **changes), tmp_path / f"{name}.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TA_")}
    env.update(KAGGLE_KERNEL_RUN_TYPE="Batch", TA_KAGGLE_ROOT=str(root), MPLBACKEND="Agg",
               **({"TA_SESSION_HOURS": repr(limit_h)} if limit_h else {}))
    return run_script(script, env, ROOT)


def attach(output_of, root, *where):
    """Mount `output_of`'s /kaggle/working under `root`/input/<where>, read-only as Kaggle."""
    target = root.joinpath("input", *where)
    shutil.copytree(output_of / "working", target)
    for p in [target, *target.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return target


def final_weights(run_dir):
    newest = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    return newest.name, torch.load(newest, map_location="cpu", weights_only=True)["model"]


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A first session that reaches its (shortened) limit after its first step."""
    tmp = tmp_path_factory.mktemp("first")
    rc, out = kaggle_session(tmp, "first", tmp / "k1", limit_h=1e-9)
    return tmp, rc, out


def test_a_session_stops_itself_saved_before_the_limit_and_the_notebook_exits_0(first):
    tmp, rc, out = first
    assert rc == 0, out[-3000:]
    run = tmp / "k1" / "working" / "runs" / "fashion_mnist"
    assert "STOPPED before the session limit" in out
    assert "Add Input -> Notebook Output" in out  # the advice true on Kaggle
    assert [p.name for p in (run / "checkpoints").glob("ckpt-*.pt")] == ["ckpt-e0000-b000001.pt"]
    assert (run / "STOPPED.json").is_file()  # a sweep reads it: the run is not finished
    # Nothing attached: one line says how to carry the run over.
    advice = [line for line in out.splitlines() if line.startswith("no earlier run")]
    assert len(advice) == 1 and "Save Version again" in advice[0], out[-2000:]
    # Data and caches are on scratch, not in the version's 20 GB output.
    assert not (tmp / "k1" / "working" / "data").exists()
    assert (tmp / "k1" / "temp" / "train-anywhere" / "data").is_dir()


def test_the_next_session_resumes_from_the_attached_output_and_ends_as_one_run(first, tmp_path):
    tmp, rc, _ = first
    assert rc == 0
    clean = kaggle_session(tmp_path, "clean", tmp_path / "clean")
    assert clean[0] == 0, clean[1][-3000:]
    root = tmp_path / "k2"
    src = attach(tmp / "k1", root, "notebooks", "someone", "fashion-mnist-quickstart")
    rc, out = kaggle_session(tmp_path, "second", root)
    assert rc == 0, out[-3000:]
    assert f"carried over the run in {src.joinpath(*RUN)}" in out
    assert "resumed from" in out and "at epoch 0, batch 1" in out
    a, b = (r.joinpath("working", *RUN) for r in (tmp_path / "clean", root))
    history = read_jsonl(b / "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2, 3] and not (b / "STOPPED.json").exists()
    assert strip_timing(history) == strip_timing(read_jsonl(a / "metrics.jsonl"))
    (name_a, wa), (name_b, wb) = final_weights(a), final_weights(b)
    assert name_a == name_b
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_an_attached_run_of_a_changed_experiment_is_refused(first, tmp_path):
    tmp, rc, _ = first
    root = tmp_path / "k3"
    attach(tmp / "k1", root, "fashion-mnist-quickstart")  # the older layout
    before = snapshot(root)  # /kaggle: the attached input, working (the output), temp
    rc, out = kaggle_session(tmp_path, "changed", root, LR=0.5)
    assert rc != 0
    assert "ExperimentChanged: the attached run" in out and "LR 1.0 -> 0.5" in out, out[-2000:]
    assert_unchanged(before, root)


STUDY = dict(PLATFORM="kaggle_p100", DEVICE="cpu", SMOKE=True, SAMPLE_DATA=True, EPOCHS=2,
             SMOKE_BATCHES=2, BATCH_SIZE=8, OPTIMIZERS=["adamw"], SEEDS=[0, 1, 2])
GRID = ("runs", "optimizer_study")  # the grid's OUT_DIR under /kaggle/working
CELLS = [f"cifar10-adamw-seed{seed}-sym0.2" for seed in (0, 1, 2)]


def study_session(tmp_path, name, root, limit_h=None, **changes):
    """The optimizer study as a Kaggle batch session with /kaggle at `root`; (rc, output)."""
    script = notebook_script("optimizer_study", dict(STUDY, **changes), tmp_path / f"{name}.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TA_")}
    env.update(KAGGLE_KERNEL_RUN_TYPE="Batch", TA_KAGGLE_ROOT=str(root), MPLBACKEND="Agg",
               **({"TA_SESSION_HOURS": repr(limit_h)} if limit_h else {}))
    return run_script(script, env, ROOT)


@pytest.fixture(scope="module")
def study_first(tmp_path_factory):
    """A first session's output: the grid's first run finished (by a session of SEEDS [0]),
    then a session of the whole grid stopped by its limit after one step of the second run."""
    tmp = tmp_path_factory.mktemp("study")
    done = study_session(tmp, "seed0", tmp / "k", SEEDS=[0])
    stopped = study_session(tmp, "grid", tmp / "k", limit_h=1e-9)
    return tmp, done, stopped


def test_a_study_grid_stopped_by_the_limit_marks_no_run_finished(study_first):
    """A run of the optimizer study stopped before the limit gets no DONE.json (it is not
    finished), the grid goes no further, and the notebook still ends normally."""
    tmp, (rc0, out0), (rc, out) = study_first
    assert rc0 == 0, out0[-3000:]
    assert "no earlier run of this grid" in out0 and "Save Version again" in out0
    assert rc == 0, out[-3000:]
    grid = tmp.joinpath("k", "working", *GRID)
    assert sorted(p.name for p in grid.iterdir() if p.is_dir()) == CELLS[:2]
    assert (grid / CELLS[1] / "STOPPED.json").is_file()
    assert [p.parent.name for p in grid.rglob("DONE.json")] == CELLS[:1]
    assert "1 runs in" in out  # the results cell: the finished run only


def test_a_stopped_grid_carries_over_from_the_attached_output_and_finishes(study_first,
                                                                           tmp_path):
    tmp, _, (rc, _) = study_first
    assert rc == 0
    root = tmp_path / "k2"
    src = attach(tmp / "k", root, "notebooks", "someone", "optimizer-study")
    rc, out = study_session(tmp_path, "second", root)
    assert rc == 0, out[-3000:]
    assert (f"carried over 2 of the grid's 3 runs (1 finished) from {src.joinpath(*GRID)}"
            in out), out[-3000:]
    assert f"[1/3] {CELLS[0]}: finished earlier, skipped" in out
    assert f"[2/3] {CELLS[1]}: resuming" in out and "at epoch 0, batch 1" in out
    assert f"[3/3] {CELLS[2]}: training" in out
    grid, before = root.joinpath("working", *GRID), src.joinpath(*GRID)
    # The finished run is kept as it was, not trained again; the others end finished.
    assert (grid / CELLS[0] / "DONE.json").read_text() == \
        (before / CELLS[0] / "DONE.json").read_text()
    for cell in CELLS[1:]:
        assert [r["epoch"] for r in read_jsonl(grid / cell / "metrics.jsonl")] == [1, 2]
        assert (grid / cell / "DONE.json").is_file() and not (grid / cell / "STOPPED.json").exists()
    assert "3 runs in" in out
    # The resumed run ends as the same run trained in one session.
    clean = study_session(tmp_path, "clean", tmp_path / "clean", SEEDS=[1])
    assert clean[0] == 0, clean[1][-3000:]
    alone = tmp_path.joinpath("clean", "working", *GRID, CELLS[1], "metrics.jsonl")
    assert strip_timing(read_jsonl(grid / CELLS[1] / "metrics.jsonl")) == \
        strip_timing(read_jsonl(alone))


def test_an_attached_grid_of_a_changed_experiment_is_refused(study_first, tmp_path):
    tmp, _, (rc, _) = study_first
    assert rc == 0
    root = tmp_path / "k3"
    attach(tmp / "k", root, "optimizer-study")  # the older layout
    before = snapshot(root)
    rc, out = study_session(tmp_path, "changed", root, LR=0.5)
    assert rc != 0
    assert "ExperimentChanged: the attached run" in out and "-> 0.5" in out, out[-2000:]
    assert_unchanged(before, root)
