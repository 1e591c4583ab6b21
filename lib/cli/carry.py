"""`train-anywhere carry`: one command each way to move a run folder between platforms.

    train-anywhere carry to-kaggle RUN_DIR --dataset owner/slug   # a private dataset (version)
    train-anywhere carry from-kaggle owner/kernel DEST            # a version's output, here
    train-anywhere carry to-colab RUN_DIR [--drive DRIVE]         # its place on Drive

A run folder (or a grid's folder of run folders) is one experiment: `config.json` records it
(`lib.runs.identity`), `checkpoints/` holds its state, each file with a completion marker
(`lib.base.durable`). Every command checks the folder first: it records its experiment, and each
run holds a complete checkpoint (or has finished); checkpoints whose marker does not match
(a copy that did not finish) are left behind. Then it says in one line what it moved.

- to-kaggle: the folder becomes a private Kaggle dataset, created the first time and given a
  new version after (`kaggle datasets create` / `version` through the real client, folders
  uploaded as zip archives, which Kaggle unpacks into the same hierarchy: kaggle-cli PR #111).
  Attached to the next version (Add Input -> Datasets, or `dataset_sources` in
  kernel-metadata.json), it is mounted read-only under /kaggle/input/datasets/<owner>/<slug>/
  and the notebook carries the run over into /kaggle/working (`lib.runs.identity.carry_over`).
- from-kaggle: `kaggle kernels output` of the kernel's latest version (client >= 2.2.2 pages
  through all files), the run folder in it moved to DEST.
- to-colab: where the folder belongs on Drive (MyDrive/train-anywhere/runs/<workload>, the
  Colab notebooks' OUT_DIR) and how to put it there; with --drive (a folder holding MyDrive:
  Google Drive for desktop, or /content/drive on Colab) it is copied there.

Nothing a user trained is overwritten: a destination that holds training is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lib.base import durable
from lib.cli.params import UsageError
from lib.runs import compile_cache
from lib.runs import identity as experiment

DRIVE_RUNS = Path("MyDrive") / "train-anywhere" / "runs"  # Colab's OUT_DIR root on Drive
LICENSE = "CC0-1.0"  # what `kaggle datasets init` writes; the dataset stays private


@dataclass(frozen=True)
class Carried:
    """What a checked folder holds: one run or a grid of runs of one workload."""

    folder: Path
    workload: str
    runs: list[tuple[Path, int, str]]  # (run folder, epochs, newest complete checkpoint)
    identity: dict  # the experiment (of the first run, for a grid)
    grid: bool
    incomplete: list[Path]  # checkpoints whose marker does not match: not carried
    caches: list[str] = ()  # what it says of the runs' compile caches (lib.runs.compile_cache)
    bad_caches: tuple[Path, ...] = ()  # compile-cache files that do not match their tag

    def line(self) -> str:
        """`fashion_mnist run (4 epochs, newest complete checkpoint ckpt-e0004-b000000.pt)`."""
        def n(count: int, noun: str) -> str:
            return f"{count} {noun}{'' if count == 1 else 's'}"

        if not self.grid:
            _, epochs, newest = self.runs[0]
            return (f"{self.workload} run ({n(epochs, 'epoch')}, newest complete checkpoint "
                    f"{newest})")
        return (f"{self.workload} grid of {n(len(self.runs), 'run')} ("
                + ", ".join(f"{p.name}: {n(e, 'epoch')}" for p, e, _ in self.runs) + ")")


def _complete(ckpts: Path) -> tuple[list[Path], list[Path]]:
    """(complete checkpoints, newest first; incomplete ones) in a checkpoints folder: a
    checkpoint is complete when its marker matches its bytes; one older than every marked
    one was written before markers existed and counts as complete (`lib.runs.checkpoints`)."""
    paths = sorted(ckpts.glob("ckpt-*.pt"), reverse=True) if ckpts.is_dir() else []
    marked = [i for i, p in enumerate(paths) if durable.marker_path(p).exists()]
    newest_marked = marked[-1] if marked else -1
    good, bad = [], []
    for i, path in enumerate(paths):
        ok = i > newest_marked or durable.check(path, path.read_bytes()) is None
        (good if ok else bad).append(path)
    return good, bad


def _epochs(run: Path) -> int:
    try:
        return sum(1 for line in (run / "metrics.jsonl").open() if line.strip())
    except OSError:
        return 0


def check(folder: Path) -> Carried:
    """Check a run folder or a grid's folder before moving it; one UsageError when it is not
    one that resumes (no recorded experiment, no complete checkpoint)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise UsageError(f"{str(folder)!r} is not a folder; pass the run folder (OUT_DIR of the "
                         "run, e.g. runs/fashion_mnist).")
    grid = not (folder / experiment.CONFIG).is_file()
    found = [folder] if not grid else sorted(
        p for p in folder.iterdir() if p.is_dir() and (p / experiment.CONFIG).is_file())
    runs, incomplete, identity, workload = [], [], None, None
    for run in found:
        recorded = (experiment.read_config(run) or {}).get("experiment")
        if recorded is None:
            raise UsageError(f"{str(run)!r} records no experiment (config.json has no "
                             "'experiment'); only run folders this project wrote can be "
                             "carried.")
        if workload is not None and recorded.get("workload") != workload:
            raise UsageError(f"{str(folder)!r} holds runs of {workload} and "
                             f"{recorded.get('workload')}; carry one run folder at a time.")
        identity, workload = identity or recorded, recorded.get("workload")
        good, bad = _complete(run / "checkpoints")
        incomplete += bad
        finished = (run / "DONE.json").is_file()
        if not good and not finished:
            raise UsageError(f"{str(run)!r} holds no complete checkpoint (each needs its "
                             f"{durable.MARKER} marker matching its bytes); nothing there "
                             "resumes. Carry it after an epoch has been saved.")
        runs.append((run, _epochs(run), good[0].name if good else "none (finished)"))
    if not runs:
        raise UsageError(f"{str(folder)!r} is not a run folder: no config.json in it or its "
                         "sub-folders; pass the run's OUT_DIR.")
    caches, bad = _caches([run for run, _, _ in runs], grid)
    return Carried(folder, workload, runs, identity, grid, incomplete, caches, bad)


def _caches(runs: list[Path], grid: bool) -> tuple[list[str], tuple[Path, ...]]:
    """(what to say of each run's compile cache, the cache files to leave behind): one whose
    bytes do not match its tag would be ignored where it lands, so it is not moved."""
    lines, bad = [], []
    for run in runs:
        label = f"{run.name}: " if grid else ""
        for kind, tag, why in compile_cache.entries(run):
            if why:
                bad += [compile_cache.blob_path(run, kind), compile_cache.tag_path(run, kind)]
                lines.append(f"{label}compile cache ({kind}) left behind: {why}")
            else:
                lines.append(f"{label}compile cache carried: "
                             f"{compile_cache.tag_line(kind, tag)}, used where a session "
                             "matches it")
    return lines, tuple(bad)


def _stage(carried: Carried, target: Path) -> Path:
    """A copy of the folder without hidden files and incomplete checkpoints (and markers)."""
    skip = set(carried.incomplete) | {durable.marker_path(p) for p in carried.incomplete}
    skip |= set(carried.bad_caches)

    def ignore(_dir, names):
        return [n for n in names if n.startswith(".") or Path(_dir) / n in skip]

    shutil.copytree(carried.folder, target, ignore=ignore, copy_function=shutil.copyfile)
    return target


def _refuse_training(dest: Path) -> None:
    if experiment.holds_training(dest) or (dest.is_dir() and any(
            experiment.holds_training(p) for p in dest.iterdir() if p.is_dir())):
        raise UsageError(f"{str(dest)!r} already holds a run; nothing there is overwritten. "
                         "Pass a new folder (or move that run away first).")


def _skipped(carried: Carried) -> str:
    n = len(carried.incomplete)
    return (f"; {n} incomplete checkpoint copies left behind" if n else "") + "".join(
        f"; {line}" for line in carried.caches)


# to-kaggle -----------------------------------------------------------------------------------
def to_kaggle(folder: Path, dataset: str, api=None) -> str:
    """The run folder as the private dataset `dataset` (owner/slug): created, or a new
    version; the one line that says what moved."""
    owner, _, slug = dataset.partition("/")
    if not owner or not slug or "/" in slug or not 6 <= len(slug) <= 50:
        raise UsageError(f"--dataset {dataset!r} is not owner/slug with a slug of 6 to 50 "
                         "characters; e.g. --dataset yourname/fashion-mnist-run.")
    carried = check(folder)
    from lib.cli.kaggle_api import KaggleFailed, client

    api = api or client()
    with tempfile.TemporaryDirectory(prefix="ta-carry-") as tmp:
        staged = _stage(carried, Path(tmp) / slug)
        meta = {"id": dataset, "title": slug, "licenses": [{"name": LICENSE}],
                "description": f"train-anywhere run folder: {carried.line()}"}
        (staged / "dataset-metadata.json").write_text(json.dumps(meta, indent=2))
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exists = _dataset_exists(api, dataset)
                if exists:
                    resp = api.dataset_create_version(str(staged), carried.line(), quiet=True,
                                                      dir_mode="zip")
                else:
                    resp = api.dataset_create_new(str(staged), public=False, quiet=True,
                                                  dir_mode="zip")
        except (OSError, ValueError) as exc:
            detail = str(exc).strip().splitlines()
            raise KaggleFailed(f"Kaggle: {detail[-1] if detail else type(exc).__name__}; "
                               "nothing was changed there, run the same command again.") from None
    if getattr(resp, "error", None):
        raise KaggleFailed(f"Kaggle refused the dataset {dataset}: {resp.error}")
    how = "new version of" if exists else "new private dataset"
    return (f"moved the {carried.line()} from {carried.folder} to Kaggle: {how} {dataset}"
            f"{_skipped(carried)}. Attach it to the next version (Add Input -> Datasets -> "
            f"{dataset}): it resumes there.")


def _dataset_exists(api, dataset: str) -> bool:
    from requests.exceptions import HTTPError

    try:
        api.dataset_status(dataset)
    except HTTPError as exc:
        if exc.response is not None and exc.response.status_code == 404:
            return False
        raise
    return True


# from-kaggle ---------------------------------------------------------------------------------
def _is_grid(run: Path) -> bool:
    """True when `run` is a cell of a grid workload (its OUT_DIR holds one folder per run)."""
    from lib import workloads

    name = (experiment.recorded(run, frozenset()) or {}).get("workload")
    return name in workloads.names() and workloads.get(name).grid


def _locate(root: Path) -> Path:
    """The run folder, or the grid's folder, in a downloaded output."""
    runs = list(experiment.run_folders(root))
    parents = {p.parent for p in runs}
    if len(parents) == 1 and runs and _is_grid(runs[0]):
        return parents.pop()
    if len(runs) == 1:
        return runs[0]
    if not runs:
        raise UsageError(f"the output holds no run folder (no config.json with training in "
                         f"{root}); is it the kernel that trained?")
    raise UsageError("the output holds several runs: " + ", ".join(
        str(p.relative_to(root)) for p in runs) + "; download it with `kaggle kernels output "
        "OWNER/KERNEL -p DIR` and copy the run folder you want to OUT_DIR.")


def from_kaggle(kernel: str, dest: Path, api=None) -> str:
    """The run folder in the latest output of `kernel` (owner/slug), moved to `dest`."""
    owner, _, slug = kernel.partition("/")
    if not owner or not slug or "/" in slug:
        raise UsageError(f"{kernel!r} is not owner/kernel-slug; e.g. yourname/fashion-mnist.")
    dest = Path(dest).expanduser()
    _refuse_training(dest)
    from lib.cli.kaggle_api import KaggleFailed, client

    api = api or client()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ta-carry-", dir=dest.parent) as tmp:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                api.kernels_output(kernel, tmp, force=True, quiet=True)
        except (OSError, ValueError) as exc:
            detail = str(exc).strip().splitlines()
            raise KaggleFailed(f"Kaggle: {detail[-1] if detail else type(exc).__name__}; "
                               "nothing was written, run the same command again.") from None
        carried = check(_locate(Path(tmp)))
        dest.mkdir(exist_ok=True)
        _move_into(_stage(carried, Path(tmp) / ".staged"), dest)
    return (f"moved the {carried.line()} from the latest output of Kaggle kernel {kernel} to "
            f"{dest}{_skipped(carried)}; a notebook with OUT_DIR there resumes it.")


def _move_into(source: Path, dest: Path) -> None:
    """Move `source`'s entries into `dest` (holding no training), checkpoints first, config
    last (as `lib.runs.identity.copy_in`: a cut move leaves a folder that resumes or nothing)."""
    for entry in sorted(source.iterdir(), key=lambda p: (p.name != "checkpoints",
                                                         p.name == experiment.CONFIG)):
        target = dest / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        shutil.move(str(entry), str(target))


# to-colab ------------------------------------------------------------------------------------
def to_colab(folder: Path, drive: Path | None = None) -> str:
    """Where the run folder belongs on Drive and how to put it there; with `drive` (a folder
    holding MyDrive), copied there."""
    carried = check(folder)
    place = DRIVE_RUNS / carried.workload
    if drive is None:
        return (f"the {carried.line()} belongs on Google Drive at {place} (the Colab "
                f"notebooks' OUT_DIR): upload {carried.folder} there (drive.google.com: New -> "
                "Folder upload, into MyDrive/train-anywhere/runs, renamed "
                f"{carried.workload}), or pass --drive with the folder that holds MyDrive "
                "(Google Drive for desktop); then run the Colab notebook: it resumes.")
    drive = Path(drive).expanduser()
    if not (drive / "MyDrive").is_dir():
        raise UsageError(f"--drive {str(drive)!r} holds no MyDrive folder; pass the folder "
                         "that holds MyDrive (Google Drive for desktop's, or /content/drive "
                         "on Colab).")
    target = drive / place
    _refuse_training(target)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ta-carry-", dir=target.parent) as tmp:
        _move_into(_stage(carried, Path(tmp) / "staged"), target)
    return (f"moved the {carried.line()} from {carried.folder} to {target}{_skipped(carried)}; "
            "the Colab notebook resumes it.")


# The command ---------------------------------------------------------------------------------
def add_carry_parser(sub) -> None:
    """`train-anywhere carry {to-kaggle, from-kaggle, to-colab}`."""
    p = sub.add_parser(
        "carry", help="move a run folder between platforms (Kaggle dataset, output, Drive)",
        description="Check a run folder (its experiment, complete checkpoints) and move it: "
                    "to a private Kaggle dataset the next version attaches, from a Kaggle "
                    "kernel's latest output, or to its place on Google Drive for Colab.")
    verbs = p.add_subparsers(dest="verb", metavar="WHERE", parser_class=type(p))
    verbs.required = True
    v = verbs.add_parser("to-kaggle", help="a run folder as a private Kaggle dataset (version)")
    v.add_argument("run_dir", metavar="RUN_DIR")
    v.add_argument("--dataset", required=True, metavar="OWNER/SLUG",
                   help="the dataset: created the first time, a new version after")
    v.set_defaults(fn=cmd_carry)
    v = verbs.add_parser("from-kaggle", help="a Kaggle kernel's latest output to a folder")
    v.add_argument("kernel", metavar="OWNER/KERNEL")
    v.add_argument("dest", metavar="DEST", help="the run folder to create (OUT_DIR)")
    v.set_defaults(fn=cmd_carry)
    v = verbs.add_parser("to-colab", help="where a run folder goes on Drive (and put it there)")
    v.add_argument("run_dir", metavar="RUN_DIR")
    v.add_argument("--drive", metavar="DIR", help="the folder holding MyDrive: copy it there")
    v.set_defaults(fn=cmd_carry)


def cmd_carry(args) -> int:
    from lib.cli.kaggle_api import KaggleFailed

    try:
        if args.verb == "to-kaggle":
            line = to_kaggle(Path(args.run_dir), args.dataset)
        elif args.verb == "from-kaggle":
            line = from_kaggle(args.kernel, Path(args.dest))
        else:
            line = to_colab(Path(args.run_dir), args.drive and Path(args.drive))
    except KaggleFailed as exc:
        print(f"train-anywhere carry {args.verb}: {exc}", file=sys.stderr)
        return 1
    print(line)
    return 0
