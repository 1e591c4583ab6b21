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

START = "2026-12-01T09:00"


def cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", *args])
    return rc, out.getvalue(), err.getvalue()


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
