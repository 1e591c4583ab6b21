"""Trackers (lib/runs/trackers.py) on the toy loop of tests/test_train.py, in this process: two
sessions are one W&B run (offline, read back with W&B's own reader) and one MLflow run (its
SQLite store in the run folder, read back with MlflowClient) with every epoch once; steps never
repeat when a session resumes behind its tracker or the run folder lost trackers.json; a
missing client or token, or a tracker failing, is one line and training completes."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from lib.base.errors import ConfigError
from lib.runs import trackers
from lib.runs.folder import RunFolder
from lib.training.loop import fit
from lib.workloads.fashion_mnist import FashionConfig
from tests.test_train import CPU, loaders, make_task

ALL = ["tensorboard", "wandb", "mlflow"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No network, no key, no telemetry: W&B offline, MLflow in the run folder."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "MLFLOW_TRACKING_URI", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    yield
    # wandb points the processes this one starts (notebook kernels) at its own service: a
    # later test's kernel would log through it, its logs in this test's folder
    os.environ.pop("WANDB_SERVICE", None)


def session(out, platform, epochs, names=ALL, capsys=None):
    """One session of the toy run in `out` on `platform`; (history, the lines it said)."""
    run = RunFolder(out, "toy", {"hidden": 16}, progress=False, trackers=names,
                    session={"platform": platform, "device": "cpu", "precision": "fp32",
                             "epochs": epochs})
    history = fit(make_task(), *loaders(), CPU, run, epochs)
    run.close()
    said = capsys.readouterr().out.splitlines() if capsys else []
    return history, said


def wandb_records(out) -> list[list[dict]]:
    """Each session's offline W&B file, read by W&B's own reader (`wandb leet inspect`)."""
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    return [[json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(f)], check=True,
        capture_output=True, text=True).stdout.splitlines()] for f in files]


def mlflow_run(uri, workload="toy"):
    """(client, the one run of the workload's experiment) at `uri`, read by MlflowClient."""
    from mlflow.tracking import MlflowClient

    with warnings.catch_warnings():  # sqlalchemy's deprecations of MLflow's own mappers
        warnings.simplefilter("ignore")
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(f"train-anywhere-{workload}")
        (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def tb_steps(out, tag="train_loss") -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


@pytest.mark.slow  # MLflow creates its SQLite schema (~10 s): `make test`, not test-quick
def test_two_sessions_on_two_platforms_are_one_run_in_each_tracker(tmp_path, capsys):
    out = tmp_path / "run"
    _, first = session(out, "colab_t4", 2, capsys=capsys)
    _, second = session(out, "kaggle_t4x2", 3, capsys=capsys)
    state = json.loads((out / "trackers.json").read_text())
    # W&B, offline: one folder per session, one run id, every epoch once, both platforms.
    sessions = wandb_records(out)
    assert len(sessions) == 2
    steps = [r["history"]["step"]["num"] for s in sessions for r in s if r["type"] == "history"]
    assert steps == [1, 2, 3]
    runs = [r["run"] for s in sessions for r in s if r["type"] == "run"]
    assert {r["run_id"] for r in runs} == {state["wandb"]["id"]}
    assert set(runs[-1]["tags"]) == {"colab_t4", "kaggle_t4x2"}
    configs = {k: v for s in sessions for r in s if r["type"] == "config"
               for k, v in r["config"]["update"].items()}
    assert (configs["session_1"]["platform"], configs["session_2"]["platform"]) == (
        "colab_t4", "kaggle_t4x2")
    assert configs["session_2"]["device"] == "cpu" and configs["session_2"]["from_epoch"] == 3
    offline = [line for line in first + second if line.startswith("W&B: offline")]
    assert len(offline) == 2 and all(f"`wandb sync {out / 'wandb'}`" in line for line in offline)
    assert not [p for p in (out / "wandb").rglob("*") if p.is_symlink()]  # copies work
    # MLflow, at the run folder's own SQLite database: one run, every epoch once.
    client, run = mlflow_run(f"sqlite:///{out}/mlflow.db")
    assert run.info.run_id == state["mlflow"]["run_id"] and run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == [1, 2, 3]
    # Each session ends naming the store and how to look at it, as TensorBoard's "view with"
    ends = [line for line in first + second if line.startswith("MLflow: run ")]
    uri = f"sqlite:///{out}/mlflow.db"
    assert ends == [f"MLflow: run {run.info.run_id} in {uri}  (view with: mlflow ui "
                    f"--backend-store-uri {uri}, from the full `pip install mlflow`: the "
                    "mlflow-skinny installed here has no UI)"] * 2
    tags = run.data.tags
    assert tags["platforms"] == "colab_t4, kaggle_t4x2"
    assert (tags["session.1.platform"], tags["session.2.platform"]) == ("colab_t4", "kaggle_t4x2")
    # TensorBoard, in tb/: the same epochs as scalars.
    assert tb_steps(out) == [1, 2, 3]
    # Every checkpoint carries the run ids and the epochs each tracker had at its save
    # (epoch 3's checkpoint: 2, epoch 3 is sent after it).
    newest = sorted((out / "checkpoints").glob("ckpt-*.pt"))[-1]
    kept = torch.load(newest, weights_only=True)["trackers"]
    assert kept == {"wandb": {"id": state["wandb"]["id"], "project": "train-anywhere",
                              "step": 2},
                    "mlflow": {"run_id": run.info.run_id, "tracking_uri": f"sqlite:///{out}/"
                               "mlflow.db", "step": 2}}


class Recording(trackers.Tracker):
    """A tracker that writes down the epochs it gets, per session (in place of W&B)."""

    name, title = "wandb", "W&B"
    sessions: list[list[int]] = []
    fail_at: int | None = None
    tells = False  # whether it can say what it holds (W&B cannot)

    def open(self, folder, facts, kept):
        type(self).sessions.append([])
        return {"id": kept.get("id") or f"run-of-{facts['platform']}"}, None

    def log(self, epoch, numbers):
        if epoch == type(self).fail_at:
            raise ConnectionError("the service went away")
        type(self).sessions[-1].append(epoch)

    def held(self, saved):
        return max(sum(type(self).sessions, []), default=0) if type(self).tells else saved


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setattr(Recording, "sessions", [])
    monkeypatch.setattr(Recording, "fail_at", None)
    monkeypatch.setattr(Recording, "tells", False)
    monkeypatch.setitem(trackers.KINDS, "wandb", Recording)
    return Recording


def test_a_session_resumed_behind_its_tracker_repeats_no_step(tmp_path, capsys, recording):
    """The newest checkpoint lost: the run goes back to epoch 2, the tracker has 3."""
    out = tmp_path / "run"
    session(out, "colab_t4", 3, names=["wandb"])
    for lost in (out / "checkpoints").glob("ckpt-e0003-*"):
        lost.unlink()
    history, said = session(out, "kaggle_p100", 4, names=["wandb"], capsys=capsys)
    assert [r["epoch"] for r in history] == [1, 2, 3, 4]
    assert recording.sessions == [[1, 2, 3], [4]]
    assert [line for line in said if "already has epochs up to 3" in line] == [
        "W&B already has epochs up to 3, logged before the checkpoint this session resumed "
        "from (epoch 2); it gets epochs after 3 only, so no step repeats"]


def test_an_epoch_the_tracker_missed_is_sent_by_the_next_session(tmp_path, recording):
    """Killed between epoch 2's checkpoint and its log (trackers.json says 1): the next
    session sends epoch 2 first."""
    out = tmp_path / "run"
    session(out, "colab_t4", 2, names=["wandb"])
    state = json.loads((out / "trackers.json").read_text())
    (out / "trackers.json").write_text(json.dumps({"wandb": dict(state["wandb"], step=1)}))
    session(out, "colab_t4", 3, names=["wandb"])
    assert recording.sessions == [[1, 2], [2, 3]]


@pytest.mark.parametrize("tells, sent", [(True, [[1, 2], [3]]), (False, [[1, 2], [2, 3]])])
def test_without_trackers_json_the_checkpoint_keeps_the_tracker_run(tmp_path, recording,
                                                                     tells, sent):
    """The checkpoint of epoch 2 was saved before epoch 2 reached the tracker: a tracker
    that can say what it holds gets epoch 3 only; one that cannot (W&B) gets epoch 2 again
    rather than never (the same numbers, at the same step)."""
    recording.tells = tells
    out = tmp_path / "run"
    session(out, "colab_t4", 2, names=["wandb"])
    (out / "trackers.json").unlink()  # a copy of the run that left it behind
    session(out, "kaggle_t4x2", 3, names=["wandb"])
    assert recording.sessions == sent
    assert json.loads((out / "trackers.json").read_text())["wandb"] == {
        "id": "run-of-colab_t4", "step": 3}


@pytest.mark.slow  # MLflow creates its SQLite schema (~4 s of CPU)
def test_a_kill_between_checkpoint_and_trackers_then_a_carry_of_checkpoints_loses_no_epoch(
        tmp_path, monkeypatch):
    """SIGKILLed (failpoint trackers.log) after epoch 2's checkpoint, before MLflow got
    epoch 2; the run carried on with only checkpoints/ (trackers.json left behind): the next
    session sends epoch 2, then 3. Carried so again, not killed: epoch 4 only. MLflow is a
    tracking server here (outside the run folder): every epoch once, in one run."""
    import shutil
    import signal

    uri = f"sqlite:///{tmp_path / 'lab.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "run"
    code = ("from pathlib import Path\nfrom tests.test_trackers import session\n"
            f"session(Path({str(out)!r}), 'colab_t4', 3, names=['mlflow'])")
    killed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                         "TA_FAILPOINTS": "trackers.log@2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]

    def steps():
        client, run = mlflow_run(uri)
        return [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]

    assert steps() == [1]  # epoch 2 checkpointed, not logged
    for carried, epochs in (("carried", 3), ("carried-again", 4)):
        shutil.copytree(out / "checkpoints", tmp_path / carried / "checkpoints")
        out = tmp_path / carried
        session(out, "kaggle_p100", epochs, names=["mlflow"])
    assert steps() == [1, 2, 3, 4]


def test_a_tracker_that_fails_is_one_line_and_training_goes_on(tmp_path, capsys, recording):
    recording.fail_at = 2
    history, said = session(tmp_path / "run", "colab_t4", 3, names=["wandb", "tensorboard"],
                            capsys=capsys)
    assert [r["epoch"] for r in history] == [1, 2, 3] and recording.sessions == [[1]]
    assert [line for line in said if line.startswith("W&B")] == [
        "W&B: logging epoch 2 failed (ConnectionError: the service went away); the rest of "
        "this session goes on without it."]
    assert tb_steps(tmp_path / "run") == [1, 2, 3]


def test_only_the_main_process_logs(tmp_path, recording):
    """A DDP or TPU worker's run folder opens no tracker and writes no tracker file."""
    run = RunFolder(tmp_path / "run", "toy", {}, main=False, progress=False, trackers=ALL,
                    session={"platform": "kaggle_t4x2", "device": "cuda", "epochs": 1})
    run.begin([], 0)
    run.record_session(0)
    run.end_epoch({"epoch": 1, "seconds": 1.0, "samples_per_s": 1.0, "train_loss": 1.0}, 1,
                  run.progress(1))
    run.close()
    assert recording.sessions == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("case, expected", [
    ("wandb client", "W&B: its client is not installed here: `pip install wandb`"),
    ("mlflow client", "MLflow: its client is not installed here: `pip install mlflow-skinny "
                      "sqlalchemy alembic`"),
    ("wandb key", "W&B: no API key here: add an environment variable WANDB_API_KEY"),
])
def test_a_missing_client_or_token_is_one_line_and_training_completes(
        tmp_path, capsys, monkeypatch, case, expected):
    if case.endswith("client"):  # the client cannot be imported
        monkeypatch.setitem(sys.modules, case.split()[0], None)
        names = ["tensorboard", case.split()[0]]
    else:  # W&B is reachable, but no key anywhere
        monkeypatch.setattr(trackers, "reachable", lambda url, timeout=3.0: True)
        names = ["tensorboard", "wandb"]
    history, said = session(tmp_path / "run", "local", 2, names=names, capsys=capsys)
    assert [r["epoch"] for r in history] == [1, 2]
    title = expected.split(":")[0]
    lines = [line for line in said if line.startswith(title)]
    assert len(lines) == 1 and lines[0].startswith(expected), said
    assert lines[0].endswith(f"training goes on without {title}.")
    assert tb_steps(tmp_path / "run") == [1, 2]


def test_wandb_logs_offline_where_told_or_without_network_online_with_a_key(monkeypatch):
    w = trackers.WandB()
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert w.mode() == ("offline", None, "WANDB_MODE=offline")
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert w.mode() == ("offline", None, "no network to 127.0.0.1")  # the fixture's address
    monkeypatch.setattr(trackers, "reachable", lambda url, timeout=3.0: True)
    assert w.mode() == ("online", "k" * 40, "online")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.raises(trackers.Unavailable, match="WANDB_MODE=disabled"):
        w.mode()


TOKEN = "tok3n-Pl4nted"


@pytest.mark.parametrize("uri, said", [
    ("https://me:s3cret@mlflow.lab.org/", "https://***@mlflow.lab.org/"),
    (f"https://me:{TOKEN}@mlflow.lab.org:5000/api", "https://***@mlflow.lab.org:5000/api"),
    (f"https://me:p@ss/{TOKEN}@mlflow.lab.org/", "https://***@mlflow.lab.org/"),  # "@", "/"
    (f"https://{TOKEN}@mlflow.lab.org", "https://***@mlflow.lab.org"),  # a token as the user
    (f"https://mlflow.lab.org/?token={TOKEN}", "https://mlflow.lab.org/?token=***"),
    (f"https://mlflow.lab.org/x?run=3&access_token={TOKEN}&page=2",
     "https://mlflow.lab.org/x?run=3&access_token=***&page=2"),
    (f"http://h:8080/?api_key={TOKEN}", "http://h:8080/?api_key=***"),
    (f"http://h/?apiKey={TOKEN}&X-Amz-Signature={TOKEN}2",
     "http://h/?apiKey=***&X-Amz-Signature=***"),
    (f"https://acct.blob.core.windows.net/c?sv=2024&sig={TOKEN}", "https://acct.blob.core."
     "windows.net/c?sv=2024&sig=***"),
    (f"https://h/#access_token={TOKEN}&state=1", "https://h/#access_token=***&state=1"),
    (f"postgresql://u:{TOKEN}@db:5432/mlflow?password={TOKEN}&sslmode=require",
     "postgresql://***@db:5432/mlflow?password=***&sslmode=require"),
    (f"databricks://profile?client_secret={TOKEN}", "databricks://profile?client_secret=***"),
    ("sqlite:////runs/x/mlflow.db", "sqlite:////runs/x/mlflow.db"),
    ("file:///runs/x@2/mlruns", "file:///runs/x@2/mlruns"),  # "@" in a path: no user
    ("https://mlflow.lab.org/?experiment=7&page=2", "https://mlflow.lab.org/?experiment=7&page=2"),
    # an error line quoting a URI, or a query string on its own
    (f"ConnectionError: GET https://me:{TOKEN}@h/api?token={TOKEN} failed (timeout)",
     "ConnectionError: GET https://***@h/api?token=*** failed (timeout)"),
    (f"bad request: refresh_token={TOKEN}&grant=x", "bad request: refresh_token=***&grant=x"),
    # each key SECRET_KEY names that no case above reaches: one case per key
    (f"https://h/?auth={TOKEN}&a=1", "https://h/?auth=***&a=1"),
    (f"https://h/?pwd={TOKEN}", "https://h/?pwd=***"),
    (f"https://h/?credential={TOKEN}", "https://h/?credential=***"),
    (f"https://h/?session={TOKEN}", "https://h/?session=***"),
    (f"https://h/?passwd={TOKEN}", "https://h/?passwd=***"),
    (f"https://h/?secret={TOKEN}", "https://h/?secret=***"),
])
def test_a_tracking_uri_or_error_line_is_said_without_its_secret(uri, said):
    assert trackers.redact(uri) == said
    assert TOKEN not in trackers.redact(uri)


def test_a_query_token_in_the_tracking_uri_reaches_neither_the_line_nor_trackers_json(
        tmp_path, capsys, monkeypatch):
    """A tracking URI with a token in its query: the line saying the server cannot be
    reached, trackers.json once a server answers (a stand-in client), and the session's
    last line naming a server (a password and a token in its URI) hold no secret."""
    import types

    import mlflow.tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:9/?token={TOKEN}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    facts = {"workload": "toy", "run": "r", "from_epoch": 1, "session": 1, "experiment": {},
             "platforms": ["local"]}
    trackers.Trackers(["mlflow"], tmp_path, say=print).start([], facts)
    said = capsys.readouterr().out
    assert said.startswith("MLflow: could not start") and TOKEN not in said, said

    class Answering:  # a server that answers: what trackers.json keeps of it
        def __init__(self, tracking_uri):
            assert TOKEN in tracking_uri  # the client itself gets the token

        def get_experiment_by_name(self, name):
            return types.SimpleNamespace(experiment_id="1")

        def create_run(self, experiment, run_name):
            return types.SimpleNamespace(info=types.SimpleNamespace(run_id="abc"))

        def log_batch(self, *args, **kwargs):
            pass

        def set_terminated(self, run_id):
            pass

    monkeypatch.setattr(mlflow.tracking, "MlflowClient", Answering)
    trackers.Trackers(["mlflow"], tmp_path, say=print).start([], facts)
    kept = json.loads((tmp_path / trackers.STATE).read_text())
    assert kept["mlflow"]["tracking_uri"] == "http://127.0.0.1:9/?token=***"
    assert TOKEN not in (tmp_path / trackers.STATE).read_text() + capsys.readouterr().out
    # the session's last line names the server without its password or token
    capsys.readouterr()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"https://me:{TOKEN}@mlflow.lab.org/?token={TOKEN}")
    (tmp_path / trackers.STATE).unlink()
    ended = trackers.Trackers(["mlflow"], tmp_path, say=print)
    ended.start([], facts)
    ended.close()
    said = capsys.readouterr().out
    assert said == ("MLflow: run abc at https://***@mlflow.lab.org/?token=*** (open it there)\n"
                    ), said


@pytest.mark.parametrize("value, fault", [
    (["tensorboard", "wandbb"], "'wandbb' is not a tracker"),
    (["mlflow", "mlflow"], "'mlflow' is listed twice")])
def test_trackers_is_checked_in_one_line(value, fault):
    with pytest.raises(ConfigError) as err:
        FashionConfig.from_params({"PLATFORM": "local", "TRACKERS": value})
    text = str(err.value)
    assert fault in text and "expected each of ['tensorboard', 'wandb', 'mlflow']" in text
    assert "\n" not in text and "TRACKERS" in text.split(";")[-1]  # the fix names it


def test_trackers_may_change_between_sessions_of_one_run():
    cfg = FashionConfig.from_params({"PLATFORM": "local"})
    assert cfg.trackers == ["tensorboard"]
    other = FashionConfig.from_params({"PLATFORM": "local", "TRACKERS": ["wandb", "mlflow"]})
    assert cfg.identity(64) == other.identity(64)


def test_the_bootstrap_installs_a_trackers_client_only_when_asked_for():
    from lib.bootstrap import missing_requirements

    absent = {"wandb", "alembic"}
    find = lambda name: None if name in absent else object()  # noqa: E731
    assert missing_requirements(find) == []
    assert missing_requirements(find, ["tensorboard", "wandb"]) == ["wandb>=0.21"]
    assert missing_requirements(find, ["mlflow"]) == ["alembic>=1.13"]


def test_a_client_that_cannot_be_installed_is_one_line_and_the_bootstrap_goes_on(capsys):
    """Kaggle with its internet off: pip fails for the clients TRACKERS asks for; the
    requirements themselves are still installed with check=True."""
    from lib.bootstrap import install_missing

    calls = []

    def pip(cmd, check):
        calls.append((cmd[-1], check))
        return subprocess.CompletedProcess(cmd, 0 if check else 1)

    absent = {"tonic", "wandb"}
    installed = install_missing(run=pip, trackers=["wandb"],
                                find_spec=lambda name: None if name in absent else object())
    assert installed == ["tonic>=1.5"] and calls == [("tonic>=1.5", True), ("wandb>=0.21", False)]
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == ("bootstrap: wandb>=0.21 could not be installed (no network? on Kaggle: "
                         "Settings -> Internet on); the trackers that need them say so")


def test_a_session_that_logs_no_epoch_adds_no_tensorboard_file(tmp_path):
    """Ctrl-C before a session's first epoch: tb/ is as it was (the event file is made with
    the first numbers, then holds them)."""
    from lib.runs.trackers import TensorBoard

    quiet = TensorBoard()
    quiet.open(tmp_path, {"from_epoch": 3}, {})
    quiet.close()
    assert not (tmp_path / "tb").exists()
    logged = TensorBoard()
    logged.open(tmp_path, {"from_epoch": 3}, {})
    logged.log(3, {"train_loss": 0.5})
    logged.close()
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 1
