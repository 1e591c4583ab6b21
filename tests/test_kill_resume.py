"""SIGKILL a notebook's training at seeded moments (20 times for the quickstart, 8 for each of
Mamba-Spike and MSHNet, 4 across a two-run optimizer study: 40 per run of the suite); it must
end exactly where an uninterrupted run ends: same weights, same metrics.jsonl (and for the
study the same results.csv), no duplicated or missing epochs.

The kills land at failpoints (mid-step, mid-evaluation, mid-checkpoint-write), at arbitrary
moments shortly after one, and at start-up (tests/fault_harness.py, lib/base/faults.py). Each kill
keeps a bounded number of training steps, so every run is sized (`steps_needed`) for all of
its kills to land on any machine, however fast, slow or loaded.

Replay a failure with TA_FAULT_SEED=<seed printed in the assertion>.
"""

import os

import pytest
import torch

from lib.runs.records import read_jsonl
from lib.study.grid import read_results
from tests.fault_harness import (
    Kill,
    kill_points,
    notebook_script,
    run_with_kills,
    steps_needed,
    strip_timing,
)

pytestmark = pytest.mark.notebook
SEED = int(os.environ.get("TA_FAULT_SEED", "20261122"))
# workload -> (smoke parameters, kills that must land). Each restart costs a process start,
# so the quickstart carries the 20 and the others a share each. Few batches and many epochs:
# an eval.batch kill lets the rest of an epoch train first.
WORKLOADS = {
    "fashion_mnist": (dict(EPOCHS=14, SMOKE_BATCHES=3), 20),
    # a tiny model on 8 frames
    "mamba_spike": (dict(EPOCHS=6, SMOKE_BATCHES=3, BATCH_SIZE=4, N_TIME_BINS=8, D_MODEL=16,
                         N_LAYERS=1, SPIKE_CHANNELS=8), 8),
    # warm-up then SLS: a resume must restore the loss's phase too
    "mshnet": (dict(EPOCHS=6, SMOKE_BATCHES=3, BATCH_SIZE=4, WARM_EPOCHS=2), 8),
}


def params(workload, tmp_path, name, extra):
    return dict(SMOKE=True, SAMPLE_DATA=True, DATA_DIR=str(tmp_path / "data"),
                OUT_DIR=str(tmp_path / name), CHECKPOINT_MINUTES=1e-9, **extra)


def final_state(out_dir):
    newest = sorted((out_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    return newest.name, torch.load(newest, map_location="cpu", weights_only=True)


def test_every_run_is_long_enough_for_its_kills():
    for extra, required in WORKLOADS.values():
        steps = extra["EPOCHS"] * extra["SMOKE_BATCHES"]
        assert steps >= steps_needed(required, extra["SMOKE_BATCHES"]), extra


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_killed_and_restarted_run_equals_an_uninterrupted_one(workload, tmp_path):
    extra, required = WORKLOADS[workload]
    clean = notebook_script(workload, params(workload, tmp_path, "clean", extra),
                            tmp_path / "clean.py")
    killed = notebook_script(workload, params(workload, tmp_path, "killed", extra),
                             tmp_path / "killed.py")
    run_with_kills(clean)
    outcome = run_with_kills(killed, kill_points(f"{SEED}:{workload}"), kills=required)
    replay = f"replay with TA_FAULT_SEED={SEED}; kills {outcome.kills}"
    print(f"{workload}: {len(outcome.kills)} kills: {outcome.kills}")
    assert not outcome.finished_early, (
        f"the run finished after {len(outcome.kills)} of {required} kills: too short for the "
        f"kill plan (see steps_needed); {replay}")

    history = read_jsonl(tmp_path / "clean" / "metrics.jsonl")
    resumed = read_jsonl(tmp_path / "killed" / "metrics.jsonl")
    assert [r["epoch"] for r in resumed] == list(range(1, extra["EPOCHS"] + 1)), replay
    assert strip_timing(resumed) == strip_timing(history), replay
    (name_a, a), (name_b, b) = final_state(tmp_path / "clean"), final_state(tmp_path / "killed")
    assert name_a == name_b, replay
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), f"{key}: {replay}"
    assert not list((tmp_path / "killed" / "checkpoints").glob(".*.tmp"))
    assert len(outcome.kills) == required, replay


# The optimizer study: a grid of two runs (ResNet-18, batch 8); kills land inside either run,
# and between a run's last checkpoint and its DONE.json.
STUDY = (dict(EPOCHS=2, SMOKE_BATCHES=2, BATCH_SIZE=8, OPTIMIZERS=["adamw"], SEEDS=[0, 1]), 4)


def test_the_study_grid_is_long_enough_for_its_kills():
    extra, required = STUDY
    runs = len(extra["OPTIMIZERS"]) * len(extra["SEEDS"])
    steps = runs * extra["EPOCHS"] * extra["SMOKE_BATCHES"]
    assert steps >= steps_needed(required, extra["SMOKE_BATCHES"]), extra


def test_a_killed_and_restarted_study_equals_an_uninterrupted_one(tmp_path):
    """Every run of the grid ends with the weights, history and results.csv row of the
    uninterrupted study (wall time aside), each run trained once to the end."""
    extra, required = STUDY
    for name in ("clean", "killed"):
        script = notebook_script("optimizer_study", params("", tmp_path, name, extra),
                                 tmp_path / f"{name}.py")
        points = kill_points(f"{SEED}:optimizer_study") if name == "killed" else ()
        outcome = run_with_kills(script, points, kills=required if points else 0)
    replay = f"replay with TA_FAULT_SEED={SEED}; kills {outcome.kills}"
    assert not outcome.finished_early and len(outcome.kills) == required, replay

    clean, killed = (read_results(tmp_path / n / "results.csv") for n in ("clean", "killed"))
    assert len(clean) == 2
    assert [dict(r, wall_time_s=0) for r in killed] == [dict(r, wall_time_s=0) for r in clean]
    for row in clean:
        a, b = (tmp_path / n / row["run"] for n in ("clean", "killed"))
        history = read_jsonl(b / "metrics.jsonl")
        assert [r["epoch"] for r in history] == [1, 2], replay
        assert strip_timing(history) == strip_timing(read_jsonl(a / "metrics.jsonl")), replay
        (name_a, sa), (name_b, sb) = final_state(a), final_state(b)
        assert name_a == name_b, replay
        for key in sa["model"]:
            assert torch.equal(sa["model"][key], sb["model"][key]), f"{key}: {replay}"
        assert not list((b / "checkpoints").glob(".*.tmp"))


def test_a_corrupt_newest_checkpoint_is_reported_and_the_previous_one_used(tmp_path):
    extra = dict(EPOCHS=2, SMOKE_BATCHES=3)
    first = notebook_script("fashion_mnist", params("fashion_mnist", tmp_path, "run", extra),
                            tmp_path / "first.py")
    run_with_kills(first)
    newest = sorted((tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # a cut file, as after a lost sync
    more = dict(extra, EPOCHS=3)
    again = notebook_script("fashion_mnist", params("fashion_mnist", tmp_path, "run", more),
                            tmp_path / "again.py")
    run_with_kills(again)
    history = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2, 3]


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.parent.name != "tb"}


def test_kills_around_the_refusal_path(tmp_path):
    """Killed while it records its experiment and again mid-step, a run is still one run;
    a changed run after it is refused, killed or not, and leaves every file as it was."""
    extra = dict(EPOCHS=3, SMOKE_BATCHES=3)
    same = params("fashion_mnist", tmp_path, "run", extra)
    script = notebook_script("fashion_mnist", same, tmp_path / "same.py")
    kills = [Kill("experiment.record@1"), Kill("train.step@4")]
    outcome = run_with_kills(script, iter(kills), kills=2)
    assert not outcome.finished_early and len(outcome.kills) == 2, outcome
    assert [r["epoch"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3]
    before = _files(tmp_path / "run")
    changed = notebook_script("fashion_mnist", dict(same, LR=0.5), tmp_path / "changed.py")
    with pytest.raises(RuntimeError, match=r"ExperimentChanged: OUT_DIR .* LR 1.0 -> 0.5"):
        run_with_kills(changed, iter([Kill("train.step@1")]), kills=1)
    with pytest.raises(RuntimeError, match=r"ExperimentChanged: OUT_DIR .* LR 1.0 -> 0.5"):
        run_with_kills(changed)
    assert _files(tmp_path / "run") == before
