"""SIGKILL a notebook's training at seeded moments (20 times for the quickstart, 8 for each of
Mamba-Spike and MSHNet, 4 across a two-run optimizer study: 40 per run of the suite); it must
end exactly where an uninterrupted run ends: same weights, same metrics.jsonl (and for the
study the same results.csv), no duplicated or missing epochs.

The kills land at failpoints (mid-step, mid-evaluation, mid-checkpoint-write), at arbitrary
moments shortly after one, and as SIGKILLs sent from outside: in every block of 8 kills (4 in
the study) one aimed at each phase, start-up (a share of the start-up measured on the run's
attempts), a training step and a checkpoint write (tests/fault_harness.py, lib/base/faults.py).
Where each kill landed is read from the run folder (tests/kill_phases.py), and each run must
have kills from outside land in all three phases. Each kill keeps a bounded number of
training steps, so every run is sized (`steps_needed`) for all of its kills to land on any
machine, however fast, slow or loaded. Consecutive attempts are forked from zygotes with
different PYTHONHASHSEEDs, so a resume that depends on set order cannot pass unseen
(`test_a_resume_that_depends_on_set_order_is_caught`). `pytest -s` prints the measured
start-ups and where each kill landed.

Replay a failure with TA_FAULT_SEED=<seed printed in the assertion>.
"""

import pytest
import torch

from lib.runs.records import read_jsonl
from lib.study.grid import read_results
from tests.fault_harness import (
    HASH_SEEDS,
    SEED,
    Kill,
    kill_points,
    notebook_script,
    run_with_kills,
    steps_needed,
    strip_timing,
)
from tests.kill_phases import PHASES
from tests.unchanged import assert_unchanged, snapshot

pytestmark = pytest.mark.notebook
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


def report(name, first, outcome):
    """What `-s` shows: the measured start-ups and where each kill landed."""
    restarts = ", ".join(f"{t:.2f}" for t in outcome.startups)
    print(f"\n{name}: start-up {first.startups[0]:.2f}s uninterrupted (data prepared), "
          f"killed run's attempts {restarts} "
          f"(PYTHONHASHSEED {' / '.join(map(str, HASH_SEEDS))}); {len(outcome.kills)} kills, "
          f"{outcome.per_phase()}:\n  " + "\n  ".join(outcome.kills))


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
    first = run_with_kills(clean, out_dir=tmp_path / "clean")
    outcome = run_with_kills(killed, kill_points(f"{SEED}:{workload}"), kills=required,
                             out_dir=tmp_path / "killed")
    replay = f"replay with TA_FAULT_SEED={SEED}; kills {outcome.kills}"
    report(workload, first, outcome)
    assert not outcome.finished_early, (
        f"the run finished after {len(outcome.kills)} of {required} kills: too short for the "
        f"kill plan (see steps_needed); {replay}")
    assert all(outcome.outside[p] for p in PHASES), (
        f"kills from outside by phase: {outcome.per_phase()}; {replay}")

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


# Planted: the weights also saved as one flat tensor laid out in the order of a set of their
# names, and restored from it in the restoring process's set order. Correct when writer and
# reader share a hash seed (every fork of one zygote did); wrong weights when they differ.
SET_ORDER_RESUME = """
import torch
from lib.training import loop

_state, _restore = loop._state, loop._restore


def _flat_state(task, *args, **kwargs):
    state = _state(task, *args, **kwargs)
    names = set(state["model"])
    state["flat"] = torch.cat([state["model"][k].reshape(-1) for k in names])
    return state


def _flat_restore(task, backend, state, log=print):
    model, at = {}, 0
    for k in set(state["model"]):
        like = state["model"][k]
        model[k] = state["flat"][at:at + like.numel()].reshape(like.shape)
        at += like.numel()
    _restore(task, backend, dict(state, model=model), log)


loop._state, loop._restore = _flat_state, _flat_restore
"""


def test_a_resume_that_depends_on_set_order_is_caught(tmp_path):
    """With SET_ORDER_RESUME planted, a run killed once and resumed by a process with another
    hash seed (the next attempt's) ends with other weights than the uninterrupted run; resumed
    under the same hash seed, it would pass unseen."""
    extra = dict(EPOCHS=1, SMOKE_BATCHES=2)
    ends = {}
    for name, seeds in (("clean", None), ("same seed", HASH_SEEDS[:1]),
                        ("next attempt's seed", HASH_SEEDS)):
        script = notebook_script("fashion_mnist", params("", tmp_path, name, extra),
                                 tmp_path / f"{name}.py", prologue=SET_ORDER_RESUME)
        kills = [Kill("train.step@2")] if seeds else []
        outcome = run_with_kills(script, iter(kills), kills=len(kills),
                                 hash_seeds=seeds or HASH_SEEDS)
        assert len(outcome.kills) == len(kills) and not outcome.finished_early, outcome
        ends[name] = final_state(tmp_path / name)[1]["model"]
    equal = {name: all(torch.equal(ends["clean"][k], end[k]) for k in end)
             for name, end in ends.items()}
    assert equal == {"clean": True, "same seed": True, "next attempt's seed": False}


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
    scripts = [notebook_script("optimizer_study", params("", tmp_path, name, extra),
                               tmp_path / f"{name}.py") for name in ("clean", "killed")]
    first = run_with_kills(scripts[0], out_dir=tmp_path / "clean")
    outcome = run_with_kills(scripts[1], kill_points(f"{SEED}:optimizer_study", block=required),
                             kills=required, out_dir=tmp_path / "killed")
    report("optimizer_study", first, outcome)
    replay = f"replay with TA_FAULT_SEED={SEED}; kills {outcome.kills}"
    assert not outcome.finished_early and len(outcome.kills) == required, replay
    assert all(outcome.outside[p] for p in PHASES), (
        f"kills from outside by phase: {outcome.per_phase()}; {replay}")

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
    before = snapshot(tmp_path / "run")  # every file, tb/ included
    changed = notebook_script("fashion_mnist", dict(same, LR=0.5), tmp_path / "changed.py")
    with pytest.raises(RuntimeError, match=r"ExperimentChanged: OUT_DIR .* LR 1.0 -> 0.5"):
        run_with_kills(changed, iter([Kill("train.step@1")]), kills=1)
    with pytest.raises(RuntimeError, match=r"ExperimentChanged: OUT_DIR .* LR 1.0 -> 0.5"):
        run_with_kills(changed)
    assert_unchanged(before, tmp_path / "run")
