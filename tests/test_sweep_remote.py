"""The kaggle and colab backends, through the real `kaggle` client against a loopback
stand-in of its endpoints, and a stand-in `colab` executable checked against the real CLI."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.kaggle_server import FakeKaggle

ROOT = Path(__file__).resolve().parent.parent


def sweep(*args: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lib", "sweep", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                          timeout=timeout)


def kaggle_env(tmp_path: Path, **extra) -> dict:
    """Placeholder credentials, a private config folder, kagglesdk's TEST endpoint."""
    config = tmp_path / "kaggle-config"
    config.mkdir(exist_ok=True)
    return {"KAGGLE_API_ENVIRONMENT": "TEST", "KAGGLE_CONFIG_DIR": str(config),
            "HOME": str(tmp_path), "KAGGLE_USERNAME": "tester", "KAGGLE_KEY": "placeholder",
            **extra}


SMOKE = ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True", "-p", "EPOCHS", "1",
         "-p", "DATA_DIR", "/kaggle/working/data"]


@pytest.mark.notebook
def test_kaggle_sweep_pushes_polls_and_gathers_each_cell(tmp_path):
    out = tmp_path / "k"
    args = ["fashion_mnist", "--grid", "SEED=1,2", *SMOKE, "--out", str(out), "--on", "kaggle",
            "--max-running", "1", "--poll", "0.5", "--hours-per-cell", "20"]
    with FakeKaggle(tmp_path / "kaggle-side", {"OMP_NUM_THREADS": "1"}) as server:
        proc = sweep(*args, env=kaggle_env(tmp_path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # The quota warning: 2 cells x 20 h > 30 h, one line.
        warn = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
        assert len(warn) == 1 and "40.0 h exceed the 30 h" in warn[0]
        pushes = [b for e, b, _ in server.requests if e == "SaveKernel"]
        assert [b["slug"] for b in pushes] == ["tester/fashion-mnist-kaggle-p100-seed-1",
                                               "tester/fashion-mnist-kaggle-p100-seed-2"]
        first = pushes[0]
        assert first["enableGpu"] is True and first["isPrivate"] is True
        assert first["machineShape"] == "NvidiaTeslaP100" and first["language"] == "python"
        nb = json.loads(first["text"])
        injected = next(c for c in nb["cells"]
                        if "injected-parameters" in c["metadata"].get("tags", []))
        assert "SEED = 1\n" in injected["source"] and 'OUT_DIR = "/kaggle/working/out"' in \
            injected["source"]
        assert all(c.get("outputs", []) == [] for c in nb["cells"] if c["cell_type"] == "code")
        # --max-running 1: the second push waits for the first kernel to complete.
        order = [e for e, _, _ in server.requests]
        second = [i for i, e in enumerate(order) if e == "SaveKernel"][1]
        assert "ListKernelSessionOutput" in order[:second]
        assert all(a.startswith("Basic ") for _, _, a in server.requests)
        n_requests = len(server.requests)
        again = sweep(*args, env=kaggle_env(tmp_path))
        assert again.returncode == 0 and "2 cells, 2 finished, 0 to run" in again.stdout
        assert len(server.requests) == n_requests, "a finished grid asks Kaggle nothing"
    for seed in (1, 2):
        run = out / "cells" / f"seed={seed}" / "run"
        records = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["epoch"] == 1 and (run / "checkpoints").is_dir()
    with open(out / "summary.csv") as f:
        assert [(r["SEED"], r["status"]) for r in csv.DictReader(f)] == [("1", "done"),
                                                                          ("2", "done")]


def test_kaggle_without_credentials_is_one_line(tmp_path):
    env = kaggle_env(tmp_path)
    env.pop("KAGGLE_USERNAME"), env.pop("KAGGLE_KEY")
    env["KAGGLE_API_TOKEN"] = ""
    proc = sweep("fashion_mnist", "--grid", "SEED=1", "--out", str(tmp_path / "k"), "--on",
                 "kaggle", env=env, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no Kaggle credentials" in lines[0], proc.stderr
    assert (tmp_path / "k" / "cells" / "seed=1" / "cell.json").exists(), "grid state kept"


@pytest.mark.notebook
def test_kaggle_cell_that_fails_remotely_is_one_line_and_retried(tmp_path):
    """The kernel errors (DEVICE cuda on a machine without one): pushed once more with its
    output attached, then, no progress in two attempts, given up: one line, the state kept;
    fixing nothing and re-running pushes that cell again."""
    out = tmp_path / "k"
    args = ["fashion_mnist", "--grid", "SEED=1", *SMOKE, "-p", "DEVICE", "cuda", "--out",
            str(out), "--on", "kaggle", "--poll", "0.5"]
    with FakeKaggle(tmp_path / "kaggle-side", {"NO_CUDA": "1"}) as server:
        proc = sweep(*args, env=kaggle_env(tmp_path))
        assert proc.returncode == 1
        failed = [line for line in proc.stderr.splitlines() if line.startswith("cell ")]
        assert len(failed) == 1 and "seed=1 failed: kernel tester/" in failed[0]
        assert "ended ERROR" in failed[0] and "DeviceError" in failed[0]
        assert "no progress in 2 attempts in a row" in failed[0]
        assert "run the same command again" in proc.stderr
        pushes = [b for e, b, _ in server.requests if e == "SaveKernel"]
        assert len(pushes) == 2 and pushes[1]["kernelDataSources"] == [pushes[0]["slug"]]
        again = sweep(*args, env=kaggle_env(tmp_path))
        assert again.returncode == 1
        assert [e for e, _, _ in server.requests].count("SaveKernel") == 4


@pytest.mark.notebook
def test_kaggle_cell_longer_than_a_session_continues_on_its_next_push(tmp_path):
    """The first kernel reaches its session limit (the stand-in's shortened one) after a
    step: it stops itself, saved, and completes with STOPPED.json in its output. That is not
    DONE: the cell is pushed to its second slug with the first kernel as a kernel source,
    the new session carries the run over from /kaggle/input and finishes it."""
    out = tmp_path / "k"
    args = ["fashion_mnist", "--grid", "SEED=1", *SMOKE[:6], "-p", "EPOCHS", "2",
            "--out", str(out), "--on", "kaggle", "--poll", "0.5"]
    with FakeKaggle(tmp_path / "kaggle-side", {"OMP_NUM_THREADS": "1"},
                    session_hours=[1e-9]) as server:
        proc = sweep(*args, env=kaggle_env(tmp_path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        pushes = [b for e, b, _ in server.requests if e == "SaveKernel"]
        first, second = "tester/fashion-mnist-kaggle-p100-seed-1", \
            "tester/fashion-mnist-kaggle-p100-seed-1-b"
        assert [b["slug"] for b in pushes] == [first, second]
        assert "kernelDataSources" not in pushes[0]  # an empty list is not sent
        assert pushes[1]["kernelDataSources"] == [first]
        assert "stopped itself before the session limit; pushing it again" in proc.stdout
        log = (tmp_path / "kaggle-side" / second.split("/")[1] / "executed.ipynb").read_text()
        assert "carried over the run in" in log and "/input/notebooks/" + first in log
        pages = [b for e, b, _ in server.requests if e == "ListKernelSessionOutput"]
        assert any(b.get("pageToken") for b in pages), "the output came in pages"
    run = out / "cells" / "seed=1" / "run"
    records = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2] and not (run / "STOPPED.json").exists()
    assert (out / "cells" / "seed=1" / "DONE.json").exists()


def colab_env(tmp_path: Path, **extra) -> dict:
    """A `colab` stand-in first on PATH, its call log and VM folders in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "colab"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                   "from tests.fakes.colab_cli import main\nraise SystemExit(main(sys.argv[1:]))\n")
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "COLAB_FAKE_LOG": str(tmp_path / "colab-calls.jsonl"),
            "COLAB_FAKE_VMS": str(tmp_path / "vms"), **extra}


def colab_calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "colab-calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


COLAB_SMOKE = ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True", "-p", "EPOCHS", "1",
               "-p", "DATA_DIR", "/content/data"]


def test_the_colab_stand_in_refuses_a_flag_the_real_cli_lacks(tmp_path):
    env = {**os.environ, **colab_env(tmp_path)}
    bad = subprocess.run(["colab", "new", "-s", "x", "--accelerator", "T4"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "No such option: --accelerator" in bad.stderr
    ok = subprocess.run(["colab", "new", "-s", "x", "--gpu", "T4"], env=env, capture_output=True,
                        text=True)
    assert ok.returncode == 0 and (tmp_path / "vms" / "x" / "gpu").read_text() == "T4"


@pytest.mark.notebook
def test_colab_sweep_runs_each_cell_on_a_fresh_vm_and_releases_it(tmp_path):
    out = tmp_path / "c"
    args = ["fashion_mnist", "--grid", "SEED=1,2", *COLAB_SMOKE, "--out", str(out), "--on",
            "colab", "--gpu", "L4", "--jobs", "1", "--time", "30"]
    proc = sweep(*args, env=colab_env(tmp_path, COLAB_FAKE_ENV=json.dumps(
        {"OMP_NUM_THREADS": "1"})))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = colab_calls(tmp_path)
    assert [c[0] for c in calls] == ["new", "exec", "exec", "download", "stop"] * 2
    new, exec_nb = calls[0], calls[1]
    session = new[new.index("-s") + 1]
    assert new[new.index("--gpu") + 1] == "L4"
    assert all(c[c.index("-s") + 1] == session for c in calls[:5])
    assert exec_nb[exec_nb.index("--timeout") + 1] == "1800.0"
    pushed = json.loads(Path(exec_nb[exec_nb.index("-f") + 1]).read_text())
    injected = next(c for c in pushed["cells"]
                    if "injected-parameters" in c["metadata"].get("tags", []))
    assert 'OUT_DIR = "/content/out"' in "".join(injected["source"])
    assert not (tmp_path / "vms").exists() or not any((tmp_path / "vms").iterdir())
    for seed in (1, 2):
        run = out / "cells" / f"seed={seed}" / "run"
        assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["epoch"] == 1
        assert (out / "cells" / f"seed={seed}" / "notebook.ipynb").exists()
    assert "| 1 | test_accuracy | " in proc.stdout and "| 2 | test_accuracy | " in proc.stdout


@pytest.mark.notebook
def test_colab_cell_that_fails_is_one_line_and_the_vm_is_still_released(tmp_path):
    out = tmp_path / "c"
    args = ["fashion_mnist", "--grid", "SEED=1", *COLAB_SMOKE, "-p", "DEVICE", "cuda", "--out",
            str(out), "--on", "colab"]
    proc = sweep(*args, env=colab_env(tmp_path, COLAB_FAKE_ENV=json.dumps({"NO_CUDA": "1"})))
    assert proc.returncode == 1
    failed = [line for line in proc.stderr.splitlines() if line.startswith("cell ")]
    assert len(failed) == 1 and failed[0].startswith("cell seed=1 failed: DeviceError: ")
    assert "no progress in 2 attempts in a row" in failed[0]
    # Each VM: the notebook, then packing (nothing to pack: no download), then released.
    assert [c[0] for c in colab_calls(tmp_path)] == ["new", "exec", "exec", "stop"] * 2
    assert not any((tmp_path / "vms").iterdir())


@pytest.mark.notebook
def test_colab_cell_that_does_not_finish_runs_again_from_its_uploaded_partial_run(tmp_path):
    """The first VM's session ends (the stand-in's shortened limit) after a step: the notebook
    stops itself, saved; packing and downloading still run, and the next VM gets that run
    uploaded before the notebook, which resumes it and finishes."""
    out = tmp_path / "c"
    args = ["fashion_mnist", "--grid", "SEED=1", *COLAB_SMOKE[:6], "-p", "EPOCHS", "2",
            "-p", "DATA_DIR", "/content/data", "--out", str(out), "--on", "colab"]
    proc = sweep(*args, env=colab_env(tmp_path, COLAB_FAKE_ENV=json.dumps(
        {"OMP_NUM_THREADS": "1"}), COLAB_FAKE_LIMITS="[1e-9]"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stopped itself before the session limit; running it again" in proc.stdout
    calls = [c[0] for c in colab_calls(tmp_path)]
    assert calls == ["new", "exec", "exec", "download", "stop",
                     "new", "upload", "exec", "exec", "exec", "download", "stop"]
    executed = (out / "cells" / "seed=1" / "notebook.ipynb").read_text()
    assert "resumed from" in executed and "at epoch 0, batch 1" in executed
    run = out / "cells" / "seed=1" / "run"
    records = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2] and not (run / "STOPPED.json").exists()


def test_colab_without_credentials_is_one_line_and_resumable(tmp_path):
    out = tmp_path / "c"
    args = ["fashion_mnist", "--grid", "SEED=1", *COLAB_SMOKE, "--out", str(out), "--on", "colab"]
    proc = sweep(*args, env=colab_env(tmp_path, COLAB_FAKE_NO_AUTH="1"), timeout=120)
    assert proc.returncode == 1
    failed = [line for line in proc.stderr.splitlines() if line.startswith("cell ")]
    assert len(failed) == 1 and "`colab new` failed ([colab] Error: no credentials" in failed[0]
    assert (out / "cells" / "seed=1" / "FAILED.json").exists()
    assert [c[0] for c in colab_calls(tmp_path)] == ["new"], "no VM: nothing to stop"


def test_kernel_slugs_are_unique_and_within_kaggles_limit():
    from lib.cli.sweep.kaggle import MAX_SLUG, slug_for

    short = slug_for("fashion-mnist-kaggle-p100", "seed=1")
    assert short == "fashion-mnist-kaggle-p100-seed-1"
    cells = [f"optimizer={o}__seed={s}__label_noise=0.{n}" for o in ("adamw", "radam")
             for s in range(3) for n in range(3)]
    slugs = [slug_for("optimizer-study-kaggle-p100", c) for c in cells]
    assert len(set(slugs)) == len(cells) and max(map(len, slugs)) <= MAX_SLUG
    assert all(s == s.lower() and "--" not in s and not s.endswith("-") for s in slugs)


def test_an_executed_notebooks_error_is_its_last_line(tmp_path):
    import nbformat

    from lib.cli.sweep.colab import notebook_error

    nb = nbformat.v4.new_notebook()
    ok = nbformat.v4.new_code_cell("print(1)")
    ok.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    bad = nbformat.v4.new_code_cell("boom()")
    bad.outputs = [nbformat.v4.new_output("error", ename="ConfigError",
                                          evalue="first line\nEPOCHS=0 must be > 0", traceback=[])]
    nb.cells = [ok, bad]
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert notebook_error(tmp_path / "x.ipynb") == "ConfigError: EPOCHS=0 must be > 0"
    nb.cells = [ok]
    nbformat.write(nb, tmp_path / "y.ipynb")
    assert notebook_error(tmp_path / "y.ipynb") is None
    assert "did not come back" in notebook_error(tmp_path / "missing.ipynb")


def _output(folder: Path, files: dict) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_kaggle_judges_how_a_kernel_ended(tmp_path):
    """DONE only for a completed kernel whose run finished with something under out/; any
    other end is pushed again, until two attempts in a row make no progress."""
    from lib.cli.sweep.kaggle import judge

    state = {"ref": "me/a", "attempt": 1}
    done = _output(tmp_path / "done", {"metrics.jsonl": "{}",
                                       "checkpoints/ckpt-e0002-b000000.pt": ""})
    assert judge("COMPLETE", done, "", state)[0] == "done"
    empty = tmp_path / "empty"
    empty.mkdir()
    verdict, why, nxt = judge("COMPLETE", empty, "", state)
    assert (verdict, nxt["stalled"], nxt["source"]) == ("retry", 1, "me/a")
    assert why == "completed with nothing under out/"
    assert judge("COMPLETE", empty, "", dict(nxt, ref="me/a-b"))[0] == "give up"
    stopped = _output(tmp_path / "stopped", {"STOPPED.json": "{}",
                                             "checkpoints/ckpt-e0000-b000003.pt": ""})
    verdict, why, nxt = judge("COMPLETE", stopped, "", state)
    assert (verdict, nxt["stalled"], nxt["attempt"]) == ("retry", 0, 2)
    assert nxt["progress"] == ["checkpoints/ckpt-e0000-b000003.pt"]
    # Timed out (no output kept) after an attempt that saved: one more try, then given up.
    gone = tmp_path / "gone"
    verdict, why, nxt = judge("ERROR", gone, "timed out", dict(nxt, ref="me/a-b"))
    assert (verdict, why) == ("retry", "ended ERROR: timed out")
    verdict, why, _ = judge("ERROR", gone, "timed out", dict(nxt, ref="me/a"))
    assert verdict == "give up" and "no progress in 2 attempts in a row" in why


def test_kaggle_needs_the_client_that_pages_kernel_output():
    from lib.cli.params import UsageError
    from lib.cli.sweep.kaggle import check_client_version

    check_client_version("2.2.2")
    check_client_version("2.10.0")
    with pytest.raises(UsageError, match=r"kaggle client 2.2.1 .* first page .* kaggle>=2.2.2"):
        check_client_version("2.2.1")


def test_kaggle_time_limit_becomes_the_notebooks_session_limit(tmp_path):
    """--time sets the kernel's timeout and, in a cell after the parameters, the limit the
    notebook stops itself before; retries alternate slugs and name their source."""
    import nbformat

    from lib.cli.sweep import Cell
    from lib.cli.sweep.kaggle import prepare

    cell = Cell("seed=1", {"SEED": 1}, tmp_path / "seed=1")
    cell.dir.mkdir()
    (cell.dir / "cell.json").write_text(json.dumps(
        {"name": "seed=1", "values": {"SEED": 1}, "workload": "fashion_mnist",
         "platform": "kaggle_p100", "params": {"SEED": 1, "SMOKE": True}}))
    folder, ref = prepare(cell, "me", attempt=2, source="me/fashion-mnist-kaggle-p100-seed-1",
                          minutes=90)
    assert ref == "me/fashion-mnist-kaggle-p100-seed-1-b"
    meta = json.loads((folder / "kernel-metadata.json").read_text())
    assert meta["kernel_sources"] == ["me/fashion-mnist-kaggle-p100-seed-1"]
    nb = nbformat.read(folder / "notebook.ipynb", as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    at = next(i for i, t in enumerate(tags) if "injected-parameters" in t)
    assert "session-limit" in tags[at + 1]
    assert 'os.environ["TA_SESSION_HOURS"] = "1.5"' in nb.cells[at + 1].source
