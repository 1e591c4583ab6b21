"""lib/runtime/secrets.py: one function reads a secret as each platform keeps it, against the
stand-ins of Colab's Secrets panel (tests/fakes/google/colab/userdata.py) and Kaggle's
UserSecretsClient (tests/fakes/kaggle/kaggle_secrets.py); the environment everywhere else. The
sweeps' Kaggle credentials come through it too."""

import json
import os
import sys

import pytest

from lib.runtime import secrets
from tests.notebook_run import FAKES

STORED = {"WANDB_API_KEY": "from-the-store", "HIDDEN": {"value": "x", "access": False}}
EXPORTED = ("WANDB_API_KEY", "KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY")


@pytest.fixture
def stores(tmp_path, monkeypatch):
    """Both platforms' stores holding STORED; their fakes importable; calls logged."""
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(STORED))
    kaggle = dict(STORED, HIDDEN="y")
    (tmp_path / "kaggle.json").write_text(json.dumps(kaggle))
    for name, value in {"TA_FAKE_COLAB_SECRETS": path, "TA_FAKE_COLAB_LOG": tmp_path,
                        "TA_FAKE_KAGGLE_SECRETS": tmp_path / "kaggle.json",
                        "TA_FAKE_KAGGLE_LOG": tmp_path}.items():
        monkeypatch.setenv(name, str(value))
    for name in ("HIDDEN", "MISSING", "KAGGLE_USER_SECRETS_TOKEN", "TA_DRIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.syspath_prepend(str(FAKES / "kaggle"))
    before = {name: os.environ.pop(name, None) for name in EXPORTED}
    yield tmp_path
    for name, value in before.items():  # what `export` put there goes
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value
    # the fake google.colab must not outlive the test (conftest: the runtime detected)
    for name in [m for m in sys.modules if m.startswith(("google.colab", "kaggle_secrets"))]:
        del sys.modules[name]


def asked(folder) -> list[str]:
    log = folder / "calls.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [c.get("key") or c.get("label") for c in map(json.loads, lines)
            if c["call"] in ("userdata.get", "get_secret")]


def test_colab_reads_its_secrets_panel(stores, monkeypatch):
    assert secrets.secret("WANDB_API_KEY", "colab") == "from-the-store"
    assert secrets.secret("HIDDEN", "colab") is None  # no access granted: NotebookAccessError
    assert secrets.secret("MISSING", "colab") is None  # SecretNotFoundError
    assert asked(stores) == ["WANDB_API_KEY", "HIDDEN", "MISSING"]
    monkeypatch.setenv("TA_DRIVE", "off")  # no browser to answer: the panel is not asked
    assert secrets.secret("WANDB_API_KEY", "colab") is None
    assert len(asked(stores)) == 3


def test_kaggle_reads_its_user_secrets_once_a_secret_is_attached(stores, monkeypatch):
    assert secrets.secret("WANDB_API_KEY", "kaggle") is None  # none attached: not asked
    assert asked(stores) == []
    monkeypatch.setenv("KAGGLE_USER_SECRETS_TOKEN", "a-jwt")
    assert secrets.secret("WANDB_API_KEY", "kaggle") == "from-the-store"
    assert secrets.secret("HIDDEN", "kaggle") == "y"
    assert secrets.secret("MISSING", "kaggle") is None  # not attached: BackendError
    assert asked(stores) == ["WANDB_API_KEY", "HIDDEN", "MISSING"]


@pytest.mark.parametrize("runtime", ["colab", "kaggle", "modal", "lightning", "sagemaker",
                                     "studiolab", "paperspace", "local"])
def test_the_environment_comes_first_and_is_all_elsewhere(stores, monkeypatch, runtime):
    monkeypatch.setenv("KAGGLE_USER_SECRETS_TOKEN", "a-jwt")
    monkeypatch.setenv("HIDDEN", "from-the-environment")
    assert secrets.secret("HIDDEN", runtime) == "from-the-environment"
    in_store = runtime in ("colab", "kaggle")
    assert (secrets.secret("WANDB_API_KEY", runtime) == "from-the-store") is in_store
    assert asked(stores) == (["WANDB_API_KEY"] if in_store else [])


@pytest.mark.parametrize("runtime, words", [
    ("colab", "Colab's Secrets panel"), ("kaggle", "Kaggle's Add-ons -> Secrets"),
    ("modal", "a Modal Secret"), ("lightning", "Lightning user or teamspace secret"),
    ("sagemaker", "lifecycle configuration"), ("local", "before the kernel starts")])
def test_where_a_secret_is_set_is_said_per_platform(runtime, words):
    text = secrets.where("WANDB_API_KEY", runtime)
    assert words in text and "WANDB_API_KEY" in text


def test_export_fills_the_environment_from_the_store_and_keeps_what_is_set(stores,
                                                                           monkeypatch):
    monkeypatch.setenv("HIDDEN", "mine")
    assert secrets.export(["WANDB_API_KEY", "HIDDEN", "MISSING"], "colab") == ["WANDB_API_KEY"]
    assert os.environ["WANDB_API_KEY"] == "from-the-store" and os.environ["HIDDEN"] == "mine"


def test_a_sweep_takes_its_kaggle_credentials_from_colabs_secrets(stores, monkeypatch, tmp_path):
    """`train-anywhere sweep --on kaggle` run in a Colab notebook: the token in the Secrets
    panel authenticates the real kaggle client (no ~/.kaggle, nothing in the environment)."""
    from lib.cli import kaggle_api

    (tmp_path / "secrets.json").write_text(json.dumps({"KAGGLE_USERNAME": "someone",
                                                      "KAGGLE_KEY": "k" * 32}))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    api = kaggle_api.client()
    assert api.config_values["username"] == "someone"
    assert asked(stores) == ["KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY"]
