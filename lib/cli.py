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
    train-anywhere new my_experiment

Exit status: 0 done, 1 the notebook (or a grid cell) failed, 2 a usage error (one line).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lib import workloads as contract
from lib.execute import (  # NOTEBOOKS: the sweep's kaggle and colab backends read it from here
    NOTEBOOKS,  # noqa: F401
    NotebookFailed,
    Progress,
    execute,
    fmt_duration,
    headline,
    notebook_path,
)
from lib.params import (
    ROOT,
    UsageError,
    absolute_paths,
    check_platform,
    check_workload,
    collect_overrides,
    parameters,
    platforms,
    resolve_params,
    workloads,
)
from lib.sweep import add_sweep_parser

DEFAULT_PLATFORM = "local"  # the local notebook: CUDA, MPS or the CPU, whatever is here


# Commands --------------------------------------------------------------------------------
def cmd_list(args) -> int:
    print("workloads:")
    names = workloads()
    width = max(map(len, names), default=0)
    for w in names:
        print(f"  {w:<{width}}  {contract.title(w)}")
    print("platforms:")
    for name, p in platforms().items():
        print(f"  {name:<12} {p.title} ({p.gpu}, {p.accelerator})")
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


def cmd_run(args) -> int:
    workload = check_workload(args.workload)
    platform = check_platform(args.platform)
    overrides = collect_overrides(args.param)
    out = Path(args.out or Path("runs") / workload).expanduser().resolve()
    if "OUT_DIR" in overrides:
        raise UsageError("give the output folder with --out DIR, not -p OUT_DIR.")
    overrides["OUT_DIR"] = str(out)
    params, cfg = resolve_params(workload, platform, absolute_paths(overrides))
    notebook = notebook_path(workload, platform)
    executed = out / f"{workload}.ipynb"
    print(f"{workload} on {platform}: {notebook.relative_to(ROOT)} -> {executed}", flush=True)
    progress = Progress(out, getattr(cfg, "epochs", None), note=cfg.note())
    progress.start()
    t0 = time.perf_counter()
    try:
        execute(notebook, executed, params)
    except NotebookFailed as exc:
        progress.finish()
        print(f"error: {exc} (executed notebook: {exc.executed})", file=sys.stderr)
        return 1
    progress.finish()
    metric, runs = headline(out, contract.get(workload).headline)
    print(f"done in {fmt_duration(time.perf_counter() - t0)}")
    for label, last in runs:
        value = last.get(metric)
        shown = f"{metric} {value:.4f}" if isinstance(value, (int, float)) else "no metric"
        if getattr(cfg, "sample_data", False):
            shown += " on the synthetic sample (not the dataset: it only shows training works)"
        where = "" if label == "." else f" [{label}]"
        print(f"  {shown} after {last.get('epoch')} epoch(s) on {last.get('device', '?')}{where}")
    print(f"  executed notebook  {executed}")
    print(f"  outputs            {out}  (checkpoints, metrics.jsonl, plots, TensorBoard logs)")
    return 0


def cmd_report(args) -> int:
    from lib.sweep.report import report

    out = Path(args.out_dir).expanduser().resolve()
    if not out.is_dir():
        raise UsageError(f"{args.out_dir} is not a folder; pass the --out of a finished run or "
                         "sweep.")
    print(report(out))
    return 0


def cmd_new(args) -> int:
    from lib.scaffold import new

    written = new(args.name)
    print(f"new workload {args.name}:")
    for path in written:
        print(f"  wrote {path.relative_to(ROOT)}")
    print("next: look for EDIT in them, then `python build_notebooks.py` (six platform "
          f"notebooks), `train-anywhere run {args.name} -p SMOKE True -p SAMPLE_DATA True` and "
          f"`python -m pytest tests/test_{args.name}.py`.")
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
               "failed, 2 a usage error.")
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
    from lib.carry import add_carry_parser  # issue 37: moving a run between platforms

    add_carry_parser(sub)

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
    try:
        return args.fn(args)
    except UsageError as exc:
        print(f"train-anywhere {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
