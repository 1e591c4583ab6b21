"""`train-anywhere` / `python -m lib`: every subcommand, --help, and bad inputs as one line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lib import workloads
from lib.cli import main as cli
from lib.cli import params

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True"]


def ta(*args: str, cwd: Path | None = None, env: dict | None = None,
       timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m lib ARGS` in a fresh process, as a user types it."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "lib", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full_env, timeout=timeout)


def stderr_lines(proc) -> list[str]:
    """What the user sees on stderr, less the kernel's own transport warning."""
    return [line for line in proc.stderr.splitlines()
            if line.strip() and "[IPKernelApp]" not in line]


def test_list_names_every_workload_and_platform(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    found = sorted(p.stem for p in (ROOT / "notebooks_src").glob("*.py"))
    assert len(found) >= 4
    for w in found:  # with its title: the first line of its module's docstring
        title = workloads.title(w)
        assert title and f"  {w}  " in out and f"  {title}\n" in out
    for p in ("colab_t4", "colab_tpu", "kaggle_p100", "kaggle_t4x2", "kaggle_tpu", "local"):
        assert f"  {p} " in out


def test_params_are_read_from_the_parameters_cell(capsys):
    """Every assignment of the source's parameters cell, its default and comment, in order."""
    assert cli.main(["params", "fashion_mnist"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    names = [line.split()[0] for line in lines]
    src = (ROOT / "notebooks_src" / "fashion_mnist.py").read_text()
    cell = src.split('# %% tags=["parameters"]\n')[1].split("# %%")[0]
    expected = [line.split(" = ")[0] for line in cell.splitlines() if " = " in line]
    assert names == expected
    gamma = next(line for line in lines if line.split()[0] == "GAMMA")
    assert gamma.split()[1] == "0.7" and gamma.endswith("learning-rate decay per epoch (StepLR)")
    study = {p.name: p for p in params.parameters("optimizer_study")}
    assert study["SEEDS"].default == [0, 1, 2] and study["OPTIMIZER"].default is None


@pytest.mark.parametrize("text,value", [("3", 3), ("0.5", 0.5), ("True", True), ("false", False),
                                        ("None", None), ("[0, 1]", [0, 1]), ("adamw", "adamw"),
                                        ("'x y'", "x y"), ("runs/a", "runs/a")])
def test_parse_value(text, value):
    assert params.parse_value(text) == value


@pytest.mark.parametrize("argv,expect", [
    ([], ["list", "params", "run", "report", "sweep"]),
    (["list"], ["workloads and the platforms"]),
    (["params"], ["WORKLOAD", "default and comment"]),
    (["run"], ["--platform", "-p NAME VALUE", "--out DIR", "papermill", "resumes"]),
    (["report"], ["OUT_DIR", "without training"]),
    (["sweep"], ["--grid NAME=V1,V2", "--on BACKEND", "--jobs", "--partition", "--gpus",
                 "--time MINUTES", "--max-running", "--quota-hours", "--gpu {T4,L4,A100}"]),
])
def test_help_at_every_level(argv, expect, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in expect:
        assert text in out, text


def test_python_m_lib_is_the_console_script():
    proc = ta("--help")
    assert proc.returncode == 0 and "usage: train-anywhere" in proc.stdout
    script = Path(sys.executable).parent / "train-anywhere"
    assert script.exists(), "pip install -e . declares the console script"
    proc = subprocess.run([str(script), "list"], capture_output=True, text=True)
    assert proc.returncode == 0 and "optimizer_study" in proc.stdout


BAD = [
    (["run", "fashion_mnst"], "unknown workload 'fashion_mnst' (did you mean fashion_mnist?)"),
    (["params", "nope"], "unknown workload 'nope'"),
    (["sweep", "optimiser_study", "--grid", "SEED=0", "--out", "{tmp}"],
     "unknown workload 'optimiser_study' (did you mean optimizer_study?)"),
    (["run", "fashion_mnist", "--platform", "local_mps"],
     "platform 'local_mps' is now 'local' (this machine: CUDA, MPS or the CPU)"),
    (["run", "fashion_mnist", "--platform", "colab_t5"],
     "unknown platform 'colab_t5' (did you mean colab_t4?)"),
    (["sweep", "fashion_mnist", "--platform", "kaggle", "--grid", "SEED=1", "--out", "{tmp}"],
     "unknown platform 'kaggle'"),
    (["run", "fashion_mnist", "-p", "EPOHCS", "3"],
     "unknown parameter EPOHCS (did you mean EPOCHS?)"),
    (["run", "fashion_mnist", "-p", "epochs", "3"], "'epochs' is not UPPER_CASE"),
    (["run", "fashion_mnist", "-p", "EPOCHS", "-1"], "EPOCHS=-1 must be > 0"),
    (["run", "fashion_mnist", "-p", "EPOCHS", "many"], "EPOCHS='many' has type str"),
    (["run", "fashion_mnist", "-p", "OUT_DIR", "x"], "--out DIR, not -p OUT_DIR"),
    (["run", "fashion_mnist", "-p", "PLATFORM", "colab_t4"], "contradicts --platform"),
    (["run", "optimizer_study", "-p", "OPTIMIZER", "adamm"], "OPTIMIZER"),
    # the fix is the user's value, quoted once for a shell (issue 52)
    (["run", "fashion_mnist", "-p", "TRACKERS", "wandb"],
     """TRACKERS='wandb' has type str; expected a list of str; set it with """
     """-p TRACKERS '["wandb"]'."""),
    (["run", "fashion_mnist", "-p", "TRACKERS", '["neptune"]'],
     """TRACKERS=["neptune"]: 'neptune' is not a tracker; expected each of ['tensorboard', """
     """'wandb', 'mlflow'] at most once; set it with -p TRACKERS '["tensorboard"]'."""),
    (["run", "fashion_mnist", "-p", "TRACKERS", '["wandbb", "mlflow"]'],
     """set it with -p TRACKERS '["wandb", "mlflow"]'."""),
    # refused before any kernel starts, as the session would refuse it (lib.training.batch)
    (["run", "fashion_mnist", *SMOKE, "-p", "MICRO_BATCH", "7", "--out", "{tmp}/o"],
     "MICRO_BATCH=7 does not divide the 32 samples each device takes per step (global batch "
     "32 over 1 device(s)); expected one of [1, 2, 4, 8, 16, 32]; set it with -p MICRO_BATCH "
     "auto"),
    (["run", "fashion_mnist", "-p", "BATCH_SIZE", "48", "-p", "MICRO_BATCH", "32", "--out",
      "{tmp}/o"], "MICRO_BATCH=32 does not divide the 48 samples each device takes"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["run"], "the following arguments are required: WORKLOAD"),
    (["report", "{tmp}/missing"], "is not a folder"),
    (["report", "{tmp}"], "holds no finished run"),
    (["sweep", "optimizer_study", "--grid", "SEEDS=0", "--grid", "OPTIMISER=sgd", "--out", "{tmp}"],
     "unknown parameter OPTIMISER (did you mean OPTIMIZER?) in --grid"),
    (["sweep", "optimizer_study", "--grid", "SEED", "--out", "{tmp}"], "is not NAME=v1,v2"),
    (["sweep", "optimizer_study", "--out", "{tmp}"], "no --grid given"),
    (["sweep", "optimizer_study", "--grid", "SEED=0", "--grid", "SEED=1", "--out", "{tmp}"],
     "SEED is given twice"),
    (["sweep", "optimizer_study", "--grid", "SEED=0,1", "-p", "SEED", "2", "--out", "{tmp}"],
     "SEED is both in --grid and -p"),
    (["sweep", "optimizer_study", "--grid", "SEED=0,-1", "--out", "{tmp}"], "SEED=-1 is negative"),
    (["sweep", "optimizer_study", "--grid", "SEED=0", "--on", "aws", "--out", "{tmp}"],
     "unknown backend --on aws"),
    (["sweep", "optimizer_study", "--grid", "SEED=0", "--jobs", "two", "--out", "{tmp}"],
     "invalid int value: 'two'"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    """Checked before any kernel starts: exit 2, one line on stderr naming the value."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as raised:
        raise SystemExit(cli.main(argv))
    assert raised.value.code == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert message in lines[0] and "\\" not in lines[0]  # no escaped quotes to read through
    assert not list(tmp_path.rglob("*.ipynb")), "nothing may run on a usage error"
    assert not (tmp_path / "o").exists()  # no --out folder made


def test_sweep_refuses_a_folder_holding_another_sweep(tmp_path, capsys):
    (tmp_path / "sweep.json").write_text(json.dumps(
        {"workload": "fashion_mnist", "grid": {"SEED": [1]}, "params": {}}))
    assert cli.main(["sweep", "fashion_mnist", "--grid", "SEED=1,2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already holds a different sweep" in err


@pytest.mark.notebook
def test_run_shows_the_notebooks_error_as_one_line(tmp_path):
    """Valid parameters, but the session refuses the device: the notebook's one line, exit 2
    (a mistake to fix), and the run folder stays empty."""
    proc = ta("run", "fashion_mnist", *SMOKE, "-p", "EPOCHS", "1", "-p", "DEVICE", "cuda",
              "-p", "DATA_DIR", str(tmp_path / "data"), "--out", str(tmp_path / "o"),
              env={"NO_CUDA": "1"})
    assert proc.returncode == 2
    err = stderr_lines(proc)
    assert len(err) == 1, proc.stderr
    assert err[0].startswith("train-anywhere run: DeviceError: ") and 'DEVICE="cuda"' in err[0]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "o").rglob("*.ipynb"))


def test_make_demo_runs_the_sample_into_its_own_folder(monkeypatch, tmp_path):
    """`make demo` is `python -m lib.cli.demo`: the sample run in demo/sample, never in the folder
    of a real-data run (demo/real), which would be refused as a changed experiment."""
    dry = subprocess.run(["make", "-n", "--no-print-directory", "demo",
                          "VENV=/nonexistent-venv"], cwd=cli.ROOT, capture_output=True, text=True)
    assert dry.stdout.splitlines()[-1].endswith("-m lib.cli.demo"), dry.stdout
    from lib.cli import demo

    calls = []
    monkeypatch.setattr(demo, "cli_main", lambda argv: calls.append(argv) or 0)
    demo.main(["--out", str(tmp_path)])
    demo.main(["--out", str(tmp_path), "--real", "--epochs", "14"])
    (sample, real) = calls
    assert sample[-1] == str(tmp_path / "sample") and real[-1] == str(tmp_path / "real")
    assert " ".join(sample).count("True") == 2 and "True" not in real
    assert real[real.index("EPOCHS") + 1] == "14"


@pytest.mark.parametrize("argv,message", [
    (["run", "fashion_mnist", "--out", "{file}"], "--out '{file}' is a file, not a folder"),
    (["run", "fashion_mnist", "--out", "{file}/run"], "lies below '{file}', which is a file"),
    (["run", "fashion_mnist", "-p", "DATA_DIR", "{file}"], "-p DATA_DIR '{file}' is a file"),
    (["sweep", "fashion_mnist", "--grid", "SEED=1,2", "--out", "{file}"],
     "--out '{file}' is a file, not a folder"),
    (["sweep", "fashion_mnist", "--grid", "SEED=1", "-p", "DATA_DIR", "{file}", "--out",
      "{tmp}/s"], "-p DATA_DIR '{file}' is a file"),
    (["report", "{file}"], "{file} is not a folder"),
])
def test_every_path_mistake_is_one_line_exit_2(argv, message, tmp_path, capsys):
    """`--out` naming a file (issue 35: a FileExistsError traceback, exit 1), below a file, a
    DATA_DIR that is a file: one line naming it, exit 2, nothing written."""
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    fill = {"{file}": str(file), "{tmp}": str(tmp_path)}
    for key, value in fill.items():
        argv = [a.replace(key, value) for a in argv]
        message = message.replace(key, value)
    assert cli.main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and message in err[0], err
    assert file.read_text() == "mine\n" and sorted(tmp_path.iterdir()) == [file]


def test_ctrl_c_says_how_to_resume_and_the_front_end_is_put_back(monkeypatch, capsys):
    """Ctrl-C during a command is one line saying the same command resumes (exit 130), and
    the front end the caller had set (a notebook calling main) is restored."""
    def interrupted(args):
        assert os.environ[cli.FRONT_END_ENV] == "cli"
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_list", interrupted)
    monkeypatch.setenv(cli.FRONT_END_ENV, "notebook")
    assert cli.main(["list"]) == 130
    assert capsys.readouterr().err == "interrupted; run the same command again to resume\n"
    assert os.environ[cli.FRONT_END_ENV] == "notebook"


def test_the_headline_of_a_run_that_recorded_no_score_says_so(tmp_path):
    """A run whose epochs recorded no test score (its evaluation never ran) gets the line
    that says so, not a number from nowhere; a scored one gets best and last, in percent."""
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "train_loss": 2.3}\n')
    assert cli._headline(tmp_path, "fashion_mnist", sample=False) == [
        "  no test_accuracy recorded after 1 epoch(s)"]
    (tmp_path / "metrics.jsonl").write_text(
        '{"epoch": 1, "test_accuracy": 0.5, "device": "cpu"}\n'
        '{"epoch": 2, "test_accuracy": 0.25, "device": "cpu"}\n')
    (line,) = cli._headline(tmp_path, "fashion_mnist", sample=True)
    assert line.startswith("  test_accuracy 50.00% at epoch 1 (best), 25.00% at epoch 2 (last)")
    assert line.endswith("training works)")


def _interrupted(tmp_path: Path, ready, slow: str) -> tuple[subprocess.Popen, str, str,
                                                             list[str]]:
    """`train-anywhere run` (3 slow SMOKE epochs) in a terminal's place, sent the SIGINT of a
    Ctrl-C (to its process group, as a terminal does) once `ready(out)`; with a TMPDIR of its
    own, so what it leaves there is seen; `slow`: TA_SLOWPOINTS (lib.base.faults), so that
    the moment lasts. (process, stdout, stderr, its argv after -m lib)."""
    import signal
    import time

    out, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    typed = ["run", "fashion_mnist", *SMOKE, "-p", "EPOCHS", "3", "-p", "DATA_DIR",
             str(tmp_path / "data"), "--out", str(out)]
    # the venv's console script first on PATH, as after `pip install` and activating it: the
    # line must name the program as it is typed then
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp), "TA_SLOWPOINTS": slow,
           "PATH": path}
    proc = subprocess.Popen([sys.executable, "-m", "lib", *typed], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while not ready(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    return proc, stdout, stderr, typed


@pytest.mark.notebook
@pytest.mark.parametrize("moment", ["at start-up", "in epoch 1", "after epoch 1"])
def test_ctrl_c_says_where_it_stopped_and_how_to_resume_and_keeps_the_notebook(moment,
                                                                               tmp_path):
    """Issue 52: interrupted at start-up (the run folder made, no session recorded yet), in its
    first epoch (training started, nothing saved yet) or in its second: one line saying where
    and the command that resumes it, the whole command with its program's name; the
    session's notebook in the run folder; nothing left in the temp folder. After epoch 1,
    the resumed run interrupted again before its first epoch ends: everything the first
    session left is as it was, and the line says where and how to resume once more."""
    from lib.runs.records import read_jsonl

    out = tmp_path / "run"
    started = {"at start-up": lambda o: o.is_dir() and not (o / "sessions.jsonl").exists(),
               "in epoch 1": lambda o: (o / "sessions.jsonl").exists(),
               "after epoch 1": lambda o: len(read_jsonl(o / "metrics.jsonl")) >= 1}[moment]
    slow = "experiment.record=3" if moment == "at start-up" else "train.step=0.4"  # seconds
    proc, stdout, stderr, typed = _interrupted(tmp_path, started, slow)
    assert proc.returncode == 130, (stdout, stderr)
    lines = [x for x in stderr.splitlines() if x.strip() and "[IPKernelApp]" not in x]
    assert len(lines) == 1, stderr  # one line, no traceback
    line = lines[0]
    notebook = out / "fashion_mnist-session-1.ipynb"
    if moment == "at start-up":
        assert not (out / "sessions.jsonl").exists(), line
        where = "before training started"
    elif moment == "in epoch 1":
        assert read_jsonl(out / "metrics.jsonl") == [], line  # no epoch finished
        where = "in epoch 1 of 3, before its first checkpoint"
    else:
        assert len(read_jsonl(out / "metrics.jsonl")) == 1
        where = f"in epoch 2 of 3, after epoch 1 was saved in {out}"
        # report: the notebook the command line kept, not "run in Jupyter or by papermill"
        from tests.notebook_run import report_without_torch

        reported = report_without_torch(out)
        assert str(notebook) in reported and "(run in Jupyter" not in reported
    resume = "train-anywhere run fashion_mnist -p SMOKE True -p SAMPLE_DATA True -p EPOCHS 3 " \
        f"-p DATA_DIR {shlex.quote(str(tmp_path / 'data'))} --out {shlex.quote(str(out))}"
    assert line == f"interrupted {where}; its notebook is {notebook}; resume with: {resume}"
    import nbformat

    assert nbformat.read(notebook, as_version=4).cells  # the session's, as far as it ran
    assert not list((tmp_path / "tmp").glob("train-anywhere-*"))
    if moment == "after epoch 1":
        _resumed_and_interrupted_before_its_first_epoch(tmp_path, out, resume)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def _resumed_and_interrupted_before_its_first_epoch(tmp_path: Path, out: Path,
                                                    resume: str) -> None:
    """The command the line gave, run and interrupted once its session started training,
    before the epoch it resumes is saved."""
    from lib.runs.identity import SESSIONS

    before = _files(out)
    rows = lambda o: len((o / SESSIONS).read_text().splitlines())  # noqa: E731
    proc, stdout, stderr, _ = _interrupted(tmp_path, lambda o: rows(o) == 2, "train.step=0.4")
    assert proc.returncode == 130, (stdout, stderr)
    lines = [x for x in stderr.splitlines() if x.strip() and "[IPKernelApp]" not in x]
    second = out / "fashion_mnist-session-2.ipynb"
    assert lines == [f"interrupted in epoch 2 of 3, after epoch 1 was saved in {out}; its "
                     f"notebook is {second}; resume with: {resume}"], stderr
    after = _files(out)
    assert after.pop(second.name) and after[SESSIONS].startswith(before[SESSIONS])
    assert rows(out) == 2 and sorted(after) == sorted(before)
    changed = [name for name in before if name != SESSIONS and after[name] != before[name]]
    assert changed == [], changed  # checkpoints, metrics, config, the first notebook: as left
    assert not list((tmp_path / "tmp").glob("train-anywhere-*"))
