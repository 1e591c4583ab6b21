"""What a new user meets first (issue 35), typed as they type it: `train-anywhere run` twice in
one folder, a changed parameter, the same command again, more epochs, RESUME new, `report`,
and papermill's command line. One run folder serves every assertion (`tried`)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import nbformat
import pytest

from lib.base.progress import epoch_line, shown
from lib.runs.records import read_jsonl
from tests.notebook_run import markdown_outputs, report_without_torch, stream_text
from tests.test_cli import ROOT, SMOKE, stderr_lines, ta
from tests.unchanged import assert_same, snapshot

pytestmark = pytest.mark.notebook


@pytest.fixture(scope="module")
def tried(tmp_path_factory):
    """The issue's sequence in one folder: (first) two epochs; (refused) -p LR 0.5;
    (again) the first command again; (more) -p EPOCHS 3 with a session limit already reached;
    (fresh) -p LR 0.5 -p RESUME new. Each step: the process and the folder's files after it
    (tests/unchanged.py's snapshot: every file's sha256)."""
    tmp = tmp_path_factory.mktemp("first-use")
    out = tmp / "runs" / "my try"  # a space: paths are passed whole
    started = time.time()
    base = ["run", "fashion_mnist", *SMOKE, "-p", "DATA_DIR", str(tmp / "data"),
            "--out", str(out)]
    steps = {}

    temp = tmp / "tmp"  # the runs' TMPDIR: what they leave there is seen
    temp.mkdir()

    def step(name, *args, env=None, rc=0):
        proc = ta(*base, *args, env={"TMPDIR": str(temp), **(env or {})})
        assert proc.returncode == rc, (name, proc.stdout, proc.stderr)
        steps[name] = (proc, snapshot(out))
        proc.left_in_tmp = sorted(p.name for p in temp.glob("train-anywhere-*"))

    step("first", "-p", "EPOCHS", "2")
    # What bench_sweep dates a cell's first training step by: inside this run, before epoch 1
    # ended.
    from bench.bench_sweep import first_step

    steps["first_step"] = (started, first_step(out), (out / "metrics.jsonl").stat().st_mtime)
    step("refused", "-p", "EPOCHS", "2", "-p", "LR", "0.5", rc=2)
    step("again", "-p", "EPOCHS", "2")
    # A limit of 4 ms: the session stops (saved) before its first new epoch, as before a
    # Kaggle or Colab limit.
    step("more", "-p", "EPOCHS", "3", env={"TA_SESSION_HOURS": "0.000001"})
    step("fresh", "-p", "EPOCHS", "1", "-p", "LR", "0.5", "-p", "RESUME", "new",
         "-p", "TRACKERS", "[]")  # no tracker: the end line names no TensorBoard logs
    (out / "curves.png").unlink()  # `report` writes it again, without training
    steps["report"] = (ta("report", str(out)), snapshot(out))
    steps["report"][0].curves = (out / "curves.png").exists()
    steps["report without torch"] = report_without_torch(out)  # a resumed run's own folder
    return out, steps


def test_a_refused_run_leaves_every_file_as_it_was_and_says_so_in_one_line(tried):
    out, steps = tried
    proc, after = steps["refused"]
    (line,) = stderr_lines(proc)
    assert "ExperimentChanged" in line and "LR 1.0 -> 0.5" in line and "Traceback" not in line
    # said as typed at the terminal
    assert "give --out a new folder, or set it with -p RESUME new" in line
    assert_same(steps["first"][1], after, out)  # every file, the session's notebook included
    first = nbformat.read(out / "fashion_mnist-session-1.ipynb", as_version=4)
    assert [line.split()[1] for line in stream_text(first).splitlines()
            if line.startswith("epoch ")] == ["1/2", "2/2"]


def test_the_local_notebook_is_this_machine_and_says_what_it_found(tried):
    """The default platform is `local`: CUDA > MPS > CPU, saying which; Mac words on a Mac."""
    out, steps = tried
    text = stream_text(nbformat.read(out / "fashion_mnist-session-1.ipynb", as_version=4))
    device = next(line for line in text.splitlines() if " -> device " in line)
    assert device.startswith("Local (this machine: CUDA, MPS or CPU) notebook on the local "
                             "runtime -> device ")
    assert "this machine's best device: " in device or \
        "no CUDA GPU or Apple MPS found: this machine's CPU" in device, device
    if sys.platform != "darwin":
        assert "MPS_FALLBACK" not in text and "Mac" not in text


def test_each_session_that_trains_keeps_its_notebook_and_report_lists_them(tried):
    out, steps = tried
    assert "fashion_mnist-session-1.ipynb" in steps["first"][1]
    proc, after_again = steps["again"]
    # nothing trained: no notebook added, the first one unchanged
    assert sorted(k for k in after_again if k.endswith(".ipynb")) == \
        ["fashion_mnist-session-1.ipynb"]
    assert after_again["fashion_mnist-session-1.ipynb"] == \
        steps["first"][1]["fashion_mnist-session-1.ipynb"]
    assert "  executed notebook  none kept (this session trained nothing" in proc.stdout
    # a second `make demo`, nothing to train: nothing left in the temp folder, by any step
    assert [steps[s][0].left_in_tmp for s in ("first", "refused", "again", "more", "fresh")
            ] == [[]] * 5
    _, after_more = steps["more"]
    assert "fashion_mnist-session-2.ipynb" in after_more
    assert len(read_jsonl(out / "sessions.jsonl")) == 2  # one notebook per row
    # RESUME new: the fresh run's notebook in the fresh folder, the old folder as it was
    proc, after_fresh = steps["fresh"]
    assert proc.returncode == 0, proc.stderr
    assert f"executed notebook  {out / 'fresh-1' / 'fashion_mnist-session-1.ipynb'}" in \
        proc.stdout
    outputs = {name: next(x for x in steps[name][0].stdout.splitlines()
                          if x.startswith("  outputs ")) for name in ("first", "fresh")}
    assert outputs["first"].endswith("(checkpoints, metrics.jsonl, plots, TensorBoard logs)")
    assert outputs["fresh"].endswith("(checkpoints, metrics.jsonl, plots)"), outputs
    assert not (out / "fresh-1" / "tb").exists()
    assert_same(after_more, {k: v for k, v in after_fresh.items()
                             if k != "fresh-1" and not k.startswith("fresh-1/")}, out)
    report, _ = steps["report"]
    assert report.returncode == 0, report.stderr
    assert "| . | 2 | " in report.stdout and report.curves
    assert steps["report without torch"].startswith(report.stdout.split("\n\n")[0])
    listed = report.stdout.split("executed notebooks, one per session that trained:")[1]
    listed = listed.strip().split("\n\n")[0]  # the measured per-platform table follows
    assert [p.strip() for p in listed.strip().splitlines()] == [
        str(out / "fresh-1" / "fashion_mnist-session-1.ipynb"),
        str(out / "fashion_mnist-session-1.ipynb"), str(out / "fashion_mnist-session-2.ipynb")]


def test_the_terminal_says_what_the_notebook_says(tried):
    out, steps = tried
    started, first_step, epoch_one_ended = steps["first_step"]
    assert started < first_step < epoch_one_ended
    first = steps["first"][0].stdout.splitlines()
    epochs = [line for line in first if line.startswith("epoch ")]
    assert epochs == [epoch_line(r, 2, note="synthetic sample")
                      for r in read_jsonl(out / "metrics.jsonl")[:2]]
    ckpt = out / "checkpoints" / "ckpt-e0002-b000000.pt"
    again = steps["again"][0].stdout
    assert f"resumed from {ckpt} at epoch 2" in again
    assert "nothing to do: the checkpoint has 2 of 2 epochs" in again
    more = steps["more"][0].stdout
    assert f"resumed from {ckpt} at epoch 2" in more
    assert re.search(r"STOPPED before the session limit \(1e-06 h\): saved at (the end of epoch "
                     rf"2|epoch 3, batch \d+) in {re.escape(str(out))}\. To continue: re-run",
                     more), more


def test_one_metric_convention_on_the_terminal_in_the_table_and_the_plots(tried):
    """Percent everywhere a user reads accuracy; the terminal names the best epoch (the
    checkpoint the table and the confusion matrix use) and the last."""
    out, steps = tried
    records = read_jsonl(out / "metrics.jsonl")[:2]
    best = max(records, key=lambda r: r["test_accuracy"])
    stdout = steps["first"][0].stdout
    assert (f"test_accuracy {shown('test_accuracy', best['test_accuracy'])} at epoch "
            f"{best['epoch']} (best), {shown('test_accuracy', records[-1]['test_accuracy'])} "
            "at epoch 2 (last)") in stdout, stdout
    assert shown("test_accuracy", 0.5) == "50.00%"
    assert f"test_acc {shown('test_accuracy', records[0]['test_accuracy'])}" in stdout
    nb = nbformat.read(out / "fashion_mnist-session-1.ipynb", as_version=4)
    table = markdown_outputs(nb)
    percent = shown("test_accuracy", best["test_accuracy"]).removesuffix("%")
    assert "| | test accuracy (%) |" in table  # the unit in the header, the number as shown
    assert f"| best checkpoint (epoch {best['epoch']}) | {percent} |" in table, table
    from PIL import Image

    with Image.open(out / "confusion.png") as image:  # the run's own, not fresh-1's
        assert image.text["Title"].startswith(f"best checkpoint (epoch {best['epoch']})")


def test_papermill_as_typed_phrases_the_fix_for_papermill(tmp_path):
    """`papermill NOTEBOOK OUT -p EPOCHS -1`: the fix is papermill's -p, not the CLI's."""
    executed = tmp_path / "out.ipynb"
    proc = subprocess.run(
        [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "local" /
                                                "fashion_mnist.ipynb"),
         str(executed), "-p", "EPOCHS", "-1", "-p", "OUT_DIR", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode != 0
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors[0]["traceback"] == [
        "ConfigError: EPOCHS=-1 must be > 0; set it with papermill's -p EPOCHS 14."]
    assert not (tmp_path / "run").exists()
