"""The Lightning AI Studio and Modal notebooks in stand-ins of each service, started as a user
starts them there, from an empty folder: the service's variables, home and folders
(tests/cloud_standins.py; lib/runtime/clouds.py says where each is documented) under TA_CLOUD_ROOT,
and GitHub served from this checkout.

How a user opens them: Lightning's badge (`lightning.ai/new?repo_url=<blob URL>`) and Modal's
(`modal.com/notebooks/new/<blob URL>`) open the notebook alone; whether Lightning clones the
whole repository is unconfirmed, so the notebook opens alone in the Studio's home and its
bootstrap clones beside it. A Modal container is a folder wiped between sessions; its attached
Volume (/mnt/<volume>) is mounted in the next one as last committed (Modal commits it in the
background every few seconds and at shutdown: tests/cloud_standins.py).

The resume journey (two sessions: the first stops itself saved before a shortened session
limit, the second resumes where the service kept the run) runs fashion_mnist, the cheapest
workload, once per service; the other workloads run one SMOKE epoch each, in one test per
service, asserting where their run folder is. Detection, roles, limits and Modal's advice
without a Volume are tested without training (tests/test_more_clouds.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

from lib.runs.records import read_jsonl
from tests import cloud_standins as standin
from tests.notebook_run import ROOT, stream_text
from tests.served_repo import ServedRepo
from tests.test_notebooks_clouds import session
from tests.unchanged import assert_same, snapshot

pytestmark = pytest.mark.notebook
REPO = "train-anywhere"
# What each service says when the session stops (lib.runtime.clouds.storage's carry_over), and what
# else it says at the start (its bootstrap check, its clock).
ADVICE = {"lightning_studio": "when the Studio wakes", "modal": "same Volume attached"}
SAYS = {"lightning_studio": ("base conda env `cloudspace`",),
        "modal": ("Modal's default image is unpinned: torch ",
                  "Modal stops an idle kernel after 10 minutes")}
BLOB = f"https://github.com/{REPO}/{REPO}/blob/main/notebooks/{{platform}}/{{workload}}.ipynb"
BADGE = {"lightning_studio": "https://lightning.ai/new?repo_url=",
         "modal": "[![Open in Modal](https://modal-cdn.com/open-in-modal.svg)](https://modal.com"
                  "/notebooks/new/" + BLOB + ")"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return ServedRepo(tmp_path_factory.mktemp("github"))


def open_notebook(platform: str, workload: str, home: Path) -> Path:
    """The notebook where the badge put it: alone in the working folder."""
    home.mkdir(parents=True, exist_ok=True)
    opened = home / f"{workload}.ipynb"
    shutil.copy(ROOT / "notebooks" / platform / f"{workload}.ipynb", opened)
    return opened


def run(opened: Path, workload: str, served, root: Path, env: dict, name: str,
        **more_env) -> str:
    """One session (tests/test_notebooks_clouds.py's), the executed notebook kept outside
    the container, which a new session wipes."""
    return session(opened, workload, served, root, env, name, executed_in=root.parent,
                   **more_env)


@pytest.mark.parametrize("platform", sorted(standin.MORE_SERVICES))
def test_fashion_mnist_stops_saved_where_the_service_keeps_it_and_resumes_next_session(
        platform, served, tmp_path):
    root = tmp_path / "service"
    root.mkdir()
    make = standin.MORE_SERVICES[platform]
    env, home, ours = make(root)
    opened = open_notebook(platform, "fashion_mnist", home)
    header = nbformat.read(opened, as_version=4).cells[0].source
    blob = BLOB.format(platform=platform, workload="fashion_mnist")
    assert BADGE[platform].format(platform=platform, workload="fashion_mnist") in header
    assert (blob if platform == "modal" else blob.replace("/", "%2F").replace(":", "%3A")) \
        in header
    out = ours / "runs" / "fashion_mnist"

    # Modal: the Volume committed in the background while the session runs
    with (standin.background_commits(root, every=0.5) if platform == "modal"
          else contextlib.nullcontext([])) as landed:
        text = run(opened, "fashion_mnist", served, root, env, "first",
                   TA_SESSION_HOURS="1e-9")
        ended = time.monotonic()
        while platform == "modal" and not [t for t in landed if t > ended]:
            assert time.monotonic() < ended + 60, "no background commit after the session"
            time.sleep(0.1)
    assert f"from {REPO}/{REPO}@main (cloned) at {home / REPO}" in text, text[:2000]
    runtime = platform.split("_")[0]
    assert f"notebook on the {runtime} runtime" in text, text[-2000:]
    assert all(said in text for said in SAYS[platform]), text[:3000]
    stopped = re.findall(r"STOPPED before the session limit \(.*?\): saved at epoch 1, "
                         r"batch 1 in (\S+)\. To continue: (.*)", text)
    assert len(stopped) == 1, text[-3000:]
    run_dir, advice = Path(stopped[0][0]), stopped[0][1]
    assert out in (run_dir, *run_dir.parents) and ADVICE[platform] in advice, advice
    assert [p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt")] == [
        "ckpt-e0000-b000001.pt"]

    if platform == "modal":  # a new container: only the Volume is left, as last committed
        # Lost before its final commit: what the next container gets is what the background
        # commit after the session landed (the shutdown's final commit: tests/test_more_clouds)
        standin.new_container(root, shutdown=False)
        assert not home.exists() and (run_dir / "STOPPED.json").is_file()
        env, home, _ = make(root)
        opened = open_notebook(platform, "fashion_mnist", home)
        cloned = "(cloned)"
    else:  # the Studio wakes with its home as it was, the clone in it
        cloned = "(already there)"
    again = run(opened, "fashion_mnist", served, root, env, "second")
    assert f"from {REPO}/{REPO}@main {cloned} at {home / REPO}" in again, again[:2000]
    assert f"resumed from {run_dir / 'checkpoints'}" in again and "at epoch 0, batch 1" in again
    assert [r["epoch"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1]
    assert not (run_dir / "STOPPED.json").exists() and "STOPPED" not in again


@pytest.mark.parametrize("platform", sorted(standin.MORE_SERVICES))
def test_every_other_workload_trains_a_smoke_epoch_and_keeps_its_run_there(
        platform, served, tmp_path):
    """mshnet, mamba_spike and optimizer_study: one SMOKE epoch each from an empty folder (one
    service root, as one Studio or one Volume holds a user's runs), each run folder where the
    service keeps it, with its checkpoint and metrics."""
    root = tmp_path / "service"
    root.mkdir()
    env, home, ours = standin.MORE_SERVICES[platform](root)
    for workload in ("mshnet", "mamba_spike", "optimizer_study"):
        opened = open_notebook(platform, workload, home)
        text = run(opened, workload, served, root, env, workload)
        assert "STOPPED" not in text and "Traceback" not in text, text[-2000:]
        out = ours / "runs" / workload
        rows = [p for p in out.rglob("metrics.jsonl")]
        assert rows and all(r["epoch"] == 1 for p in rows for r in read_jsonl(p)), out
        assert list(out.rglob("ckpt-*.pt")) or list(out.rglob("best.pt")), out


def test_modal_without_a_volume_says_how_to_attach_one_and_refuses_a_full_run(served, tmp_path):
    """Opened in a container with no Volume: the bootstrap says in one line how to attach one;
    a full (not SMOKE) run then stops with one line before anything is read or written, since
    nothing of it would outlive the container. No training: it stops first. Everything in the
    container but the home (where the bootstrap clones the project, before the refusal) is
    compared byte for byte: its disk (/tmp, where data and a run would go), /mnt, the rest."""
    root = tmp_path / "service"
    root.mkdir()
    env, home, _ = standin.modal(root, volume=False)
    opened = open_notebook("modal", "fashion_mnist", home)
    executed = tmp_path / "executed.ipynb"
    mine = str(home.relative_to(root))  # the home: the notebook and the bootstrap's clone

    def container() -> dict[str, str]:
        return {k: v for k, v in snapshot(root).items() if k.split("/")[0] != mine}

    before = container()
    kernel_env = {**served.env, **env, "TA_CLOUD_ROOT": str(root), "PYTHONPATH": "",
                  "OMP_NUM_THREADS": "1"}
    with mock.patch.dict(os.environ, kernel_env), pytest.raises(
            papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(str(opened), str(executed),
                                   parameters=dict(SMOKE=False, SAMPLE_DATA=True, EPOCHS=1),
                                   cwd=str(home), kernel_name="python3", progress_bar=False)
    assert err.value.ename == "OutDirError", (err.value.ename, err.value.evalue)
    assert err.value.evalue.startswith("OUT_DIR ") and "TA_EPHEMERAL_OK=1" in err.value.evalue
    assert "\n" not in err.value.evalue
    said = [line for line in stream_text(nbformat.read(executed, as_version=4)).splitlines()
            if "no Modal Volume is attached" in line]
    assert len(said) == 1 and "/mnt/<volume>" in said[0], said
    assert_same(before, container(), root)
