"""`train-anywhere new`, tested as the user: in a copy of the repository, a new workload is
made, rendered and run on the sample on the local notebook and the Colab and Kaggle
stand-ins, resumed, refused with a changed LR and swept, with no file but its own three edited.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

from lib.cli import main as cli
from lib.cli import new as scaffold
from lib.runs.records import read_jsonl
from lib.runtime.platforms import PLATFORMS
from tests import unchanged
from tests.notebook_run import FAKES, check_clean_outputs, stream_text
from tests.user_repo import (
    ROOT,
    changed,
    copy_repository,
    heavy_imports,
    run,
    snapshot,
    user_env,
)

NAME = "demo_exp"
THREE = {f"notebooks_src/{NAME}.py", f"lib/workloads/{NAME}.py", f"tests/test_{NAME}.py"}
SMOKE = ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True"]


@pytest.mark.parametrize("name,said", [
    ("fashion_mnist", "workload 'fashion_mnist' already exists (lib/workloads/fashion_mnist.py)"),
    ("my-exp", "'my-exp' is not a lower-case Python identifier; use letters, digits and "
               "underscores, starting with a letter, e.g. my_exp."),
    ("2fast", "e.g. exp_2fast."), ("MyExp", "e.g. myexp."), ("class", "is a Python keyword"),
    ("x" * 40, "expected at most 32"),
])
def test_a_bad_name_is_one_line_and_writes_nothing(name, said, capsys):
    before = snapshot(ROOT / "lib" / "workloads")
    assert cli.main(["new", name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("train-anywhere new: ") and said in err[0], err
    assert snapshot(ROOT / "lib" / "workloads") == before
    assert not (ROOT / "notebooks_src" / f"{name}.py").exists() or name == "fashion_mnist"


def test_every_template_renders_to_valid_python():
    for kind in scaffold.files(NAME):
        compile(scaffold.render(kind, NAME), f"{kind}.py", "exec")
    assert "class DemoExpConfig(RunConfig)" in scaffold.render("workload", NAME)


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's copy after `train-anywhere new demo_exp` and `python build_notebooks.py`."""
    root = copy_repository(tmp_path_factory.mktemp("clone"))
    before = snapshot(root)
    made = run(root, "train-anywhere", "new", NAME)
    assert made.returncode == 0, made.stderr
    assert changed(before, snapshot(root)) == THREE  # `new` writes its three files, no other
    assert all(f"wrote {path}" in made.stdout for path in THREE), made.stdout
    built = run(root, "python", "build_notebooks.py")
    assert built.returncode == 0, built.stderr
    generated = changed(before, snapshot(root)) - THREE
    # the build adds one notebook per platform (and Kaggle's push metadata) and a badge row
    assert generated == {f"notebooks/{p}/{NAME}.ipynb" for p in PLATFORMS} | {
        f"notebooks/{p}/kernels/{NAME}/kernel-metadata.json" for p in PLATFORMS
        if PLATFORMS[p].runtime == "kaggle"} | {"README.md"}, generated
    readme_before = (ROOT / "README.md").read_text().splitlines()
    added = [line for line in (root / "README.md").read_text().splitlines()
             if line not in readme_before]
    assert len(added) == 1 and added[0].startswith(f"| `{NAME}` | "), added
    check = run(root, "python", "build_notebooks.py", "--check")
    assert check.returncode == 0, check.stdout
    return root


def test_the_new_workload_imports_no_torch(user):
    """The template keeps the contract's import rule: `get` and a check of its parameters
    load no torch (nor numpy), so `run` checks them at once and the builder reads them."""
    found = heavy_imports(user)
    assert NAME in found and not any(found.values()), found


def check_history(out: Path, epochs: int) -> list[dict]:
    history = read_jsonl(out / "metrics.jsonl")
    assert [r["epoch"] for r in history] == list(range(1, epochs + 1))
    assert all(math.isfinite(r["train_loss"]) and 0 <= r["test_accuracy"] <= 1 for r in history)
    assert (out / "checkpoints" / "best.pt").exists() and (out / "curves.png").exists()
    return history


@pytest.mark.notebook
def test_the_new_workload_runs_resumes_refuses_a_changed_lr_and_sweeps(user, tmp_path):
    out, data = tmp_path / "run", str(tmp_path / "data")
    first = run(user, "train-anywhere", "run", NAME, *SMOKE, "-p", "EPOCHS", "2",
                "-p", "DATA_DIR", data, "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert "test_accuracy " in first.stdout and "on the synthetic sample" in first.stdout
    history = check_history(out, 2)
    assert history[-1]["device"] == "cpu"
    assert (tmp_path / "data" / "sample" / NAME / "train.npz").exists()  # the documented place
    check_clean_outputs(nbformat.read(out / f"{NAME}-session-1.ipynb", as_version=4))

    more = run(user, "train-anywhere", "run", NAME, *SMOKE, "-p", "EPOCHS", "3",
               "-p", "DATA_DIR", data, "--out", str(out))
    assert more.returncode == 0, more.stderr
    assert check_history(out, 3)[:2] == history  # resumed: epochs 1-2 kept, epoch 3 added

    files = unchanged.snapshot(out)
    refused = run(user, "train-anywhere", "run", NAME, *SMOKE, "-p", "EPOCHS", "3",
                  "-p", "LR", "0.01", "-p", "DATA_DIR", data, "--out", str(out))
    assert refused.returncode == 2
    assert "ExperimentChanged" in refused.stderr and "LR 0.001 -> 0.01" in refused.stderr
    unchanged.assert_unchanged(files, out)  # every file, the sessions' notebooks and tb/ too

    grid = tmp_path / "sweep"
    swept = run(user, "train-anywhere", "sweep", NAME, "--grid", "SEED=0,1", *SMOKE,
                "-p", "EPOCHS", "1", "-p", "DATA_DIR", data, "--out", str(grid))
    assert swept.returncode == 0, swept.stderr + swept.stdout
    assert "all 2 cells finished" in swept.stdout
    with open(grid / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["SEED"], r["metric"], r["status"]) for r in rows] == [
        ("0", "test_accuracy", "done"), ("1", "test_accuracy", "done")]
    assert rows[0]["value"] != rows[1]["value"]  # two seeds, two runs


def execute_in(user: Path, platform: str, out: Path, env: dict, **params) -> str:
    """papermill the user's notebook for `platform` as a hosted runtime would; its text."""
    notebook = user / "notebooks" / platform / f"{NAME}.ipynb"
    executed = out / f"{platform}.ipynb"
    out.mkdir(parents=True, exist_ok=True)
    with mock.patch.dict(os.environ, env, clear=True):  # the kernel inherits it
        papermill.execute_notebook(str(notebook), str(executed), progress_bar=False,
                                   parameters=dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=1,
                                                   **params),
                                   cwd=str(notebook.parent), kernel_name="python3")
    nb = nbformat.read(executed, as_version=4)
    check_clean_outputs(nb)
    return stream_text(nb)


@pytest.mark.notebook
def test_the_new_workload_runs_on_the_colab_and_kaggle_stand_ins(user, tmp_path):
    drive = tmp_path / "drive"  # Colab: tests/fakes/google/colab mounts "Drive" here
    text = execute_in(user, "colab_t4", tmp_path, user_env(
        PYTHONPATH=str(FAKES), COLAB_RELEASE_TAG="release-colab-test",
        TA_COLAB_DRIVE=str(drive), TA_FAKE_COLAB_LOG=str(tmp_path),
        TA_COLAB_CONTENT=str(tmp_path / "content")))  # scratch: the VM's /content
    assert "Colab T4 notebook on the colab runtime" in text
    check_history(drive / "MyDrive" / "train-anywhere" / "runs" / NAME, 1)
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["call"] for c in calls] == ["mount", "flush_and_unmount"]
    # Kaggle: its runtime variable, and this machine's folders for /kaggle/working
    working = tmp_path / "working"
    text = execute_in(user, "kaggle_p100", tmp_path, user_env(
        KAGGLE_KERNEL_RUN_TYPE="Interactive"), DATA_DIR=str(working / "data"),
        OUT_DIR=str(working / "runs"))
    assert "Kaggle P100 notebook on the kaggle runtime" in text
    check_history(working / "runs", 1)


@pytest.mark.notebook
def test_the_new_workloads_own_tests_pass(user):
    tested = run(user, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 f"tests/test_{NAME}.py")
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "3 passed" in tested.stdout, tested.stdout[-1000:]
