"""papermill runs the optimizer-study notebook of every platform on the CPU: a 2 x 2 grid,
results.csv, summary and figures; a rerun retrains nothing; fan-out invocations merge."""

import math
import os

import pytest
import torch

from lib.models.resnet import CifarResNet18, ResNetConfig
from lib.runs.records import read_jsonl
from lib.study.grid import read_results
from tests.notebook_run import (
    check_clean_outputs,
    epoch_lines,
    execute,
    figure_titles,
    markdown_outputs,
    report_without_torch,
    stream_text,
)
from tests.unchanged import assert_unchanged, snapshot

pytestmark = pytest.mark.notebook
GRID = dict(OPTIMIZERS=["sgd", "lion"], SEEDS=[0, 1])
SMOKE = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=2, SMOKE_BATCHES=2, LABEL_NOISE=0.2)
RUNS = {f"cifar10-{o}-seed{s}-sym0.2" for o in GRID["OPTIMIZERS"] for s in GRID["SEEDS"]}


def run(platform, tmp_path, out="study", **params):
    return execute("optimizer_study", platform, tmp_path / f"nb-{out}",
                   DATA_DIR=str(tmp_path / "data"), OUT_DIR=str(tmp_path / out),
                   **{**SMOKE, **params})


def check_study(out_dir, runs=RUNS, epochs=2) -> list[dict]:
    rows = read_results(out_dir / "results.csv")
    assert {r["run"] for r in rows} == runs
    for r in rows:
        assert r["epochs"] == epochs and 0 <= r["best_test_accuracy"] <= 1, r
        assert r["final_test_accuracy"] <= r["best_test_accuracy"], r
        # the sample has 1000 training labels: 0.2 +- 0.03 at any seed, identical per seed
        assert abs(r["realised_noise"] - 0.2) < 0.03, r
        assert r["wall_time_s"] > 0 and r["lr"] > 0, r
        history = read_jsonl(out_dir / r["run"] / "metrics.jsonl")
        assert [h["epoch"] for h in history] == list(range(1, epochs + 1))
        assert all(math.isfinite(h["train_loss"]) for h in history), history
        assert max(h["test_accuracy"] for h in history) == r["best_test_accuracy"]
        state = torch.load(out_dir / r["run"] / "checkpoints" / "best.pt", map_location="cpu",
                           weights_only=True)
        CifarResNet18(ResNetConfig(**state["model_config"])).load_state_dict(state["model"])
        assert list((out_dir / r["run"] / "tb").glob("events.out.tfevents.*"))
    by_seed = {}
    for r in rows:
        by_seed.setdefault(r["seed"], set()).add(r["realised_noise"])
    assert all(len(v) == 1 for v in by_seed.values()), by_seed  # same labels per seed
    summary = (out_dir / "summary.md").read_text()
    for optimizer in {r["optimizer"] for r in rows}:
        n_seeds = sum(r["optimizer"] == optimizer for r in rows)
        assert f"| {optimizer} | {n_seeds} |" in summary, summary
    for figure in ("curves-cifar10-sym0.2.png", "bars-cifar10-sym0.2.png"):
        assert (out_dir / figure).stat().st_size > 10_000, figure
    return rows


def mtimes(out_dir):
    return {p: p.stat().st_mtime_ns for p in out_dir.rglob("*")
            if p.is_file() and p.suffix in (".pt", ".jsonl")}


# One CPU platform: the other platforms' notebooks run in their image lanes
# (tests/test_image_lanes.py) and their rendered differences in tests/test_builder.py.
@pytest.mark.quick  # make test-quick's notebook of this workload
@pytest.mark.parametrize("platform", ["local"])
def test_study_notebook_runs_the_grid_on_the_cpu(platform, tmp_path):
    nb = run(platform, tmp_path, **GRID)
    rows = check_study(tmp_path / "study")
    text = stream_text(nb)
    # the local notebook is this machine's: it says what it found; the others fall back
    assert ("no CUDA GPU or Apple MPS found: this machine's CPU" if platform == "local"
            else "falls back to the CPU") in text
    assert text.count(": training (lr ") == 4
    check_clean_outputs(nb, max_outputs=4 * len(RUNS))  # a few per run, none per epoch
    assert "**Synthetic sample**" in markdown_outputs(nb)
    # every number and figure made from the sample says so: rows, table, figures
    rows_shown = epoch_lines(nb)
    assert len(rows_shown) == 8 and all("  (synthetic sample)  " in r for r in rows_shown)
    summary = (tmp_path / "study" / "summary.md").read_text()
    assert summary.strip() in markdown_outputs(nb)
    assert summary.count("| cifar10 (synthetic sample) | sym 0.2") == 2, summary
    titles = figure_titles(tmp_path / "study")
    assert set(titles) == {"curves-cifar10-sym0.2.png", "bars-cifar10-sym0.2.png"}, titles
    assert all(t.splitlines()[0].endswith("(synthetic sample)") for t in titles.values()), titles
    assert "study: 3 run(s) left, about" in text and "study: 0 run(s) left" in text
    reported = report_without_torch(tmp_path / "study")  # the grid's own table
    assert "| lion | 2 |" in reported and "4 runs; written:" in reported
    check_report_redraws_only_stale_figures(tmp_path / "study", reported)
    assert {r["lr"] for r in rows if r["optimizer"] == "lion"} == {2e-4}
    for r in rows:
        assert {h["device"] for h in read_jsonl(tmp_path / "study" / r["run"] / "metrics.jsonl")
                } == {"cpu"}


def check_report_redraws_only_stale_figures(study, reported):
    """issue 52: `report` keeps the sample's note in summary.md; a second report, its figures
    current, imports none of torch, matplotlib and scipy and redraws nothing; a run's metrics.jsonl
    newer than a figure gets it redrawn."""
    assert reported.count("| cifar10 (synthetic sample) | sym 0.2") == 2, reported
    assert (study / "summary.md").read_text().count("| cifar10 (synthetic sample) |") == 2
    figures = [study / "curves-all.png", study / "bars-all.png"]
    drawn = {f: f.stat().st_mtime_ns for f in figures}
    # nor scipy (the planner's MILP): each of the three costs `report` its 0.5 s budget
    assert report_without_torch(study, unloaded=("torch", "matplotlib", "scipy")) == reported
    assert {f: f.stat().st_mtime_ns for f in figures} == drawn
    metrics = study / sorted(RUNS)[0] / "metrics.jsonl"
    earlier = metrics.stat().st_mtime - 60  # the figure drawn before a run's record changed
    os.utime(figures[0], (earlier, earlier))
    report_without_torch(study)
    assert figures[0].stat().st_mtime > metrics.stat().st_mtime, "curves-all.png not redrawn"
    assert "(synthetic sample)" in figure_titles(study)["curves-all.png"].splitlines()[0]


def test_a_rerun_retrains_nothing_and_fan_out_runs_merge(tmp_path):
    """Two fan-out invocations (one run each) then the full grid: it trains only the other
    two runs; a second full run trains nothing and changes no checkpoint or history."""
    run("local", tmp_path, out="study", OPTIMIZER="lion", SEED=1)
    run("local", tmp_path, out="study", OPTIMIZER="sgd", SEED=0)
    check_study(tmp_path / "study", runs={"cifar10-lion-seed1-sym0.2", "cifar10-sgd-seed0-sym0.2"})

    text = stream_text(run("local", tmp_path, **GRID))
    assert text.count("finished earlier, skipped") == 2 and text.count(": training (lr ") == 2
    check_study(tmp_path / "study")
    before = mtimes(tmp_path / "study")

    text = stream_text(run("local", tmp_path, **GRID))
    assert text.count("finished earlier, skipped") == 4 and ": training (lr " not in text
    assert mtimes(tmp_path / "study") == before
    check_study(tmp_path / "study")


def test_more_epochs_are_another_study_and_start_afresh_on_request(tmp_path):
    """The warm-up + cosine schedule is laid over EPOCHS, so raising EPOCHS after a finished
    study would change every remaining step's lr: it is refused, naming the run and the
    change, every file of the study as it was, and RESUME = "new" trains the longer study
    beside the old one."""
    import papermill

    one = dict(OPTIMIZERS=["adamw"], SEEDS=[0])
    run("local", tmp_path, EPOCHS=1, **one)
    before = snapshot(tmp_path / "study")
    with pytest.raises(papermill.PapermillExecutionError) as err:
        run("local", tmp_path, EPOCHS=2, **one)
    assert err.value.ename == "ExperimentChanged"
    assert_unchanged(before, tmp_path / "study")  # every file, the grid's and the run's
    assert "cifar10-adamw-seed0-sym0.2' holds a optimizer_study run" in err.value.evalue
    assert "EPOCHS 1 -> 2" in err.value.evalue
    run("local", tmp_path, EPOCHS=2, RESUME="new", **one)
    history = read_jsonl(tmp_path / "study" / "fresh-1" / "cifar10-adamw-seed0-sym0.2" /
                         "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2]
    check_study(tmp_path / "study" / "fresh-1", runs={"cifar10-adamw-seed0-sym0.2"})
    check_study(tmp_path / "study", runs={"cifar10-adamw-seed0-sym0.2"}, epochs=1)
