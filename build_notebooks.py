#!/usr/bin/env python3
"""Render notebooks_src/<workload>.py into notebooks/<platform>/<workload>.ipynb.

Each notebook gets a generated header (source, badge), its PLATFORM in the parameters cell, a
bootstrap cell after it (it reads PLATFORM, and runs the library of the version rendered into
it) and the runtime metadata Colab or Kaggle reads; Kaggle notebooks get a
kernel-metadata.json for `kaggle kernels push`. The README's badge table and its table of
hosted images (from images.toml) are rewritten too.
Output is byte-stable (fixed cell ids, no timestamps, no outputs). Each notebook records what
was written into it, so a notebook a user edited or ran is never written over unsaid or without
a copy kept (docs/guides/contributing.md).

    python build_notebooks.py                    # write what is out of date; keep edited notebooks
    python build_notebooks.py --check            # exit 1 naming every stale, missing or edited
                                                 # file and every notebook with outputs
    python build_notebooks.py --carry-back NB    # NB's edited cells into its source, then build
    python build_notebooks.py --force [NB ...]   # render NB (or every kept one) too, a copy first
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

try:
    import jupytext  # noqa: F401
    import nbformat  # noqa: F401
except ImportError:  # run with a bare python: use the project's environment if it exists
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        import os

        os.execv(venv_python, [str(venv_python), __file__, *sys.argv[1:]])
    raise SystemExit("build_notebooks.py needs jupytext and nbformat: run `make install` "
                     "(or `pip install jupytext nbformat`).") from None

from lib.notebooks.badges import settings  # noqa: E402
from lib.notebooks.edits import COPY, keep_copy, notebook_state  # noqa: E402
from lib.notebooks.render import expected_files, json_object, render  # noqa: E402
from lib.notebooks.to_source import carry_back  # noqa: E402
from lib.runtime.platforms import PLATFORMS  # noqa: E402


def file_states(root: Path, cfg: dict, expected: dict[Path, str]) -> dict[Path, tuple]:
    """notebook_state of every generated file; the others are missing, current or stale, or
    unreadable (a kernel-metadata.json that is no JSON object)."""
    states = {}
    for path, text in expected.items():
        if not path.exists():
            states[path] = ("missing", [])
        elif path.suffix == ".ipynb":
            src, platform = root / "notebooks_src" / f"{path.stem}.py", PLATFORMS[path.parent.name]
            states[path] = notebook_state(path, text, lambda s=src, p=platform: render(
                s, p, cfg, legacy=True))
        elif path.suffix == ".json" and json_object(path) is None:  # kaggle could not read it
            states[path] = ("unreadable", ["not a JSON object (what `kaggle kernels push` reads)"])
        else:
            states[path] = ("current" if path.read_text() == text else "stale", [])
    return states


def stale_files(root: Path = ROOT) -> list[str]:
    """Generated files that are missing, differ, carry outputs or edits, or are left over from
    a removed source: one line each, with the command that fixes it."""
    return [line for line, _ in findings(root)]


# What fixes each kind of finding, for --check's summary (each finding's line names its own).
FIXES = {"render": "`python build_notebooks.py` renders the {n} stale or missing",
         "outputs": "`python build_notebooks.py --force NOTEBOOK` cleans the {n} carrying "
                    "outputs (keeping a copy)",
         "edited": "`python build_notebooks.py --carry-back NOTEBOOK` (or `--force NOTEBOOK`) "
                   "sees to the {n} edited by hand",
         "unreadable": "fix the {n} unreadable, or `python build_notebooks.py --force FILE`",
         "orphan": "`rm` the {n} not generated from any source"}


def findings(root: Path = ROOT) -> list[tuple[str, str]]:
    """(line, kind of fix: a key of FIXES) of each generated file to see to."""
    cfg = settings(root / "pyproject.toml")
    expected = expected_files(root, cfg)
    problems = []
    for path, (state, found) in file_states(root, cfg, expected).items():
        rel = path.relative_to(root)
        if state in ("missing", "stale"):
            problems.append((f"{rel}: {state}: `python build_notebooks.py` renders it",
                             "render"))
        elif state.startswith("executed"):
            problems.append((f"{rel}: carries outputs (run in place): clean it with `python "
                             f"build_notebooks.py --force {rel}` (it keeps your executed copy "
                             "beside it)", "outputs"))
        elif state == "edited":
            problems.append((f"{rel}: edited by hand ({'; '.join(found)}): `python "
                             f"build_notebooks.py --carry-back {rel}` carries the edits to the "
                             f"source, `--force {rel}` keeps a copy and renders it afresh",
                             "edited"))
        elif state == "unreadable":
            problems.append((f"{rel}: {found[0]}: {_fix_unreadable(rel)}", "unreadable"))
    generated = set(expected)
    for p in sorted((root / "notebooks").rglob("*")):
        if p.is_file() and p.suffix in (".ipynb", ".json") and p not in generated \
                and ".ipynb_checkpoints" not in p.parts \
                and not COPY.match(p.name):  # Jupyter's autosaves, the copies a build kept
            rel = p.relative_to(root)
            problems.append((f"{rel}: not generated from any source: remove it (`rm {rel}`)",
                             "orphan"))
    return problems


def summary(found: list[tuple[str, str]]) -> str:
    """--check's last line: how many, and the command for each kind found (no other)."""
    kinds = [kind for _, kind in found]
    fixes = [FIXES[k].format(n=kinds.count(k)) for k in FIXES if k in kinds]
    return f"{len(found)} generated file(s) to see to: {'; '.join(fixes)}"


def _fix_unreadable(rel: Path) -> str:
    return (f"fix it, or `python build_notebooks.py --force {rel}` keeps it as a copy beside "
            "it and renders it afresh")


def _one_or_all(paths: list[Path]) -> tuple[str, str]:
    """(the paths, comma-separated; the one path, or NOTEBOOK for a command's argument)."""
    return ", ".join(map(str, paths)), str(paths[0]) if len(paths) == 1 else "NOTEBOOK"


def build(root: Path = ROOT, force: list[Path] | None = None) -> int:
    """Write every generated file that is missing or out of date. A notebook edited by hand,
    or run in place with its cells current, is kept as it is and named; `force` (paths; empty:
    all) renders those too, a copy of each kept beside it first. Outputs of a run in a
    notebook whose cells are out of date are kept as a copy beside it, and it is rendered."""
    cfg = settings(root / "pyproject.toml")
    expected = expected_files(root, cfg)
    wanted = {p.resolve() for p in force or []}
    for path in force or []:
        if path.resolve() not in expected:
            raise SystemExit(f"--force {path}: not a notebook this build renders; expected "
                             "notebooks/<platform>/<workload>.ipynb of a source in "
                             "notebooks_src/ (or a Kaggle notebook's kernel-metadata.json)")
    kept, left, broken = [], [], []
    for path, (state, found) in file_states(root, cfg, expected).items():
        rel, forced = path.relative_to(root), force is not None and (not force or path in wanted)
        if state == "current":
            continue
        if state in ("edited", "unreadable", "executed") and not forced:
            if state == "unreadable":  # nothing to carry back: mend it, or keep it aside
                broken.append(f"kept {rel} as it is: {found[0]}; {_fix_unreadable(rel)}")
            else:
                (left if state == "executed" else kept).append(rel)
            continue
        note = ""
        if state not in ("missing", "stale"):  # the user's file first, beside it
            kind = "executed" if state.startswith("executed") else "edited"
            what = "file" if path.suffix == ".json" else f"{kind} notebook"
            note = f" (your {what} kept as {keep_copy(path, kind).relative_to(root)})"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected[path])
        print(f"wrote {rel}{note}")
    if kept:
        names, one = _one_or_all(kept)
        print(f"kept {len(kept)} notebook(s) edited by hand as they are: {names}. `python "
              f"build_notebooks.py --carry-back {one}` carries the edits to the source and "
              f"renders every platform from it; `python build_notebooks.py --force {one}` keeps "
              "a copy beside it and renders it afresh")
    for line in broken:
        print(line)
    if left:
        names, one = _one_or_all(left)
        print(f"left {len(left)} notebook(s) run in place as they are (their cells are current: "
              f"rendering would only delete the outputs): {names}. Before committing, `python "
              f"build_notebooks.py --force {one}` keeps the executed copy beside it and renders "
              "it clean")
    return 0


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 naming every generated file that is stale, "
                           "missing, edited by hand or carries outputs, with what to run")
    mode.add_argument("--carry-back", metavar="NOTEBOOK", type=Path,
                      help="write the cells edited in NOTEBOOK back into its source, then "
                           "render every platform from it")
    parser.add_argument("--force", nargs="*", type=Path, metavar="NOTEBOOK",
                        help="render notebooks edited by hand, run in place or unreadable too "
                             "(these, or all; a kernel-metadata.json Kaggle cannot read too), "
                             "each kept first as a copy beside it (NAME.edited.ipynb, "
                             "NAME.executed.ipynb, kernel-metadata.edited.json)")
    args = parser.parse_args(argv)
    if args.force is not None and (args.check or args.carry_back):
        parser.error("--force renders: use it without --check and --carry-back")
    if args.carry_back:
        carried, problems = carry_back(args.carry_back, root)
        if carried:
            build(root)  # every platform from the source the edits went into
        return 1 if problems else 0
    if not args.check:
        return build(root, args.force)
    problems = findings(root)
    for line, _ in problems:
        print(line)
    if problems:
        print(summary(problems))
        return 1
    print("notebooks and README badge table are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
