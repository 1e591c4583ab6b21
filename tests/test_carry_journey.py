"""One experiment carried from platform to platform (issue 37), as a user does it.

The Colab T4 notebook trains epoch 1 with its run folder on Drive (the TA_COLAB_DRIVE folder
stand-in); `train-anywhere carry to-kaggle` makes that folder a private dataset on the loopback
Kaggle stand-in (tests/fakes/kaggle_server.py, through the real `kaggle` client); the Kaggle
T4 x2 notebook, pushed with that dataset attached, carries the run over and trains epoch 2 in
two gloo processes (TA_CPU_DEVICES=2 stands in for the two T4s); `carry from-kaggle` brings
that version's output here; the local notebook trains epoch 3. Every session has the same
parameters (EPOCHS is the whole run's), only PLATFORM differs (each is that platform's
notebook); each session ends after one epoch as before a session limit (TA_SESSION_EPOCHS, so
it ends at the same epoch on any machine). One epoch a session proves what two did (round
seven: two a session, six epochs, cost the suite 14 s more here).

Compared with one uninterrupted run on one device: epoch 1 is bit-identical. Epoch 2 ran on
two processes: the same samples in each step (the global batch is split), but each process
draws its own dropout masks (Fashion-MNIST's CNN) and normalises its half batch with its own
BatchNorm statistics (the study's ResNet-18), so from epoch 2 on the numbers are those of the
same experiment, not the same bits: the same samples and learning rates in every epoch, and
for Fashion-MNIST every epoch's train and test loss within 15% of the uninterrupted run's and
its test accuracy (of 96 samples) within 0.2 (measured: losses within 0.8%, accuracy within
0.031). For the study's run that crosses platforms (AdamW), the losses within 15% (measured:
within 2.8%); its smoke evaluation is one batch of 16 samples, where accuracy moves in steps
of 1/16, so accuracy is not compared. The grid's second run (SGD at lr 0.1) never left this
machine: it is bit-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

from lib.base.errors import ExperimentChanged
from lib.runs.records import read_jsonl
from tests.fakes.kaggle_server import FakeKaggle
from tests.fault_harness import notebook_script, run_script, strip_timing
from tests.kernel_zygote import without_settings
from tests.notebook_run import FAKES, markdown_outputs, stream_text
from tests.unchanged import assert_unchanged, snapshot

pytestmark = pytest.mark.notebook
ROOT = Path(__file__).resolve().parent.parent
OWNER = "tester"
JOURNEYS = {
    "fashion_mnist": dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=3, SMOKE_BATCHES=3),
    "optimizer_study": dict(SMOKE=True, SAMPLE_DATA=True, EPOCHS=3, SMOKE_BATCHES=1,
                            OPTIMIZERS=["adamw", "sgd"], SEEDS=[0]),
}
CELLS = ["cifar10-adamw-seed0-sym0.2", "cifar10-sgd-seed0-sym0.2"]


def kaggle_env(tmp: Path) -> dict:
    """The real client at kagglesdk's TEST endpoint, placeholder credentials."""
    (tmp / "kaggle-config").mkdir(exist_ok=True)
    return {"KAGGLE_API_ENVIRONMENT": "TEST", "KAGGLE_CONFIG_DIR": str(tmp / "kaggle-config"),
            "HOME": str(tmp), "KAGGLE_USERNAME": OWNER, "KAGGLE_KEY": "placeholder"}


def checkout(tmp: Path) -> Path:
    """A user's checkout of the project, as the notebooks' bootstrap finds it (a folder with
    lib/bootstrap.py above the notebook): `lib` linked to this one, the notebooks copied.
    The local notebook's default DATA_DIR and OUT_DIR are its ./data and ./runs."""
    home = tmp / "checkout"
    if not home.exists():
        (home / "notebooks").mkdir(parents=True)
        (home / "lib").symlink_to(ROOT / "lib")
        for platform in ("colab_t4", "local"):
            shutil.copytree(ROOT / "notebooks" / platform, home / "notebooks" / platform)
    return home


def notebook(platform: str, workload: str, tmp: Path, env: dict) -> str:
    """The platform's notebook through papermill, started in the checkout as a user does,
    with the journey's parameters; its text."""
    cwd = checkout(tmp) / "notebooks" / platform
    out = tmp / f"{platform}-{workload}.ipynb"
    with mock.patch.dict(os.environ, {**without_settings(os.environ), **env}, clear=True):
        papermill.execute_notebook(str(cwd / f"{workload}.ipynb"), str(out),
                                   parameters=JOURNEYS[workload], cwd=str(cwd),
                                   progress_bar=False, kernel_name="python3")
    nb = nbformat.read(out, as_version=4)
    return stream_text(nb) + markdown_outputs(nb)


def carry(*args: str, env: dict) -> str:
    """`train-anywhere carry ...`; its one line."""
    proc = subprocess.run([sys.executable, "-m", "lib", "carry", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **env}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return lines[0]


def push_and_wait(server: FakeKaggle, workload: str, dataset: str, env: dict) -> str:
    """The kaggle_t4x2 notebook pushed with `dataset` attached (kernel-metadata's
    dataset_sources), through the real client; waits for it to end. Its ref."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    from lib.cli.kaggle_api import client

    folder = server.root.parent / f"push-{workload}"
    folder.mkdir()
    nb = load_notebook_node(str(ROOT / "notebooks" / "kaggle_t4x2" / f"{workload}.ipynb"))
    nbformat.write(parameterize_notebook(nb, JOURNEYS[workload], kernel_name="python3",
                                         language="python"), folder / "notebook.ipynb")
    meta = json.loads((ROOT / "notebooks" / "kaggle_t4x2" / "kernels" / workload /
                       "kernel-metadata.json").read_text())
    slug = f"{workload.replace('_', '-')}-t4x2"
    meta.update(id=f"{OWNER}/{slug}", title=slug, code_file="notebook.ipynb",
                dataset_sources=[dataset])
    (folder / "kernel-metadata.json").write_text(json.dumps(meta))
    with mock.patch.dict(os.environ, env):
        api = client()
        resp = api.kernels_push(str(folder))
        assert not getattr(resp, "error", None), resp.error
        ref = f"{OWNER}/{slug}"
        deadline = time.monotonic() + 400
        while (status := api.kernels_status(ref).status.name) not in ("COMPLETE", "ERROR"):
            assert time.monotonic() < deadline
            time.sleep(0.5)
    log = (server.root / slug / "papermill.log").read_text()
    assert status == "COMPLETE", log[-3000:]
    return ref


def journey(workload: str, tmp: Path) -> dict:
    """The three sessions in turn; what each said and where the run ended up."""
    kenv = kaggle_env(tmp)
    drive = tmp / "drive"
    (drive / "MyDrive").mkdir(parents=True)
    said = {}
    said["colab"] = notebook("colab_t4", workload, tmp, {
        "PYTHONPATH": os.pathsep.join([str(FAKES), str(ROOT)]),
        "COLAB_RELEASE_TAG": "release-colab-test", "TA_COLAB_DRIVE": str(drive),
        "TA_COLAB_CONTENT": str(tmp / "content"), "TA_FAKE_COLAB_LOG": str(tmp),
        "TA_SESSION_EPOCHS": "1"})
    on_drive = drive / "MyDrive" / "train-anywhere" / "runs" / workload
    dataset = f"{OWNER}/{workload.replace('_', '-')}-run"
    with FakeKaggle(tmp / "kaggle-side", {"OMP_NUM_THREADS": "1", "TA_CPU_DEVICES": "2",
                                          "TA_SESSION_EPOCHS": "1",
                                          "PYTHONPATH": str(ROOT)}) as server:
        said["to-kaggle"] = carry("to-kaggle", str(on_drive), "--dataset", dataset, env=kenv)
        ref = push_and_wait(server, workload, dataset, kenv)
        said["kaggle"] = (server.root / ref.split("/")[1] / "papermill.log").read_text()
        said["kaggle"] += stream_text(nbformat.read(
            server.root / ref.split("/")[1] / "executed.ipynb", as_version=4))
        local = checkout(tmp) / "runs" / workload
        said["from-kaggle"] = carry("from-kaggle", ref, str(local), env=kenv)
        said["attached"] = server.datasets[dataset][-1]
    said["local"] = notebook("local", workload, tmp, {"PYTHONPATH": str(ROOT)})
    said["run"] = local
    return said


def uninterrupted(workload: str, tmp: Path) -> Path:
    """The same experiment in one session on one device (the local notebook's source)."""
    out = tmp / "alone"
    script = notebook_script(workload, dict(JOURNEYS[workload], PLATFORM="local",
                                            OUT_DIR=str(out)), tmp / "alone.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TA_")}
    code, output = run_script(script, dict(env, MPLBACKEND="Agg"), tmp)
    assert code == 0, output[-5000:]
    return out


def close(a: list[dict], b: list[dict], accuracy: float | None = 0.2,
          losses=("train_loss", "test_loss")) -> None:
    """The same experiment, not the same bits (module docstring): the same samples and
    learning rates, `losses` within 15%, accuracy within `accuracy` (None: not compared),
    epoch by epoch."""
    assert [(r["epoch"], r["lr"]) for r in a] == [(r["epoch"], r["lr"]) for r in b]
    for ra, rb in zip(a, b, strict=True):
        for key in losses:
            assert ra[key] == pytest.approx(rb[key], rel=0.15), (ra["epoch"], key)
        if accuracy is not None:
            assert abs(ra["test_accuracy"] - rb["test_accuracy"]) <= accuracy, ra["epoch"]
        assert ra["train_samples"] == rb["train_samples"]


def sessions(run: Path) -> list[tuple]:
    return [(s["platform"], s["device"], s["precision"], s["batch_size"], s["devices"],
             s["from_epoch"]) for s in read_jsonl(run / "sessions.jsonl")]


def refused_everywhere(workload: str, tmp: Path, said: dict, monkeypatch) -> None:
    """A changed LR at each step, with everything else as the journey had it: refused before
    anything is written. Every file each session could reach is compared byte for byte
    (tests/unchanged.py): Drive and /content on Colab; /kaggle (its working folder and the
    attached input's link) and the attached dataset itself on Kaggle; the whole checkout here
    (its notebooks, data and runs, TensorBoard files included)."""
    from lib import session, workloads

    cls = workloads.get(workload).config
    params = {k.lower(): v for k, v in JOURNEYS[workload].items()}
    for name in [k for k in os.environ if k.startswith("TA_")]:
        monkeypatch.delenv(name)

    def refused(platform: str, match: str, *folders: Path) -> None:
        before = [snapshot(f) for f in folders]
        with pytest.raises(ExperimentChanged, match=match):
            session.start(cls(platform=platform, lr=0.5, **params))
        for folder, files in zip(folders, before, strict=True):
            assert_unchanged(files, folder)

    # Colab: the folder on Drive.
    monkeypatch.setenv("COLAB_RELEASE_TAG", "x")
    monkeypatch.setenv("TA_COLAB_DRIVE", str(tmp / "drive"))
    monkeypatch.setenv("TA_COLAB_CONTENT", str(tmp / "content"))
    refused("colab_t4", r"LR .*-> 0\.5", tmp / "drive", tmp / "content")
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    # Kaggle: the dataset attached to a new version.
    root = tmp / "kaggle-again"
    (root / "input" / "datasets" / OWNER).mkdir(parents=True)
    os.symlink(said["attached"], root / "input" / "datasets" / OWNER / "run")
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("TA_KAGGLE_ROOT", str(root))
    refused("kaggle_t4x2", r"the attached run .*LR .*-> 0\.5", root, Path(said["attached"]))
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE")
    # Here: the folder carried back.
    monkeypatch.chdir(checkout(tmp))
    refused("local", r"LR .*-> 0\.5", checkout(tmp))


def test_a_fashion_mnist_run_trains_on_colab_then_kaggle_t4x2_then_here(tmp_path, monkeypatch):
    workload = "fashion_mnist"
    said = journey(workload, tmp_path)
    run = said["run"]
    assert "global batch" not in said["colab"]  # a new run: the platform's default, unsaid
    assert said["to-kaggle"].startswith(
        f"moved the fashion_mnist run (1 epoch, newest complete checkpoint "
        f"ckpt-e0001-b000000.pt) from {tmp_path / 'drive'}")
    assert "new private dataset tester/fashion-mnist-run" in said["to-kaggle"]
    kaggle = said["kaggle"]
    assert "carried over the run in" in kaggle and "datasets/tester/fashion-mnist-run" in kaggle
    assert "launching 2 processes" in kaggle
    assert "global batch 32 kept: 16 per step, on 2 devices" in kaggle
    assert said["from-kaggle"].startswith("moved the fashion_mnist run (2 epochs, newest "
                                          "complete checkpoint ckpt-e0002-b000000.pt) from the "
                                          "latest output of Kaggle kernel tester/")
    assert "global batch 32 kept: 32 per step, on 1 device" in said["local"]
    assert sessions(run) == [("colab_t4", "cpu", "fp32", 32, 1, 1),
                             ("kaggle_t4x2", "cpu", "fp32", 16, 2, 2),
                             ("local", "cpu", "fp32", 32, 1, 3)]
    assert "| 2 | kaggle_t4x2 | cpu | fp32 | 16 x 2 |" in said["local"]
    history = read_jsonl(run / "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2, 3]
    alone = read_jsonl(uninterrupted(workload, tmp_path) / "metrics.jsonl")
    assert strip_timing(history[:1]) == strip_timing(alone[:1])  # the same device count
    close(history[1:], alone[1:])
    refused_everywhere(workload, tmp_path, said, monkeypatch)


def test_a_two_run_optimizer_study_trains_on_colab_then_kaggle_t4x2_then_here(tmp_path,
                                                                           monkeypatch):
    """The grid's first run crosses all three platforms (each session ends after its two
    epochs, and a grid trains its runs in turn); the second trains here."""
    workload = "optimizer_study"
    said = journey(workload, tmp_path)
    grid = said["run"]
    assert said["to-kaggle"].startswith("moved the optimizer_study grid of 1 run "
                                        f"({CELLS[0]}: 1 epoch)")
    assert "launching 2 processes" in said["kaggle"]
    assert sessions(grid / CELLS[0]) == [("colab_t4", "cpu", "fp32", 16, 1, 1),
                                         ("kaggle_t4x2", "cpu", "fp32", 8, 2, 2),
                                         ("local", "cpu", "fp32", 16, 1, 3)]
    assert sessions(grid / CELLS[1]) == [("local", "cpu", "fp32", 16, 1, 1)]
    alone = uninterrupted(workload, tmp_path)
    for cell in CELLS:
        history, ref = (read_jsonl(d / cell / "metrics.jsonl") for d in (grid, alone))
        assert [r["epoch"] for r in history] == [1, 2, 3]
        assert (grid / cell / "DONE.json").is_file()
        if cell == CELLS[1]:
            assert strip_timing(history) == strip_timing(ref)
        else:
            assert strip_timing(history[:1]) == strip_timing(ref[:1])
            close(history[1:], ref[1:], accuracy=None)
    refused_everywhere(workload, tmp_path, said, monkeypatch)
