"""One run, two sessions, two platforms, every tracker: the quickstart's Colab notebook (the
stand-in of tests/fakes/google/colab: Drive, the Secrets panel) trains one epoch of two and its
session ends; the run folder, uploaded as a Kaggle dataset (what `train-anywhere carry
to-kaggle` makes of it), is attached to the Kaggle notebook (KAGGLE_KERNEL_RUN_TYPE=Batch,
tests/fakes/kaggle's UserSecretsClient), which carries it over and trains the second epoch.
No network: W&B logs offline, MLflow goes to a lab's SQLite database (MLFLOW_TRACKING_URI).

The result is one W&B run (read back with W&B's own reader) and one MLflow run (read back with
MlflowClient) holding every epoch once and naming both platforms; each session's row of
sessions.jsonl says what it ran on and how fast, `train-anywhere report` prints the measured
per-platform table; and no secret planted in either platform's store or in the environment is
in any file the two sessions left."""

import contextlib
import io
import json
import os
import shutil
import stat

import matplotlib
import pytest

from lib.cli.main import main
from lib.runs.identity import read_sessions
from lib.runs.records import read_jsonl
from tests.notebook_run import FAKES, check_clean_outputs, execute, stream_text
from tests.test_trackers import mlflow_run, tb_steps, wandb_records

pytestmark = pytest.mark.notebook
PARAMS = dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=2, SMOKE_BATCHES=2,
              TRACKERS=["tensorboard", "wandb", "mlflow"])
# Planted: never to be found in a file the run leaves.
COLAB_SECRETS = {"WANDB_API_KEY": "ta-planted-colab-wandb-5e1f0c77a2"}
KAGGLE_SECRETS = {"WANDB_API_KEY": "ta-planted-kaggle-wandb-93bd1e04f6"}
ENV_SECRETS = {"KAGGLE_KEY": "ta-planted-env-kaggle-key-0f7c21d9", "MLFLOW_TRACKING_TOKEN":
               "ta-planted-env-mlflow-token-6a9e33b1"}
KAGGLE_IMAGE = {"GIT_COMMIT": "4c1d5e9a0b7f2e3d", "BUILD_DATE": "20261112-000000"}


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    root = tmp_path_factory.mktemp("journey")
    stores = root / "stores"  # the platforms' secret stores (the stand-ins read them)
    stores.mkdir()
    (stores / "colab.json").write_text(json.dumps(COLAB_SECRETS))
    (stores / "kaggle.json").write_text(json.dumps(KAGGLE_SECRETS))
    (root / "lab").mkdir()
    (root / "home").mkdir()
    uri = f"sqlite:///{root / 'lab' / 'mlflow.db'}"
    common = {**ENV_SECRETS, "MLFLOW_TRACKING_URI": uri, "MLFLOW_DISABLE_TELEMETRY": "true",
              "DO_NOT_TRACK": "true", "WANDB_BASE_URL": "http://127.0.0.1:9",  # no network
              "HOME": str(root / "home"), "MPLCONFIGDIR": matplotlib.get_configdir()}
    path = os.environ.get("PYTHONPATH", "")
    colab = {**common, "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), path])),
             "COLAB_RELEASE_TAG": "release-colab-test", "TA_COLAB_DRIVE": str(root / "drive"),
             "TA_FAKE_COLAB_LOG": str(stores), "TA_COLAB_CONTENT": str(root / "content"),
             "TA_FAKE_COLAB_SECRETS": str(stores / "colab.json"), "TA_SESSION_EPOCHS": "1"}
    service = os.environ.pop("WANDB_SERVICE", None)  # a service this worker's tests started
    first = execute("fashion_mnist", "colab_t4", root / "nb-colab", env=colab, **PARAMS)
    run1 = root / "drive" / "MyDrive" / "train-anywhere" / "runs" / "fashion_mnist"
    # Its run folder as a Kaggle dataset, attached read-only to the Kaggle notebook.
    attached = root / "kaggle" / "input" / "datasets" / "someone" / "fashion-run"
    shutil.copytree(run1, attached, copy_function=shutil.copyfile)
    for p in [attached, *attached.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    kaggle = {**common, **KAGGLE_IMAGE,
              "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES / "kaggle"), path])),
              "KAGGLE_KERNEL_RUN_TYPE": "Batch", "TA_KAGGLE_ROOT": str(root / "kaggle"),
              "KAGGLE_USER_SECRETS_TOKEN": "a-jwt", "TA_FAKE_KAGGLE_LOG": str(stores),
              "TA_FAKE_KAGGLE_SECRETS": str(stores / "kaggle.json")}
    second = execute("fashion_mnist", "kaggle_t4x2", root / "nb-kaggle", env=kaggle, **PARAMS)
    run2 = root / "kaggle" / "working" / "runs" / "fashion_mnist"
    if service:
        os.environ["WANDB_SERVICE"] = service
    return root, uri, (first, run1), (second, run2)


def test_two_sessions_on_two_platforms_are_one_wandb_run_and_one_mlflow_run(journey):
    root, uri, (first, run1), (second, run2) = journey
    texts = [stream_text(nb) for nb in (first, second)]
    assert "STOPPED" in texts[0] and "carried over the run in" in texts[1]
    assert [r["epoch"] for r in read_jsonl(run2 / "metrics.jsonl")] == [1, 2]
    state = json.loads((run2 / "trackers.json").read_text())
    # W&B: one offline folder per session (the first carried over with the run), one run id,
    # epochs 1 and 2 once each, both platforms on the run; the sync command said in each.
    sessions = wandb_records(run2)
    assert len(sessions) == 2
    steps = [r["history"]["step"]["num"] for s in sessions for r in s if r["type"] == "history"]
    assert steps == [1, 2]
    runs = [r["run"] for s in sessions for r in s if r["type"] == "run"]
    assert {r["run_id"] for r in runs} == {state["wandb"]["id"]}
    assert runs[-1]["tags"] == ["colab_t4", "kaggle_t4x2"]
    config = {k: v for s in sessions for r in s if r["type"] == "config"
              for k, v in r["config"]["update"].items()}
    assert [config[f"session_{n}"]["platform"] for n in (1, 2)] == ["colab_t4", "kaggle_t4x2"]
    assert all(config[f"session_{n}"]["device"] == "cpu" for n in (1, 2))
    for text, folder in zip(texts, (run1, run2), strict=True):
        said = [line for line in text.splitlines() if line.startswith("W&B: offline")]
        assert len(said) == 1 and f"`wandb sync {folder / 'wandb'}`" in said[0], said
    # MLflow, at the lab's database: one run, both epochs once, both platforms.
    client, run = mlflow_run(uri, "fashion_mnist")
    assert run.info.run_id == state["mlflow"]["run_id"]
    history = client.get_metric_history(run.info.run_id, "test_accuracy")
    assert [m.step for m in history] == [1, 2]
    assert run.data.tags["platforms"] == "colab_t4, kaggle_t4x2"
    assert run.data.tags["session.2.platform"] == "kaggle_t4x2"
    assert run.data.params["lr"] == "1.0"
    assert tb_steps(run2) == [1, 2]
    # The clients said nothing of their own: no stderr, no warnings in either notebook.
    for nb in (first, second):
        check_clean_outputs(nb)


def test_no_secret_value_is_in_any_file_the_run_leaves(journey):
    """Planted in Colab's Secrets panel, in Kaggle's secrets and in the environment: none in
    the run folders (checkpoints, tb/, wandb/, sessions.jsonl, trackers.json), the executed
    notebooks, the lab's MLflow database, the data or the home folder the clients wrote to.
    The stores were asked (their logs name the secret, never its value)."""
    root = journey[0]
    planted = [v.encode() for d in (COLAB_SECRETS, KAGGLE_SECRETS, ENV_SECRETS)
               for v in d.values()]
    stores = {root / "stores" / "colab.json", root / "stores" / "kaggle.json"}
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
             and p not in stores]
    assert len(files) > 50 and any(p.suffix == ".wandb" for p in files)
    found = [(str(p), s) for p in files for s in planted if s in p.read_bytes()]
    assert found == []
    calls = [json.loads(line) for line in
             (root / "stores" / "calls.jsonl").read_text().splitlines()]
    asked = {c["call"]: c.get("key", c.get("label")) for c in calls if "secret" in c["call"]
             or c["call"] == "userdata.get"}
    assert asked == {"userdata.get": "WANDB_API_KEY", "get_secret": "WANDB_API_KEY"}


def report(out) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        assert main(["report", str(out)]) == 0
    return text.getvalue()


def test_each_session_records_what_it_ran_on_and_report_shows_the_measured_table(journey):
    root, _, (first, run1), (second, run2) = journey
    rows = read_sessions(run2)
    assert [r["platform"] for r in rows] == ["colab_t4", "kaggle_t4x2"]
    for row in rows:
        for key in ("python", "torch", "torchvision", "torch_xla", "torch_cuda_build",
                    "torch_cudnn_build", "cuda_devices",
                    "accelerator", "accelerator_memory_gb", "project_version", "project_commit",
                    "started_at", "ended_at"):
            assert key in row, key
        assert row["epochs_trained"] == 1 and row["samples_per_s"] > 0
        assert row["seconds_per_epoch"] > 0
    assert rows[0]["image"] == "colab release-colab-test"
    assert rows[1]["image"] == "kaggle docker-python 4c1d5e9a0b7f built 20261112-000000"
    notes = [line for line in stream_text(second).splitlines() if line.startswith("NOTE:")]
    assert len(notes) == 1 and "image colab release-colab-test -> kaggle docker-python" in notes[0]
    # After the Colab session: one epoch left, and what it would take there, measured.
    colab = rows[0]["seconds_per_epoch"]
    from lib.cli.execute import fmt_duration

    # both sessions ran on this CPU as colab_t4 and kaggle_t4x2: a speed of this CPU, named so
    # (issue 59), never a T4's
    here = f"on this CPU ({rows[0]['accelerator']})"
    rate = rows[0]["samples_per_s"]
    rate = f"{rate:.0f}" if rate >= 10 else f"{rate:.2g}"
    assert (f"| colab_t4 {here} | 1 | 1 | {colab:.1f} | {rate} | "
            f"{fmt_duration(colab)} |") in report(run1)
    text = report(run2)
    assert f"| kaggle_t4x2 {here} | 1 | 1 |" in text and text.count("none: finished") == 2
