"""Study bookkeeping: run folders, markers, results.csv merging, summary, figures."""

from __future__ import annotations

import json
import math
import multiprocessing as mp

import matplotlib
import numpy as np
import pytest

from lib.runs.records import read_jsonl
from lib.study.figures import curve_stats, report
from lib.study.grid import (
    RESULTS,
    GridCell,
    collect_results,
    finish_run,
    format_summary,
    is_finished,
    merge_rows,
    plan_runs,
    read_results,
    run_result,
    run_status,
    summarise,
    write_results,
)


def _history(accs, seconds=10.0):
    return [{"epoch": i + 1, "train_loss": 2.0 / (i + 1), "test_accuracy": a,
             "seconds": seconds} for i, a in enumerate(accs)]


def _fake_run(out_dir, spec, accs, seconds=10.0):
    """What the notebook does for one run: fit writes metrics.jsonl, then finish_run."""
    history = _history(accs, seconds)
    spec.dir(out_dir).mkdir(parents=True, exist_ok=True)
    (spec.dir(out_dir) / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in history))
    history = read_jsonl(spec.dir(out_dir) / "metrics.jsonl")
    return finish_run(out_dir, spec, history, realised_noise=0.198,
                      lr=0.1, weight_decay=5e-4)


def test_plan_names_one_folder_per_optimizer_seed_and_noise():
    specs = plan_runs("cifar10", ["sgd", "lion", "sgd"], [0, 1, 1], 0.2)
    assert [s.name for s in specs] == ["cifar10-sgd-seed0-sym0.2", "cifar10-sgd-seed1-sym0.2",
                                       "cifar10-lion-seed0-sym0.2", "cifar10-lion-seed1-sym0.2"]
    assert GridCell("cifar100", "adamw", 2, 0.4, "asymmetric").name == \
        "cifar100-adamw-seed2-asym0.4"
    assert GridCell("cifar10", "adam", 0, 0.0).setting == "cifar10-sym0"


def test_run_result_takes_best_final_and_summed_time():
    spec = GridCell("cifar10", "sgd", 0, 0.2)
    row = run_result(spec, _history([0.3, 0.7, float("nan"), 0.6], seconds=15.0),
                     realised_noise=0.21, lr=0.1, weight_decay=5e-4)
    assert (row["best_test_accuracy"], row["best_epoch"]) == (0.7, 2)
    assert row["final_test_accuracy"] == 0.6 and row["epochs"] == 4
    assert row["wall_time_s"] == 60.0 and row["run"] == spec.name
    with pytest.raises(ValueError, match="acc_key"):
        run_result(spec, [{"epoch": 1, "val_acc": 0.5}], realised_noise=0, lr=1,
                   weight_decay=0)


def test_the_metrics_reader_keeps_the_last_record_of_a_repeated_epoch(tmp_path):
    lines = [{"epoch": 1, "test_accuracy": 0.1}, {"epoch": 2, "test_accuracy": 0.2},
             {"epoch": 2, "test_accuracy": 0.25}]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines) + '{"epoch": 3, "test_acc')
    assert [r["test_accuracy"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0.1, 0.25]
    assert read_jsonl(tmp_path / "missing" / "metrics.jsonl") == []


def test_status_goes_new_partial_finished(tmp_path):
    spec = GridCell("cifar10", "adamw", 0, 0.2)
    run_dir = spec.dir(tmp_path)
    assert run_status(run_dir) == "new"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt-e1-b0.pt").write_bytes(b"x")
    assert run_status(run_dir) == "partial" and not is_finished(run_dir)
    _fake_run(tmp_path, spec, [0.5, 0.6])
    assert run_status(run_dir) == "finished" and is_finished(run_dir, epochs=2)
    assert not is_finished(run_dir, epochs=3)  # a longer run was asked for: resume it


def test_collect_is_idempotent_and_keeps_rows_from_elsewhere(tmp_path):
    a = GridCell("cifar10", "sgd", 0, 0.2)
    _fake_run(tmp_path, a, [0.5, 0.6])
    first = (tmp_path / RESULTS).read_bytes()
    assert collect_results(tmp_path) == read_results(tmp_path / RESULTS)
    assert (tmp_path / RESULTS).read_bytes() == first  # collecting twice changes nothing
    # A row collected on another machine (its folder is not here) survives a collect,
    # and a rerun of the same run replaces its row instead of adding one.
    foreign = {**read_results(tmp_path / RESULTS)[0], "seed": 7, "run": "elsewhere"}
    write_results(tmp_path / RESULTS, merge_rows(read_results(tmp_path / RESULTS), [foreign]))
    _fake_run(tmp_path, a, [0.5, 0.9])
    rows = collect_results(tmp_path)
    assert [(r["seed"], r["best_test_accuracy"]) for r in rows] == [(0, 0.9), (7, 0.6)]
    assert rows[0]["seed"] == 0 and isinstance(rows[0]["wall_time_s"], float)


def _one_invocation(out_dir, optimizer, seed, barrier):
    barrier.wait()  # all processes finish at the same moment: the worst case for the csv
    _fake_run(out_dir, GridCell("cifar10", optimizer, seed, 0.2), [0.4, 0.5 + seed / 10])


def test_separate_processes_each_finishing_one_run_end_in_one_table(tmp_path):
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    grid = [("sgd", 0), ("sgd", 1), ("lion", 0), ("lion", 1)]
    barrier = ctx.Barrier(len(grid))
    procs = [ctx.Process(target=_one_invocation, args=(tmp_path, o, s, barrier))
             for o, s in grid]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    rows = read_results(tmp_path / RESULTS)
    assert [(r["optimizer"], r["seed"]) for r in rows] == grid


def test_summary_is_mean_and_sample_std_over_seeds():
    rows = [{"dataset": "cifar10", "optimizer": o, "seed": s, "noise_mode": "symmetric",
             "label_noise": 0.2, "realised_noise": 0.2, "best_test_accuracy": b,
             "final_test_accuracy": b - 0.01, "epochs": 3, "wall_time_s": 120.0}
            for o, s, b in [("lion", 0, 0.80), ("sgd", 1, 0.90), ("sgd", 0, 0.80),
                            ("sgd", 2, 0.85)]]
    summary = summarise(rows)
    assert [s["optimizer"] for s in summary] == ["sgd", "lion"]  # table order, not arrival
    sgd, lion = summary
    assert sgd["n_seeds"] == 3 and sgd["seeds"] == [0, 1, 2]
    assert sgd["best_mean"] == pytest.approx(0.85) and sgd["best_std"] == pytest.approx(0.05)
    assert lion["n_seeds"] == 1 and math.isnan(lion["best_std"])
    table = format_summary(summary)
    assert "| sgd | 3 | 85.00 ± 5.00 | 84.00 ± 5.00 |" in table
    assert "| lion | 1 | 80.00 | 79.00 |" in table
    assert "| cifar10 | sym 0.2" in table and "synthetic" not in table
    assert format_summary(summary, sample=True).count("| cifar10 (synthetic sample) | sym") == 2


def test_curve_band_is_mean_and_std_over_seeds():
    epochs, mean, std = curve_stats([_history([0.2, 0.4]), _history([0.4, 0.8, 0.9])],
                                    "test_accuracy")
    assert epochs.tolist() == [1, 2]  # only epochs every seed has
    assert np.allclose(mean, [0.3, 0.6]) and np.allclose(std, [0.1414214, 0.2828427])


def test_report_writes_results_summary_and_figures(tmp_path):
    for opt, seed, accs in [("sgd", 0, [0.3, 0.6]), ("sgd", 1, [0.4, 0.7]),
                            ("lion", 0, [0.2, 0.5]), ("lion", 1, [0.3, 0.5])]:
        _fake_run(tmp_path, GridCell("cifar10", opt, seed, 0.2), accs)
    _fake_run(tmp_path, GridCell("cifar10", "sgd", 0, 0.4), [0.2, 0.3])  # another setting
    rep = report(tmp_path, "cifar10", "symmetric", 0.2)
    assert len(rep.rows) == 4 and len(rep.summary) == 3
    assert (tmp_path / "curves-cifar10-sym0.2.png").stat().st_size > 5000
    assert (tmp_path / "bars-cifar10-sym0.2.png").stat().st_size > 5000
    assert "65.00 ± 7.07" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "summary.csv").read_text().count("\n") == 4
    assert isinstance(rep.figures["curves"], matplotlib.figure.Figure)
    ax = rep.figures["curves"].axes[0]
    assert [line.get_label() for line in ax.lines] == ["sgd (2 seeds)", "lion (2 seeds)"]
    assert np.allclose(ax.lines[0].get_ydata(), [35.0, 65.0])  # percent
    assert len(ax.collections) == 2  # one band per optimizer
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "band: mean ± 1 std over seeds", legend
    bars = rep.figures["bars"].axes[0]
    assert "whisker: ± 1 std over seeds" in [t.get_text() for t in bars.get_legend().get_texts()]
    assert "synthetic" not in bars.get_title()
    sample = report(tmp_path, "cifar10", "symmetric", 0.2, sample=True)
    assert sample.figures["bars"].axes[0].get_title().endswith("(synthetic sample)")
    assert sample.figures["curves"].get_suptitle().endswith("(synthetic sample)")
    assert "| cifar10 (synthetic sample) |" in (tmp_path / "summary.md").read_text()
    with pytest.raises(ValueError, match="no finished run"):
        report(tmp_path, "cifar100", "symmetric", 0.2)
