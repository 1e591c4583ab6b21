"""What each session ran on and how fast (lib/runtime/environment.py, lib/runs/folder.py's
row of sessions.jsonl), the one line when a resumed run's torch or image changed, and
`train-anywhere report`'s measured per-platform table (lib/cli/speed.py)."""

import contextlib
import importlib.metadata
import io
import json
import subprocess
import types
from datetime import datetime

import pytest

import lib
from lib.cli.main import main
from lib.runs.identity import read_sessions
from lib.runtime import environment
from tests.test_trackers import session

ROOT = environment.ROOT


def test_a_sessions_row_says_what_it_ran_on_and_how_fast(tmp_path, capsys):
    out = tmp_path / "run"
    history, _ = session(out, "local", 2, names=[])
    (row,) = read_sessions(out)
    assert row["python"] == ".".join(map(str, __import__("sys").version_info[:3]))
    for name in ("torch", "torchvision"):
        assert row[name] == importlib.metadata.version(name)
    assert row["torch_xla"] is None  # not installed in this lane
    import torch

    # what the wheel was built for, not a GPU here: this machine has none
    assert row["torch_cuda_build"] == torch.version.cuda and "torch_cudnn_build" in row
    assert row["cuda_devices"] == 0 and "cuda" not in row
    assert row["accelerator"] and row["accelerator_memory_gb"] > 0  # the CPU and its memory
    assert row["project_version"] == lib.__version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert row["project_commit"] in (head, f"{head}-dirty")
    started, ended = (datetime.fromisoformat(row[k]) for k in ("started_at", "ended_at"))
    assert started <= ended and started.tzinfo is not None
    assert row["epochs_trained"] == 2 and row["from_epoch"] == 1
    train_s = sum(r["train_samples"] / r["samples_per_s"] for r in history)
    assert row["samples_per_s"] == pytest.approx(192 / train_s, rel=0.01)
    assert row["seconds_per_epoch"] == pytest.approx(
        sum(r["seconds"] for r in history) / 2, abs=1e-3)


def test_a_cuda_gpu_is_named_with_its_memory_in_the_row(monkeypatch):
    """The CUDA branch, on a machine without one: a T4 as torch describes it (15.8 GB)."""
    import torch

    from lib.runtime import device

    t4 = types.SimpleNamespace(name="Tesla T4", total_memory=15_828_320_256)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: t4)
    assert device.accelerator("cuda") == ("Tesla T4", 15.8)
    row = environment.facts("cuda")
    assert (row["accelerator"], row["accelerator_memory_gb"]) == ("Tesla T4", 15.8)
    assert row["cuda_devices"] == 2 and row["torch_cuda_build"] == torch.version.cuda


def test_apple_mps_is_named_with_the_memory_it_may_use(monkeypatch):
    import torch

    from lib.runtime import device

    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 22_906_503_168,
                        raising=False)
    assert device.accelerator("mps") == ("Apple GPU (MPS)", 22.9)
    assert environment.facts("mps")["accelerator"] == "Apple GPU (MPS)"


def test_a_row_written_before_the_rename_reads_with_todays_names(tmp_path):
    old = {"platform": "colab_t4", "cuda": "12.6", "cudnn": 91002, "from_epoch": 1}
    (tmp_path / "sessions.jsonl").write_text(json.dumps(old) + "\n")
    (row,) = read_sessions(tmp_path)
    assert row == {"platform": "colab_t4", "torch_cuda_build": "12.6",
                   "torch_cudnn_build": 91002, "from_epoch": 1}


def test_the_commit_is_marked_dirty_when_tracked_files_changed(tmp_path):
    """A real repository: clean, then a tracked file edited (what ran is not that commit),
    then only an untracked file (as `git describe --dirty`: still the commit)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "train.py").write_text("lr = 0.1\n")
    git("add", "train.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = git("rev-parse", "--short=12", "HEAD")
    assert environment.commit(tmp_path) == head
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert environment.commit(tmp_path) == head
    (tmp_path / "train.py").write_text("lr = 0.2\n")
    assert environment.commit(tmp_path) == f"{head}-dirty"
    assert environment.commit(tmp_path / "notes.txt") is None  # not a folder of a checkout


def test_a_resumed_run_on_another_torch_minor_says_so_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    session(out, "local", 1, names=[])
    rows = read_sessions(out)
    old = dict(rows[0], torch="2.9.0+cu126", image="colab release-2026.07")
    (out / "sessions.jsonl").write_text(json.dumps(old) + "\n")
    _, said = session(out, "local", 2, names=[], capsys=capsys)
    notes = [line for line in said if line.startswith("NOTE: this run's previous session")]
    assert len(notes) == 1
    assert f"torch 2.9.0+cu126 -> {importlib.metadata.version('torch')}" in notes[0]
    assert "image colab release-2026.07 -> None" not in notes[0]  # unknown here: not a change
    rows = read_sessions(out)
    assert len(rows) == 2 and rows[1]["from_epoch"] == 2 and rows[1]["epochs_trained"] == 1


def test_a_patch_release_or_the_same_image_is_no_drift():
    now = {"torch": "2.14.1+cu128", "image": "colab a"}
    assert environment.drift({"torch": "2.14.0", "image": "colab a"}, now) is None
    line = environment.drift({"torch": "2.14.1", "image": "colab b", "platform": "colab_t4"},
                             now)
    assert line.startswith("NOTE: this run's previous session ran on colab_t4")
    assert "image colab b -> colab a" in line and "torch" not in line.split("(")[1]


@pytest.mark.parametrize("environ, expected", [
    ({"COLAB_RELEASE_TAG": "release-colab_20261101-060000_RC00"},
     "colab release-colab_20261101-060000_RC00"),
    ({"KAGGLE_KERNEL_RUN_TYPE": "Batch", "GIT_COMMIT": "0123456789abcdef0123",
      "BUILD_DATE": "20261112-0000"}, "kaggle docker-python 0123456789ab built 20261112-0000"),
    ({"MODAL_IMAGE_ID": "im-123"}, "MODAL_IMAGE_ID im-123"),
    ({"GIT_COMMIT": "abc"}, None),  # not on Kaggle: someone else's variable
    ({}, None)])
def test_the_hosted_image_as_its_service_names_it(environ, expected):
    assert environment.image(environ) == expected


def report(out) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        assert main(["report", str(out)]) == 0
    return text.getvalue()


def write_run(out, rows, epochs_done):
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"experiment": {"workload": "fashion_mnist"}}))
    (out / "metrics.jsonl").write_text("".join(
        json.dumps({"epoch": e, "test_accuracy": 0.5}) + "\n" for e in range(1, epochs_done + 1)))
    (out / "sessions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_prints_each_platforms_measured_speed_and_the_time_left_there(tmp_path):
    rows = [{"platform": "colab_t4", "epochs": 14, "epochs_trained": 2,
             "seconds_per_epoch": 30.0, "samples_per_s": 2000.0},
            {"platform": "kaggle_t4x2", "epochs": 14, "epochs_trained": 3,
             "seconds_per_epoch": 20.0, "samples_per_s": 3000.0},
            {"platform": "colab_t4", "epochs": 14, "epochs_trained": 1,
             "seconds_per_epoch": 60.0, "samples_per_s": 1000.0},
            {"platform": "local", "epochs": 14}]  # ended before an epoch: not timed
    write_run(tmp_path / "run", rows, epochs_done=6)
    text = report(tmp_path / "run")
    table = text[text.index("measured per platform"):].splitlines()
    assert table[1] == ("| platform | sessions | epochs timed | s / epoch | samples / s | "
                        "the 8 epochs left would take |")
    # Weighted by epochs: colab (2 x 30 + 1 x 60) / 3 = 40 s; 8 epochs left: 5m20s there.
    assert table[3:] == ["| kaggle_t4x2 | 1 | 3 | 20.0 | 3000 | 2m40s |",
                         "| colab_t4 | 2 | 3 | 40.0 | 1667 | 5m20s |"]


def test_report_of_a_finished_run_says_nothing_is_left(tmp_path):
    write_run(tmp_path / "run", [{"platform": "local", "epochs": 2, "epochs_trained": 2,
                                  "seconds_per_epoch": 1.5, "samples_per_s": 100.0}], 2)
    assert "| local | 1 | 2 | 1.5 | 100 | none: finished |" in report(tmp_path / "run")
