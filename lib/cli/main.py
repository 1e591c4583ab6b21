"""`train-anywhere` (also `python -m lib`): every workload from a terminal.

The command line runs the platform notebook through papermill, so a script user runs
exactly what a notebook user runs, and the executed notebook is kept. Parameters are read
from the workload source's parameters cell (`notebooks_src/<workload>.py`), checked with
the same `from_params` the notebook's config cell calls, before any kernel starts.

    train-anywhere list
    train-anywhere params fashion_mnist
    train-anywhere run fashion_mnist -p SMOKE True -p SAMPLE_DATA True -p EPOCHS 2 --out runs/try
    train-anywhere report runs/try
    train-anywhere sweep optimizer_study --grid OPTIMIZER=sgd,adam --grid SEED=0,1 --out runs/s
    train-anywhere plan runs/try --quota kaggle_t4x2=18h   # where and by when the rest trains
    train-anywhere new my_experiment

Exit status: 0 done, 1 the notebook (or a grid cell) failed, 2 a mistake the user can fix (one
line: a parameter, a path, a run folder holding another experiment).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lib import workloads as contract
from lib.base.errors import FRONT_END_ENV
from lib.base.progress import RUN_LINES_ENV, best_record, shown
from lib.cli.execute import (
    NotebookFailed,
    Progress,
    execute,
    fmt_duration,
    headline,
    keep_notebook,
    notebook_path,
    records_of,
    sessions_seen,
)
from lib.cli.params import (
    ROOT,
    UsageError,
    absolute_paths,
    check_folder,
    check_platform,
    check_workload,
    collect_overrides,
    parameters,
    platforms,
    resolve_params,
    workloads,
)
from lib.cli.sweep import add_sweep_parser

DEFAULT_PLATFORM = "local"  # the local notebook: CUDA, MPS or the CPU, whatever is here


# Commands --------------------------------------------------------------------------------
def cmd_list(args) -> int:
    print("workloads:")
    names = workloads()
    width = max(map(len, names), default=0)
    for w in names:
        print(f"  {w:<{width}}  {contract.title(w)}")
    print("platforms:")
    found = platforms()
    width = max(map(len, found), default=0)
    for name, p in found.items():
        print(f"  {name:<{width}}  {p.title} ({p.gpu}, {p.accelerator})")
    print(f"`run` uses --platform {DEFAULT_PLATFORM} unless told: that notebook takes CUDA, "
          "MPS or the CPU, whichever this machine has.")
    return 0


def cmd_params(args) -> int:
    params = parameters(check_workload(args.workload))
    width = max(len(p.name) for p in params)
    shown = [repr(p.default) for p in params]
    vwidth = min(max(len(s) for s in shown), 40)
    print(f"parameters of {args.workload} (notebooks_src/{args.workload}.py; "
          "set them with -p NAME VALUE):")
    for p, s in zip(params, shown, strict=True):
        print(f"  {p.name:<{width}}  {s:<{vwidth}}  {p.comment}".rstrip())
    return 0


def _headline(out: Path, workload: str, sample: bool) -> list[str]:
    """Each run's headline score as the results table shows it: the best epoch's (the
    checkpoint kept as best), in percent where the table is, and the last epoch's."""
    metric = contract.get(workload).headline
    lines = []
    for label, _ in headline(out, metric)[1]:
        records = records_of((out if label == "." else out / label) / "metrics.jsonl")
        best, last = best_record(records, metric), records[-1]
        where = "" if label == "." else f" [{label}]"
        if best is None:
            lines.append(f"  no {metric} recorded after {last.get('epoch')} epoch(s){where}")
            continue
        text = (f"  {metric} {shown(metric, best[metric])} at epoch {best['epoch']} (best), "
                f"{shown(metric, last.get(metric))} at epoch {last['epoch']} (last), on "
                f"{last.get('device', '?')}{where}")
        lines.append(text + (" on the synthetic sample (not the dataset: it only shows "
                             "training works)" if sample else ""))
    return lines


def cmd_run(args) -> int:
    workload = check_workload(args.workload)
    platform = check_platform(args.platform)
    overrides = collect_overrides(args.param)
    out = check_folder("--out", Path(args.out or Path("runs") / workload).expanduser().resolve())
    if "OUT_DIR" in overrides:
        raise UsageError("give the output folder with --out DIR, not -p OUT_DIR.")
    overrides["OUT_DIR"] = str(out)
    overrides = absolute_paths(overrides)
    if isinstance(overrides.get("DATA_DIR"), str):
        check_folder("-p DATA_DIR", Path(overrides["DATA_DIR"]))
    params, cfg = resolve_params(workload, platform, overrides)
    before = sessions_seen(out)
    if not before:  # a new run: MICRO_BATCH is checked here (a resumed one: by its session)
        try:
            cfg.check_micro_batch()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    notebook = notebook_path(workload, platform)
    print(f"{workload} on {platform}: {notebook.relative_to(ROOT)} -> {out}", flush=True)
    # The notebook runs into a folder of its own: the run folder is not touched unless this
    # session trains there (a refused run leaves every file of it as it was).
    scratch = Path(tempfile.mkdtemp(prefix=f"train-anywhere-{workload}-"))
    executing, lines = scratch / f"{workload}.ipynb", scratch / "lines.txt"
    os.environ[RUN_LINES_ENV] = str(lines)
    progress = Progress(out, getattr(cfg, "epochs", None), note=cfg.note(), lines=lines)
    progress.start()
    t0 = time.perf_counter()
    failed, interrupted = None, False
    try:
        execute(notebook, executing, params)
    except NotebookFailed as exc:
        failed = exc
    except KeyboardInterrupt:  # Ctrl-C: papermill has stopped the kernel
        interrupted = True
    finally:
        progress.finish()
        kept = keep_notebook(executing, out, before, workload, interrupted)
        os.environ.pop(RUN_LINES_ENV, None)
        lines.unlink(missing_ok=True)
    if kept is not None or interrupted or failed is None:
        # kept, or nothing worth keeping (a session that trained nothing: the run folder
        # has the notebooks of the sessions that did): nothing is left in the temp folder
        shutil.rmtree(scratch, ignore_errors=True)
    if interrupted:
        print(_stopped(out, before, getattr(cfg, "epochs", None), kept, args.typed),
              file=sys.stderr)
        return 130
    executed = kept or executing
    if failed is not None and failed.user_error and kept is None:
        shutil.rmtree(scratch, ignore_errors=True)  # the one line says it all
        raise UsageError(str(failed))
    if failed is not None:
        print(f"error: {failed} (executed notebook: {executed})", file=sys.stderr)
        return 2 if failed.user_error else 1
    print(f"done in {fmt_duration(time.perf_counter() - t0)}")
    run_dir = kept.parent if kept else out
    for line in _headline(run_dir, workload, getattr(cfg, "sample_data", False)):
        print(line)
    if kept:
        print(f"  executed notebook  {kept}")
    else:
        print("  executed notebook  none kept (this session trained nothing: the run folder "
              "keeps the notebooks of the sessions that trained)")
    print(f"  outputs            {run_dir}  ({_outputs(run_dir, cfg)})")
    return 0


def _stopped(out: Path, before: dict, epochs: int | None, kept: Path | None,
             typed: list[str]) -> str:
    """The one line of a run stopped by Ctrl-C: where (the epoch it was in, what is saved),
    its notebook, and the command that resumes it."""
    records = max((records_of(p) for p in out.rglob("metrics.jsonl")), default=[],
                  key=lambda r: r[-1].get("epoch", 0) if r else 0) if out.is_dir() else []
    done = records[-1].get("epoch", 0) if records else 0
    of = f" of {epochs}" if epochs else ""
    if done:
        where = f"in epoch {done + 1}{of}, after epoch {done} was saved in {out}"
    elif sessions_seen(out) != before:  # a session row: training had started
        where = f"in epoch 1{of}, before its first checkpoint"
    else:
        where = "before training started"
    notebook = f"; its notebook is {kept}" if kept else ""
    return f"interrupted {where}{notebook}; resume with: {_command(typed)}"


def _command(typed: list[str]) -> str:
    """The command line that ran this, as a shell takes it (the console script where it is
    on PATH, else the venv's)."""
    found = shutil.which("train-anywhere")
    beside = Path(sys.executable).parent / "train-anywhere"
    prog = ("train-anywhere" if found and Path(found).resolve() == beside.resolve()
            else str(beside) if beside.exists() else f"{sys.executable} -m lib")
    return shlex.join([prog, *typed]) if " " not in prog else f"{prog} {shlex.join(typed)}"


def _outputs(run_dir: Path, cfg) -> str:
    """What a run folder holds, as the end of `run` names it: the trackers' files only where
    TRACKERS wrote them (the MLflow store's own line, with how to look, came before)."""
    kept = ["checkpoints", "metrics.jsonl", "plots"]
    if "tensorboard" in getattr(cfg, "trackers", ()):
        kept.append("TensorBoard logs")
    if any(run_dir.glob("mlflow.db")) or any(run_dir.glob("*/mlflow.db")):
        kept.append("MLflow store mlflow.db")
    return ", ".join(kept)


def cmd_report(args) -> int:
    from lib.cli.sweep.report import report

    out = Path(args.out_dir).expanduser().resolve()
    if not out.is_dir():
        raise UsageError(f"{args.out_dir} is not a folder; pass the --out of a finished run or "
                         "sweep.")
    print(report(out))
    return 0


def cmd_new(args) -> int:
    from lib.cli.new import new

    written = new(args.name)
    print(f"new workload {args.name}:")
    for path in written:
        print(f"  wrote {path.relative_to(ROOT)}")
    print("next: look for EDIT in them, then `python build_notebooks.py` (a notebook for each "
          f"of the {len(platforms())} platforms), `train-anywhere run {args.name} -p SMOKE True "
          f"-p SAMPLE_DATA True` and `python -m pytest tests/test_{args.name}.py`.")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse, its usage errors as one line (exit 2) that points at --help."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} --help`.\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="train-anywhere",
        description="Run any workload's notebook from a terminal (through papermill), or a "
                    "grid of them on this machine, Slurm, Kaggle or Colab.",
        epilog="Every subcommand has its own --help. Exit status: 0 done, 1 a notebook "
               "failed, 2 a mistake to fix (a parameter, a path, a changed experiment).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    p = sub.add_parser("list", help="the workloads and platforms",
                       description="List the workloads and the platforms they render for.")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("params", help="a workload's parameters, defaults and comments",
                       description="Every parameter of WORKLOAD with its default and comment, "
                                   "read from the source's parameters cell.")
    p.add_argument("workload", metavar="WORKLOAD")
    p.set_defaults(fn=cmd_params)

    param_help = "set a parameter (repeatable), e.g. -p EPOCHS 3 -p SMOKE True"
    p = sub.add_parser(
        "run", help="run one workload's notebook with parameters",
        description="Validate the parameters, run notebooks/PLATFORM/WORKLOAD.ipynb through "
                    "papermill (one progress line per epoch), then print the headline metric "
                    "and where the outputs are. Re-running with the same --out resumes.")
    p.add_argument("workload", metavar="WORKLOAD")
    p.add_argument("--platform", default=DEFAULT_PLATFORM,
                   help=f"which platform's notebook (default {DEFAULT_PLATFORM})")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help=param_help)
    p.add_argument("--out", metavar="DIR",
                   help="OUT_DIR of the run and home of the executed notebook "
                        "(default runs/WORKLOAD)")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("report", help="results table and figures of a finished run or sweep",
                       description="Print the results table of OUT_DIR (a run's, a study's or "
                                   "a sweep's) and write its figures, without training.")
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.set_defaults(fn=cmd_report)

    add_sweep_parser(sub, param_help)
    from lib.cli.carry import add_carry_parser  # issue 37: moving a run between platforms

    add_carry_parser(sub)
    from lib.cli.plan import add_plan_parser  # issue 51: plan the hours a run needs
    from lib.cli.plan.follow import follow

    add_plan_parser(sub, param_help)
    from lib.cli.measure import add_measure_parser  # issue 59: the real model's speed here

    add_measure_parser(sub, param_help)
    sub.choices["sweep"].set_defaults(follow_plan=follow)  # sweep --plan PLAN.json

    p = sub.add_parser(
        "new", help="start a workload of your own from a template that runs everywhere",
        description="Write notebooks_src/NAME.py, lib/workloads/NAME.py and tests/test_NAME.py "
                    "from a small working template (a classifier of .npz arrays with a "
                    "synthetic sample); edit the places marked EDIT, then render with "
                    "`python build_notebooks.py`.")
    p.add_argument("name", metavar="NAME", help="a lower-case identifier, e.g. my_experiment")
    p.set_defaults(fn=cmd_new)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.typed = list(sys.argv[1:] if argv is None else argv)  # as typed: said to resume
    # Fixes are said as typed here (-p EPOCHS 3), also by the kernels this process starts.
    said_before = os.environ.get(FRONT_END_ENV)
    os.environ[FRONT_END_ENV] = "cli"
    try:
        return args.fn(args)
    except UsageError as exc:
        print(f"train-anywhere {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        if said_before is None:
            os.environ.pop(FRONT_END_ENV, None)
        else:
            os.environ[FRONT_END_ENV] = said_before


if __name__ == "__main__":
    raise SystemExit(main())
