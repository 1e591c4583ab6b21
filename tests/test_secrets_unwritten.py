"""Secrets are never printed or written, proven on every path a token takes: planted tokens in
Colab's Secrets panel (the stand-in, tests/fakes/google/colab/userdata.py), then everything
this process and its children print (captured at the file descriptors) and every file under
the run folder, the temp folder, HOME and the working folder (each a fresh folder here) is
scanned for them after `secret()`, after the export to a child process, after an online W&B
open with the key (the network patched as reachable: the open may fail, nothing may leak) and
after a Kaggle sweep's credentials handling (`train-anywhere sweep --on kaggle`, whose push
then finds no server). The store's own file stands in for Google's servers and is not scanned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from lib.runs import trackers
from lib.runtime import secrets
from tests.notebook_run import FAKES

ROOT = Path(__file__).resolve().parent.parent
WANDB_TOKEN = "taplantedwandb0c4f9e2b7a15d3806e9c1f4a2b"  # 40 characters, as W&B's keys
KAGGLE_TOKEN = "taplantedkaggle5d2e8f3a9c61b0477"  # Kaggle's legacy 32-character key
STORE = {"WANDB_API_KEY": WANDB_TOKEN, "KAGGLE_USERNAME": "someone", "KAGGLE_KEY": KAGGLE_TOKEN}
NAMES = ("WANDB_API_KEY", "KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY", "WANDB_MODE",
         "WANDB_SERVICE")


@dataclass
class Sealed:
    root: Path
    capfd: pytest.CaptureFixture
    env: dict

    @property
    def run(self) -> Path:
        return self.root / "run"

    def leaks(self) -> list[str]:
        """Where a planted token shows: 'stdout', 'stderr', or a file's path."""
        said = self.capfd.readouterr()
        found = [name for name, text in (("stdout", said.out), ("stderr", said.err))
                 if WANDB_TOKEN in text or KAGGLE_TOKEN in text]
        for place in ("run", "tmp", "home", "work"):
            for path in sorted((self.root / place).rglob("*")):
                if path.is_file() and not path.is_symlink():
                    data = path.read_bytes()
                    if WANDB_TOKEN.encode() in data or KAGGLE_TOKEN.encode() in data:
                        found.append(str(path.relative_to(self.root)))
        return found


@pytest.fixture
def sealed(tmp_path, monkeypatch, capfd):
    """A Colab notebook (the stand-in runtime) whose Secrets panel holds the planted tokens,
    with its own HOME, TMPDIR, working folder and run folder, no network."""
    for place in ("run", "tmp", "home", "work", "store"):
        (tmp_path / place).mkdir()
    (tmp_path / "store" / "secrets.json").write_text(json.dumps(STORE))
    env = {"HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
           "COLAB_RELEASE_TAG": "release-colab-test", "TA_DRIVE": "on",
           "TA_FAKE_COLAB_SECRETS": str(tmp_path / "store" / "secrets.json"),
           "TA_FAKE_COLAB_LOG": str(tmp_path / "store"),
           "WANDB_BASE_URL": "http://127.0.0.1:9",  # nothing listens there
           "WANDB_INIT_TIMEOUT": "6", "MLFLOW_DISABLE_TELEMETRY": "true",
           "DO_NOT_TRACK": "true"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in (*NAMES, "KAGGLE_USER_SECRETS_TOKEN", "KAGGLE_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.syspath_prepend(str(FAKES))
    yield Sealed(tmp_path, capfd, env)
    for name in NAMES:  # what the export and W&B put there goes
        os.environ.pop(name, None)
    for name in [m for m in sys.modules if m.startswith("google.colab")]:
        del sys.modules[name]


def test_a_secret_read_and_exported_to_a_child_process_is_never_printed_or_written(sealed):
    assert secrets.secret("WANDB_API_KEY") == WANDB_TOKEN  # from the Secrets panel
    assert sealed.leaks() == []
    assert secrets.export(["WANDB_API_KEY", "KAGGLE_KEY"]) == ["WANDB_API_KEY", "KAGGLE_KEY"]
    child = subprocess.run(  # a child process (a notebook kernel, a client) inherits them
        [sys.executable, "-c", "import os; print(len(os.environ['WANDB_API_KEY']), "
         "len(os.environ['KAGGLE_KEY']))"], capture_output=True, text=True, check=True)
    assert child.stdout.split() == ["40", "32"]
    assert sealed.leaks() == []


def test_an_online_wandb_open_with_the_key_leaks_it_nowhere(sealed, monkeypatch):
    """W&B's server 'reachable' (patched), the key from the Secrets panel handed to
    wandb.init online; the server is not there, so the open fails: one line, no key."""
    monkeypatch.setattr(trackers, "reachable", lambda url, timeout=3.0: True)
    import wandb

    # An earlier test in this process may have set W&B up (its settings, its service): start
    # afresh so this open reads WANDB_INIT_TIMEOUT (6 s) and not W&B's default 90 s.
    wandb.teardown()
    assert trackers.WandB().mode() == ("online", WANDB_TOKEN, "online")
    said = []
    t = trackers.Trackers(["wandb"], sealed.run, say=said.append)
    t.start([{"epoch": 1, "train_loss": 0.5}], {
        "workload": "toy", "run": "r", "from_epoch": 1, "session": 1, "experiment": {"lr": 1},
        "platforms": ["colab_t4"], "platform": "colab_t4", "device": "cpu"})
    t.close()
    assert len(said) == 1 and said[0].startswith("W&B: could not start"), said
    assert "\n" not in said[0]  # wandb's error is several lines: said as one
    assert not any(WANDB_TOKEN in line for line in said)
    assert sealed.leaks() == []


def test_a_kaggle_sweeps_credentials_leak_nowhere(sealed):
    """`train-anywhere sweep --on kaggle` in a Colab notebook: the Kaggle key comes from the
    Secrets panel, authenticates the real kaggle client and goes with its first request (to
    kagglesdk's LOCALHOST endpoint, http://localhost: no server there; not its TEST one, :7777,
    where other tests' stand-in may be listening): the sweep's one line, and no file, holds
    it."""
    proc = subprocess.run(
        [sys.executable, "-m", "lib", "sweep", "fashion_mnist", "--grid", "SEED=1", "--out",
         str(sealed.run), "--on", "kaggle", "-p", "SMOKE", "True"], cwd=ROOT, text=True,
        capture_output=True, timeout=300, env={
            **os.environ, "OMP_NUM_THREADS": "1", "KAGGLE_API_ENVIRONMENT": "LOCALHOST",
            "PYTHONPATH": os.pathsep.join([str(FAKES), str(ROOT)])})
    calls = (sealed.root / "store" / "calls.jsonl").read_text()
    assert '"key": "KAGGLE_KEY"' in calls  # the key was read from the Secrets panel
    assert proc.returncode == 1 and "sweep: Kaggle: " in proc.stderr, proc.stderr
    assert WANDB_TOKEN not in proc.stdout + proc.stderr
    assert KAGGLE_TOKEN not in proc.stdout + proc.stderr
    assert sealed.leaks() == []


def test_the_scan_finds_a_planted_leak(sealed, monkeypatch):
    """The scan itself: a `secret()` that prints its value and writes it to a file is
    caught (the tests above then fail the same way)."""
    read = secrets.secret

    def leaky(name, runtime=None):
        value = read(name, runtime)
        print(f"debug: {name}={value}")
        (Path.home() / ".cache-of-secrets").write_text(str(value))
        return value

    monkeypatch.setattr(secrets, "secret", leaky)
    secrets.secret("WANDB_API_KEY")
    assert sealed.leaks() == ["stdout", "home/.cache-of-secrets"]
