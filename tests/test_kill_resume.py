"""SIGKILL a notebook's training at seeded moments (>= 20 for the quickstart, more for the
other workloads, > 35 per run of the suite); it must end exactly where an uninterrupted run
ends: same weights, same metrics.jsonl, no duplicated or missing epochs.

Replay a failure with TA_FAULT_SEED=<seed printed in the assertion>.
"""

import os

import pytest
import torch

from lib.metrics import read_jsonl
from tests.fault_harness import notebook_script, plan, run_with_kills, strip_timing

pytestmark = pytest.mark.notebook
SEED = int(os.environ.get("TA_FAULT_SEED", "20261122"))
# workload -> (smoke parameters, kill points planned, kills that must land). Each restart
# costs a process start, so the quickstart carries the 20 and the others a share each.
WORKLOADS = {
    "fashion_mnist": (dict(EPOCHS=4, SMOKE_BATCHES=6), 24, 20),
    # a tiny model on 8 frames; kills also land in the data cell's cache warm-up
    "mamba_spike": (dict(EPOCHS=4, SMOKE_BATCHES=6, BATCH_SIZE=4, N_TIME_BINS=8, D_MODEL=16,
                         N_LAYERS=1, SPIKE_CHANNELS=8), 9, 7),
    # warm-up then SLS: a resume must restore the loss's phase too
    "mshnet": (dict(EPOCHS=4, SMOKE_BATCHES=6, BATCH_SIZE=4, WARM_EPOCHS=2), 9, 7),
}


def params(workload, tmp_path, name, extra):
    return dict(SMOKE=True, SAMPLE_DATA=True, DATA_DIR=str(tmp_path / "data"),
                OUT_DIR=str(tmp_path / name), CHECKPOINT_MINUTES=1e-4, **extra)


def final_state(out_dir):
    newest = sorted((out_dir / "checkpoints").glob("ckpt-*.pt"))[-1]
    return newest.name, torch.load(newest, map_location="cpu", weights_only=True)


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_killed_and_restarted_run_equals_an_uninterrupted_one(workload, tmp_path):
    extra, n_kills, required = WORKLOADS[workload]
    clean = notebook_script(workload, params(workload, tmp_path, "clean", extra),
                            tmp_path / "clean.py")
    killed = notebook_script(workload, params(workload, tmp_path, "killed", extra),
                             tmp_path / "killed.py")
    run_with_kills(clean, [])
    points = plan(SEED, n_kills)
    outcome = run_with_kills(killed, points)
    replay = f"seed {SEED}, kills {outcome.kills}"

    history = read_jsonl(tmp_path / "clean" / "metrics.jsonl")
    resumed = read_jsonl(tmp_path / "killed" / "metrics.jsonl")
    assert [r["epoch"] for r in resumed] == list(range(1, extra["EPOCHS"] + 1)), replay
    assert strip_timing(resumed) == strip_timing(history), replay
    (name_a, a), (name_b, b) = final_state(tmp_path / "clean"), final_state(tmp_path / "killed")
    assert name_a == name_b, replay
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), f"{key}: {replay}"
    assert not list((tmp_path / "killed" / "checkpoints").glob(".*.tmp"))
    assert len(outcome.kills) >= required, replay


def test_a_corrupt_newest_checkpoint_is_reported_and_the_previous_one_used(tmp_path):
    extra = dict(EPOCHS=2, SMOKE_BATCHES=3)
    first = notebook_script("fashion_mnist", params("fashion_mnist", tmp_path, "run", extra),
                            tmp_path / "first.py")
    run_with_kills(first, [])
    newest = sorted((tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # a cut file, as after a lost sync
    more = dict(extra, EPOCHS=3)
    again = notebook_script("fashion_mnist", params("fashion_mnist", tmp_path, "run", more),
                            tmp_path / "again.py")
    run_with_kills(again, [])
    history = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2, 3]
