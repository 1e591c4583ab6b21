"""A speed is a measurement of something (issue 59): `train-anywhere plan` on what real runs
leave. One SMOKE run of Fashion-MNIST on the sample, trained by the real code (lib.session and
the workload's `train`, as its notebook calls them), one epoch as `local`, then continued as
`colab_t4` on this same CPU: its sessions are this CPU's speed of the SMOKE model, never a
Colab T4's, and never the real model's."""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from lib.cli.main import main
from lib.cli.plan.speeds import cpu_here
from tests.test_plan import cli

START = "2026-12-01T09:00"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The run folder: session 1 as `local` (EPOCHS 1), session 2 as `colab_t4` (EPOCHS 2),
    both SMOKE on the sample, on this CPU (about 3 s)."""
    from lib import session
    from lib.workloads.fashion_mnist import FashionConfig, train

    root = tmp_path_factory.mktemp("speeds")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("TA_CPU_DEVICES", "KAGGLE_KERNEL_RUN_TYPE", "COLAB_RELEASE_TAG"):
            mp.delenv(name, raising=False)
        for platform, epochs in (("local", 1), ("colab_t4", 2)):
            cfg = FashionConfig(platform=platform, device="cpu", epochs=epochs, smoke=True,
                                sample_data=True, data_dir=str(root / "data"),
                                out_dir=str(root / "run"))
            train(session.start(cfg, runtime="local", announce=False))
    return root / "run"


def rows_of(folder):
    return [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines()]


def test_each_session_records_its_device_and_what_it_timed(smoke_run):
    rows = rows_of(smoke_run)
    assert [r["platform"] for r in rows] == ["local", "colab_t4"]
    for row in rows:
        assert (row["device"], row["accelerator"], row["devices"], row["precision"]) == (
            "cpu", cpu_here(), 1, "fp32")
        timed = row["timed"]
        assert timed["workload"] == "fashion_mnist" and timed["smoke"] is True
        assert timed["sample_data"] is True and timed["global_batch"] == row["global_batch"]
        assert timed["model"]["image_size"] == 28 and timed["model"]["width"] > 0


def test_a_session_continued_here_as_colab_is_this_cpus_speed_not_a_t4s(smoke_run, tmp_path):
    rows = rows_of(smoke_run)
    rc, out, err = cli("fashion_mnist", "-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True",
                       "-p", "EPOCHS", "4", "--measured", str(smoke_run.parent), "--platforms",
                       "colab_t4,local", "--no-kaggle-client", "--start", START, "--out",
                       str(tmp_path), "--json")
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["speeds"]["colab_t4"]["kind"] == "unmeasured"
    local = plan["speeds"]["local"]
    assert local["kind"] == "measured"
    assert f"2 session(s), 2 epoch(s) on this CPU ({cpu_here()}) (run as colab_t4, local)" in \
        local["source"]
    weighted = sum(r["seconds_per_epoch"] * r["epochs_trained"] for r in rows) / 2
    assert local["seconds_per_epoch"] == pytest.approx(weighted)
    assert {s["platform"] for s in plan["sessions"]} == {"local"}


def test_the_run_folder_planned_on_colab_and_kaggle_names_the_cpu_it_ran_on(smoke_run,
                                                                            tmp_path):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    rows = rows_of(run)
    rows[-1]["epochs"] = 5  # EPOCHS 5: 3 epochs left
    (run / "sessions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, out, err = cli(str(run), "--platforms", "colab_t4,kaggle_t4x2", "--no-kaggle-client",
                       "--start", START, "--out", str(tmp_path / "p"))
    assert rc == 2 and err.count("\n") == 1, err
    assert "no platform has a speed for" in err
    assert "  colab_t4: unmeasured (measure it: train-anywhere sweep fashion_mnist --on colab" \
        in out
    assert f"not counted for any platform planned: this CPU ({cpu_here()})" in out
    rc, out, err = cli(str(run), "--no-kaggle-client", "--start", START, "--json", "--out",
                       str(tmp_path / "p"))
    assert rc == 0, err
    plan = json.loads(out)
    measured = sorted(n for n, s in plan["speeds"].items() if s["kind"] == "measured")
    assert measured == ["local"] and plan["runs"] == {".": 3}


def test_a_smoke_run_is_never_the_real_models_speed(smoke_run, tmp_path):
    rc, out, err = cli("fashion_mnist", "-p", "EPOCHS", "4", "--measured",
                       str(smoke_run.parent), "--no-kaggle-client", "--start", START, "--out",
                       str(tmp_path))
    assert rc == 2 and err.count("\n") == 1, err
    assert "measure it here first (a few real-size steps, minutes): train-anywhere measure " \
           "fashion_mnist" in err
    assert "  local: unmeasured (measure it: train-anywhere measure fashion_mnist" in out
    assert "this CPU" not in out  # the SMOKE model's sessions are no speed of this one


def test_a_fresh_clone_names_each_figure_or_the_command_that_measures_it(tmp_path):
    """No sessions anywhere: every platform says it is unmeasured and how to measure it;
    the error is the one command that measures the real model here."""
    rc, out, err = cli("mamba_spike", "-p", "EPOCHS", "20", "--measured", str(tmp_path),
                       "--no-kaggle-client", "--out", str(tmp_path / "p"))
    assert rc == 2 and err.count("\n") == 1, err
    assert err.strip().endswith("train-anywhere measure mamba_spike -p SAMPLE_DATA True")
    assert "  local: unmeasured (measure it: train-anywhere measure mamba_spike" in out
    assert "  the project's H100 figure: 3125.0 s an epoch, for a machine of yours with one " \
           "(--quotas FILE" in out
    assert "  kaggle_t4x2: unmeasured (measure it: train-anywhere sweep mamba_spike --on " \
           "kaggle --platform kaggle_t4x2 --grid SEED=0 -p SAMPLE_DATA True -p EPOCHS 3" in out
    # The project's H100 figure says what it measured and that it predates the fused front-end.
    mine = tmp_path / "h100.toml"
    mine.write_text('[platforms.lab]\naccelerator = "H100"\n')
    rc, out, err = cli("mamba_spike", "-p", "EPOCHS", "2", "--quotas", str(mine), "--platforms",
                       "lab", "--measured", str(tmp_path), "--no-kaggle-client", "--json",
                       "--out", str(tmp_path / "p"))
    assert rc == 0, err
    source = json.loads(out)["speeds"]["lab"]["source"]
    assert "measured before the fused front-end of issue 50" in source
    assert "the real Mamba-Spike on N-MNIST-size input, T = 300, batch 16" in source
    rc, _, err = cli("mamba_spike", "-p", "EPOCHS", "2", "-p", "DATASET", "dvsgesture",
                     "--quotas", str(mine), "--platforms", "lab", "--measured", str(tmp_path),
                     "--no-kaggle-client", "--out", str(tmp_path / "p"))
    assert rc == 2 and "no platform has a speed" in err  # N-MNIST's figure: not DVS Gesture's


def test_measure_times_real_steps_here_and_plan_then_plans(smoke_run, tmp_path):
    """`measure` on the sample (the real model: SMOKE refused), then `plan` reads it: as it is
    for the sample, scaled by samples per epoch for the full dataset."""
    out, err = io.StringIO(), io.StringIO()
    data = smoke_run.parent / "data"
    args = ["measure", "fashion_mnist", "-p", "SAMPLE_DATA", "True", "-p", "DATA_DIR",
            str(data), "--steps", "2", "--warmup", "1", "--out", str(tmp_path / "speed-local")]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(args) == 0, err.getvalue()
        assert main([*args[:2], "-p", "SMOKE", "True"]) == 2
    assert "measure times the real model: SMOKE trains a smaller one" in err.getvalue()
    said = out.getvalue()
    assert "over 2 steps after 1 warm-up steps" in said and "on the sample" in said
    (row,) = rows_of(tmp_path / "speed-local")
    assert (row["measured_steps"], row["warmup_steps"], row["epochs_trained"]) == (2, 1, 0)
    assert row["timed"]["smoke"] is False and row["timed"]["sample_data"] is True
    assert row["seconds_per_epoch"] == pytest.approx(row["epoch_samples"] / row["samples_per_s"],
                                                     rel=1e-3)
    for params, seconds in ([["-p", "SAMPLE_DATA", "True"], row["seconds_per_epoch"]],
                            [[], 60000 / row["samples_per_s"]]):
        rc, text, err = cli("fashion_mnist", *params, "-p", "EPOCHS", "3", "--measured",
                            str(tmp_path), "--platforms", "local", "--no-kaggle-client",
                            "--json", "--out", str(tmp_path / "p"))
        assert rc == 0, err
        local = json.loads(text)["speeds"]["local"]
        assert local["seconds_per_epoch"] == pytest.approx(seconds, rel=1e-3)
        assert "2 real-size step(s) after warm-up (train-anywhere measure)" in local["source"]


def test_report_names_the_device_a_session_ran_on_beside_the_platform_it_ran_as(smoke_run):
    from lib.cli.speed import per_platform
    from lib.runs.identity import timed_sessions

    names = sorted(per_platform(timed_sessions(smoke_run)))
    assert names == [f"colab_t4 on this CPU ({cpu_here()})", "local"]


def test_reports_table_shows_a_slow_real_models_rate_not_zero(smoke_run, tmp_path):
    """A real model's sample epoch on a CPU runs at a fraction of a sample a second: the
    report's samples/s column says 0.3, never 0 (issue 60's `0 samples/s`)."""
    from lib.cli.speed import table

    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    rows = rows_of(run)
    for row in rows:
        row["samples_per_s"] = 0.3
    (run / "sessions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    body = [line.split("|") for line in table(run).splitlines() if line.startswith("| local")]
    assert body and body[0][5].strip() == "0.3", table(run)


def test_measure_says_a_missing_dataset_in_one_line_from_its_own_process(tmp_path, capfd):
    """The steps run in a process of their own (the command line loads no session): a user's
    mistake there is still the command's one line and exit 2, and nothing is recorded."""
    missing = tmp_path / "no-such-data"
    rc = main(["measure", "fashion_mnist", "-p", "DATA_DIR", str(missing), "--steps", "1",
               "--out", str(tmp_path / "speed")])
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("train-anywhere measure: ") and str(missing) in err[0], err
    assert not (tmp_path / "speed" / "sessions.jsonl").exists()
