"""The GPU check's CPU dry run: every part of `python -m bench.gpu_check` runs at tiny sizes, so
the kit cannot rot between GPU runs (each slow check once: the resume part's are the quick
part's, on other workloads). It claims no figures (the output says so); what is
asserted is that every check ran and passed its own criterion on the CPU: the precision
settings' first losses agree, a SIGKILLed run resumes mid-epoch to the same weights as an
uninterrupted one, a checkpoint resumes in a fresh process, compile and the Mamba-Spike
timings produce numbers.
"""

import json
import math

import pytest
import torch

from bench import gpu_check

# minutes of tiny training, compile and kills: not in test-quick
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out, scratch = tmp_path_factory.mktemp("gpu-check"), tmp_path_factory.mktemp("scratch")
    code = gpu_check.main(["--out", str(out), "--part", "all", "--dry-run",
                           "--scratch", str(scratch)])
    return code, json.loads((out / "gpu_check.json").read_text()), \
        (out / "gpu_check.md").read_text(), sorted(p.name for p in scratch.iterdir())


def _rows(results, part, title):
    section = next(s for s in results["parts"][part]["sections"] if s["title"] == title)
    return section["rows"]


def test_every_part_runs_and_passes_on_the_cpu(dry_run):
    code, results, _, left = dry_run
    assert gpu_check.failures(results) == []
    assert code == 0
    assert left == ["data"]  # each part's run folders went once its rows were written
    assert set(results["parts"]) == set(gpu_check.ORDER)
    for part in results["parts"].values():
        for section in part["sections"]:
            assert section["rows"], section["title"]
            assert not any("error" in r for r in section["rows"]), section


def test_the_resume_part_says_the_quick_part_ran_its_checks(dry_run):
    """The dry run runs each slow check once (gpu_check.DRY_ONE): the resume part's two checks
    are the quick part's, on the other workloads, and say so rather than run again."""
    _, results, _, _ = dry_run
    for title in ("kill mid-epoch and resume", "checkpoints across devices"):
        assert [r["workload"] for r in _rows(results, "quick", title)] == ["fashion_mnist"]
        rows = _rows(results, "resume", title)
        assert [r["workload"] for r in rows] == list(gpu_check.RESUME_REST)
        assert all(r["dry_run"] == "not run again: part quick ran this check" for r in rows)


def test_the_output_says_it_is_a_dry_run_and_claims_no_figures(dry_run):
    _, results, md, _ = dry_run
    assert results["environment"]["dry_run"] is True
    assert gpu_check.DRY_NOTE in md and "NO figure" in md
    for name in gpu_check.ORDER:
        assert f"## {name}" in md


def test_every_workload_trains_through_the_notebook_calls_at_both_settings(dry_run):
    _, results, _, _ = dry_run
    rows = _rows(results, "quick", "precision: first steps vs fp32")
    assert {(r["workload"], r["setting"]) for r in rows} == {
        (w, s) for w in gpu_check.WORKLOADS for s in ("fp32", "native", "fp16")}
    # the T4 setting goes through the GradScaler (fp32 compute on the CPU)
    assert all(r["precision"].endswith("GradScaler") for r in rows if r["setting"] == "fp16")
    long = _rows(results, "train", "a few hundred steps")
    assert {r["workload"] for r in long} == set(gpu_check.WORKLOADS)
    assert all(r["steps"] >= 2 and math.isfinite(r["last_epoch_loss"]) for r in long)


def test_a_killed_run_resumes_mid_epoch_to_the_uninterrupted_weights(dry_run):
    _, results, _, _ = dry_run
    (row,) = _rows(results, "quick", "kill mid-epoch and resume")
    assert row["killed_returncode"] == -9  # SIGKILL through lib.base.faults
    assert row["resumed_steps"] == row["expected_steps"] < row["steps"]
    assert row["identical"] and row["same_metrics"]


def test_mamba_figures_come_from_every_scan_and_both_steps(dry_run):
    _, results, _, _ = dry_run
    (scan,) = _rows(results, "mamba", "Mamba-Spike scans")
    for name in ("parallel (ours)", "radix2 (round five)", "loop_unbind", "loop_indexed",
                 "mambapy"):
        assert isinstance(scan[f"{name} ms"], float)
    assert scan["parallel (ours) max diff"] < 1e-4
    steps = _rows(results, "mamba", "Mamba-Spike training step: round five vs now")
    # both precisions and both variants, each with a time and an epoch figure (numbers of a
    # dry run: only that they were measured is asserted)
    assert {(r["precision"], r["variant"]) for r in steps} == {
        (p, v) for p in ("fp16", "bf16") for v in ("round five", "now")}
    assert all(r["step_ms"] > 0 and math.isfinite(r["nmnist_epoch_min"]) for r in steps)


def test_without_a_gpu_the_real_run_refuses_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--dry-run" in err


def test_a_failed_check_is_named_and_fails_the_command():
    results = {"parts": {"quick": {"sections": [
        {"title": "kill mid-epoch and resume", "rows": [{"workload": "mshnet", "ok": False}]}]}}}
    assert gpu_check.failures(results) == ["quick / kill mid-epoch and resume / mshnet"]


def test_the_wheels_are_what_the_image_lacks_and_never_torch():
    from bench import gpu_wheels

    pins = gpu_wheels.needed("3.12")
    assert {"snntorch", "tonic", "mambapy", "papermill", "nbclient"} <= set(pins)
    assert not {"torch", "numpy", "einops", "h5py", "triton"} & set(pins)
    assert all(version[0].isdigit() for version in pins.values())
