"""What the generated bootstrap cell does per runtime (the notebook run is in test_notebooks)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lib import bootstrap


def test_only_missing_requirements_are_installed_never_torch(capsys):
    present = {"tqdm", "matplotlib", "scipy"}
    calls = []
    installed = bootstrap.install_missing(
        run=lambda cmd, check: calls.append(cmd),
        find_spec=lambda name: object() if name in present else None)
    assert "tqdm>=4.66" not in installed and "tonic>=1.5" in installed
    assert len(calls) == 1 and calls[0][1:4] == ["-m", "pip", "install"]
    assert not any(a.split(">")[0].split("=")[0] in ("torch", "torchvision") for a in calls[0])
    # The printed command quotes each requirement (an unquoted '>' is a shell redirect).
    assert "'tonic>=1.5'" in capsys.readouterr().out


def test_missing_requirements_install_at_the_image_lock_never_moving_what_is_there(tmp_path):
    """The lock pins what pip adds (the versions the image's lane tested); a package the runtime
    already has is left out of the constraints, so pip never changes it."""
    lock = tmp_path / "colab_gpu.txt"
    lock.write_text("# header\nsnntorch==1.0.0\nrequests==2.34.2\ntonic==1.7.0\n")
    here = {"requests": "2.31.0"}  # the runtime has its own requests

    def version(name):
        if name not in here:
            raise bootstrap.importlib.metadata.PackageNotFoundError(name)
        return here[name]

    calls = []
    bootstrap.install_missing(run=lambda cmd, check: calls.append(cmd),
                              find_spec=lambda name: None, lock=lock, version=version)
    (cmd,) = calls
    constraints = Path(cmd[cmd.index("-c") + 1]).read_text().split()
    assert constraints == ["snntorch==1.0.0", "tonic==1.7.0"]
    assert "snntorch>=0.9" in cmd  # the ranges stay the requirements; the lock picks the version


def test_every_platform_on_an_image_finds_its_committed_lock():
    root = Path(bootstrap.__file__).resolve().parent.parent
    for name in ("colab_t4", "colab_tpu", "kaggle_p100", "kaggle_t4x2", "kaggle_tpu"):
        lock = bootstrap.image_lock(name, root)
        assert lock is not None and "snntorch==" in lock.read_text(), name
    assert bootstrap.image_lock("local", root) is None


def test_nothing_is_installed_when_everything_is_there():
    calls = []
    assert bootstrap.install_missing(run=lambda *a, **k: calls.append(a),
                                     find_spec=lambda name: object()) == []
    assert calls == []


def test_xla_version_pair_is_checked():
    versions = {"torch": "2.10.0", "torch_xla": "2.9.0"}
    problem = bootstrap.xla_version_problem(version=versions.__getitem__)
    assert "torch 2.10.0 and torch_xla 2.9.0 do not match" in problem
    versions["torch"] = "2.9.0+cpu"
    assert bootstrap.xla_version_problem(version=versions.__getitem__) is None


def test_local_prepare_sets_the_mps_fallback_only_on_a_mac(tmp_path, monkeypatch, capsys):
    """The Mac's MPS switch on a Mac; on Linux (a workstation's own GPU, CI) not a word of it."""
    env = {}
    monkeypatch.chdir(tmp_path)
    root = os.getcwd()
    assert bootstrap.prepare("local", tmp_path, environ=env, mac=True) == "local"
    assert env["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    assert os.getcwd() == root
    assert "a Mac: PYTORCH_ENABLE_MPS_FALLBACK=1" in capsys.readouterr().out
    env = {}
    bootstrap.prepare("local", tmp_path, environ=env, mac=False)
    out = capsys.readouterr().out
    assert "PYTORCH_ENABLE_MPS_FALLBACK" not in env and "MPS" not in out.replace(
        "CUDA, MPS or CPU", "") and "Mac" not in out
    assert "Local (this machine: CUDA, MPS or CPU) notebook on the local runtime" in out


def test_unknown_platform_in_bootstrap_is_clear(tmp_path):
    with pytest.raises(ValueError, match="unknown PLATFORM 'colab_v100'"):
        bootstrap.prepare("colab_v100", tmp_path, environ={})


def test_bootstrap_module_does_not_import_torch():
    code = "import sys, lib.bootstrap; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # else PYTORCH_ENABLE_MPS_FALLBACK comes too late


def test_a_hosted_runtime_is_compared_with_the_image_it_was_tested_on():
    from tests.notebook_run import ROOT

    same = {"torch": "2.11.0+cu130", "torchvision": "0.26.0"}
    note = bootstrap.tested_image_note("colab_t4", ROOT, version=same.__getitem__,
                                       python="3.13")
    assert note == ("bootstrap: this runtime matches the Colab GPU image as read 2026-11 "
                    "(Python 3.13, torch 2.11.0)")
    newer = {"torch": "2.12.0", "torchvision": "0.27.0", "torch_xla": "2.8.0"}
    note = bootstrap.tested_image_note("kaggle_tpu", ROOT, version=newer.__getitem__,
                                       python="3.12")
    assert note.startswith("bootstrap: this runtime differs from the Kaggle TPU image as read "
                           "2026-11: torch 2.12.0 (tested: 2.8.0), torchvision 0.27.0 (tested: "
                           "0.23.0); if something fails, that is the first suspect")
    assert bootstrap.tested_image_note("local", ROOT) == ""


def test_finish_names_the_outputs_but_not_the_hidden_bookkeeping(tmp_path, capsys):
    for name in ("results.csv", ".results.lock", "checkpoints"):
        (tmp_path / name).touch()
    bootstrap.finish("local", tmp_path)
    assert capsys.readouterr().out == f"outputs in {tmp_path}: checkpoints results.csv\n"


@pytest.fixture
def fake_colab(tmp_path, monkeypatch):
    """tests/fakes/google/colab on the path; Drive's mount point and /content in tmp_path."""
    from tests.notebook_run import FAKES

    monkeypatch.syspath_prepend(str(FAKES))
    for name in [m for m in sys.modules if m == "google" or m.startswith("google.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("TA_COLAB_DRIVE", str(tmp_path / "drive"))
    monkeypatch.setenv("TA_COLAB_CONTENT", str(tmp_path / "content"))
    monkeypatch.setenv("TA_FAKE_COLAB_LOG", str(tmp_path))
    yield tmp_path
    # What the test imported from the fakes goes too: a `google.colab` left in sys.modules makes
    # every later test of this process detect Colab (lib.runtime.platforms.detect_runtime).
    for name in [m for m in sys.modules if m == "google" or m.startswith("google.")]:
        del sys.modules[name]


def _calls(folder):
    log = folder / "calls.jsonl"
    return log.read_text().count('"call": "mount"') if log.exists() else 0


def test_drive_is_mounted_only_where_someone_can_answer(fake_colab):
    """A browser session mounts Drive; with TA_DRIVE=off (a `colab exec` VM, papermill) no
    mount is tried (it would wait for a browser) and run folders stay on the VM's disk; an
    already-mounted Drive is used as it is."""
    from lib.runtime.platforms import storage

    line = bootstrap.drive_line({"TA_DRIVE": "off"})
    assert "Drive not mounted (TA_DRIVE=off" in line and _calls(fake_colab) == 0
    assert storage("colab").durable == fake_colab / "content" / "train-anywhere" / "runs"
    assert bootstrap.drive_line({}) == f"bootstrap: Google Drive mounted at {fake_colab / 'drive'}"
    assert _calls(fake_colab) == 1
    assert storage("colab").durable == fake_colab / "drive" / "MyDrive" / "train-anywhere" / "runs"
    assert "already mounted" in bootstrap.drive_line({}) and _calls(fake_colab) == 1
