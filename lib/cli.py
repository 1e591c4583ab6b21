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

Exit status: 0 done, 1 the notebook (or a grid cell) failed, 2 a usage error (one line).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import io
import sys
import threading
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.progress import epoch_line

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "notebooks_src"
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_PLATFORM = "local_mps"  # the local notebook: CUDA, MPS or the CPU, whatever is here
HEADLINES = ("test_accuracy", "test_mIoU")  # the metric a run ends with, first one present


def _records(path: Path) -> list[dict]:
    """The epoch records of a metrics.jsonl (lib.metrics' reader, imported when first
    needed: `--help` and bad-input answers should not wait for torch)."""
    from lib.metrics import read_jsonl

    return read_jsonl(path)


class UsageError(ValueError):
    """A mistake on the command line: printed as one line, exit status 2."""


class NotebookFailed(RuntimeError):
    """The notebook raised: `str()` is the error's one line, `.executed` the notebook kept."""

    def __init__(self, line: str, executed: Path | None = None):
        super().__init__(line)
        self.executed = executed


# Workloads, platforms and parameters ------------------------------------------------------
def workloads() -> list[str]:
    return sorted(p.stem for p in SOURCES.glob("*.py"))


def platforms() -> dict[str, Any]:
    from lib.platforms import PLATFORMS

    return dict(PLATFORMS)


def _closest(value: str, known) -> str:
    near = difflib.get_close_matches(value, list(known), n=1, cutoff=0.5)
    return f" (did you mean {near[0]}?)" if near else ""


def check_workload(name: str) -> str:
    known = workloads()
    if name not in known:
        raise UsageError(f"unknown workload {name!r}{_closest(name, known)}; expected one of "
                         f"{', '.join(known)}. See `train-anywhere list`.")
    return name


def check_platform(name: str) -> str:
    known = platforms()
    if name not in known:
        raise UsageError(f"unknown platform {name!r}{_closest(name, known)}; expected one of "
                         f"{', '.join(known)}. See `train-anywhere list`.")
    return name


@dataclass(frozen=True)
class Param:
    """One line of a parameters cell: `NAME = default  # comment`."""

    name: str
    default: Any
    comment: str


def parameters(workload: str) -> list[Param]:
    """The parameters cell of notebooks_src/<workload>.py, in order (the one list there is)."""
    import jupytext

    nb = jupytext.read(SOURCES / f"{check_workload(workload)}.py", fmt="py:percent")
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(cell.source).readline)
                if tok.type == tokenize.COMMENT}
    out = []
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out.append(Param(node.targets[0].id, ast.literal_eval(node.value),
                             comments.get(node.lineno, "")))
    return out


def parse_value(text: str) -> Any:
    """A `-p` value: a Python literal (3, 0.1, True, None, [0, 1], 'x'), else the string."""
    lowered = {"true": True, "false": False, "none": None, "null": None}
    if text.lower() in lowered:
        return lowered[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def config_class(workload: str):
    """The workload's RunConfig subclass (the one whose WORKLOAD is `workload`)."""
    from lib.config import RunConfig

    module = importlib.import_module(f"lib.workloads.{workload}")
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, RunConfig)
                and workload == value.WORKLOAD):
            return value
    raise LookupError(f"lib/workloads/{workload}.py has no RunConfig with WORKLOAD={workload!r}")


def resolve_params(workload: str, platform: str, overrides: dict[str, Any]):
    """Validate `overrides` as the notebook's config cell would; return (params, config).

    Unknown names fail here with the closest known one; values fail with the config's own
    one-line message. Nothing is started.
    """
    defaults = {p.name: p.default for p in parameters(workload)}
    for name in overrides:
        if name not in defaults:
            raise UsageError(f"unknown parameter {name}{_closest(name, defaults)} for "
                             f"{workload}; see `train-anywhere params {workload}`.")
    if "PLATFORM" in overrides and overrides["PLATFORM"] != platform:
        raise UsageError(f"-p PLATFORM {overrides['PLATFORM']} contradicts --platform "
                         f"{platform}; choose the notebook with --platform alone.")
    namespace = {**defaults, **overrides, "PLATFORM": platform}
    try:
        cfg = config_class(workload).from_params(namespace)
    except ValueError as exc:  # ConfigError / UserError: already one line with the fix
        raise UsageError(str(exc).strip().splitlines()[-1]) from None
    return {k: v for k, v in overrides.items() if k != "PLATFORM"}, cfg


def absolute_paths(params: dict[str, Any]) -> dict[str, Any]:
    """DATA_DIR and OUT_DIR relative to the caller's directory (the kernel runs elsewhere)."""
    return {k: (str(Path(v).expanduser().resolve()) if k in ("DATA_DIR", "OUT_DIR")
                and isinstance(v, str) else v) for k, v in params.items()}


def notebook_path(workload: str, platform: str) -> Path:
    path = NOTEBOOKS / platform / f"{workload}.ipynb"
    if not path.exists():
        raise UsageError(f"{path.relative_to(ROOT)} does not exist; render the notebooks "
                         "with `python build_notebooks.py`.")
    return path


# Running one notebook --------------------------------------------------------------------
def execute(notebook: Path, executed: Path, params: dict[str, Any],
            log_output: bool = False) -> None:
    """papermill `notebook` -> `executed` with `params`; a raised error -> NotebookFailed.

    The kernel runs in the repository (the bootstrap cell finds `lib/` from there), so
    relative paths in `params` must already be absolute.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    executed.parent.mkdir(parents=True, exist_ok=True)
    try:
        # The kernel's own log is not the project's and a user cannot act on it: its start-up
        # warning (local TCP sockets), and "KeyboardInterrupt caught in kernel" when
        # jupyter_client's shutdown (which interrupts the kernel first) meets a message being
        # handled. A cell's error still reaches the console, through papermill.
        papermill.execute_notebook(str(notebook), str(executed), parameters=params,
                                   cwd=str(ROOT), progress_bar=False, log_output=log_output,
                                   kernel_name="python3",
                                   extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
    except PapermillExecutionError as exc:
        lines = [line for line in str(exc.evalue).strip().splitlines() if line.strip()]
        message = lines[-1] if lines else exc.ename
        raise NotebookFailed(f"{exc.ename}: {message}", executed) from None


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress(threading.Thread):
    """Prints one line per new epoch record in any metrics.jsonl under `out_dir`."""

    def __init__(self, out_dir: Path, epochs: int | None, stream=None, every: float = 0.5,
                 note: str | None = None):
        super().__init__(daemon=True)
        self.out_dir, self.epochs, self.every = Path(out_dir), epochs, every
        self.note = note  # as the notebook's rows: "synthetic sample" on the offline sample
        self.stream = stream or sys.stdout
        self.seen: dict[Path, int] = {}
        self.stop = threading.Event()
        # Records already there (a resumed run) are not news.
        for path in self._files():
            self.seen[path] = len(_records(path))

    def _files(self) -> list[Path]:
        return sorted(self.out_dir.rglob("metrics.jsonl")) if self.out_dir.exists() else []

    def poll(self) -> None:
        for path in self._files():
            records = _records(path)
            for record in records[self.seen.get(path, 0):]:
                rel = path.parent.relative_to(self.out_dir)
                label = "" if str(rel) == "." else f"{rel}: "
                line = epoch_line(record, self.epochs or record.get("epoch", 0), note=self.note)
                print(label + line, file=self.stream, flush=True)
            self.seen[path] = max(self.seen.get(path, 0), len(records))

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.poll()

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.poll()


def headline(out_dir: Path) -> tuple[str, list[tuple[str, dict]]]:
    """(metric name, [(run label, last record)]) of every metrics.jsonl under `out_dir`."""
    runs = []
    for path in sorted(Path(out_dir).rglob("metrics.jsonl")):
        records = _records(path)
        if records:
            rel = path.parent.relative_to(out_dir)
            runs.append(("." if str(rel) == "." else str(rel), records[-1]))
    keys = [k for k in HEADLINES if any(k in r for _, r in runs)]
    return (keys[0] if keys else ""), runs


# Commands --------------------------------------------------------------------------------
def cmd_list(args) -> int:
    print("workloads:")
    for w in workloads():
        print(f"  {w}")
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


def collect_overrides(pairs: list[list[str]] | None) -> dict[str, Any]:
    out = {}
    for name, value in pairs or []:
        if name != name.upper():
            raise UsageError(f"parameter name {name!r} is not UPPER_CASE; write it as in the "
                             f"parameters cell, e.g. -p {name.upper()} {value}.")
        out[name] = parse_value(value)
    return out


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
    metric, runs = headline(out)
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


def cmd_sweep(args) -> int:
    from lib.sweep import sweep_command

    return sweep_command(args)


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

    from lib.sweep import add_sweep_parser

    add_sweep_parser(sub, param_help)
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
