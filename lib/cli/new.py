"""`train-anywhere new NAME`: a new workload from a template that already runs everywhere.

It writes the workload's three files, and nothing else:

    notebooks_src/NAME.py     the notebook (parameters cell, data, training, results)
    lib/workloads/NAME.py     its module: config, data format and sample, task, results
    tests/test_NAME.py        its tests (the sample's format, a smoke run of the notebook)

from lib/cli/templates/*.tmpl: a small classifier of arrays kept as .npz files, with a synthetic
sample in that format, so `python build_notebooks.py` then renders a notebook per platform
that trains at once. The places to edit are marked `EDIT`. A bad NAME (not a lower-case
identifier, or a workload that exists) is one line and writes nothing.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from string import Template

from lib import workloads
from lib.cli.params import ROOT, UsageError

TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_NAME = 32  # Kaggle kernel slugs add the platform to it and must stay short
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def files(name: str, root: Path = ROOT) -> dict[str, Path]:
    """template name -> the file `new` writes for workload `name`."""
    return {"notebook": root / "notebooks_src" / f"{name}.py",
            "workload": root / "lib" / "workloads" / f"{name}.py",
            "test": root / "tests" / f"test_{name}.py"}


def check_name(name: str, root: Path = ROOT) -> str:
    """`name` if it can be a new workload, else a one-line UsageError saying why."""
    example = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "my_experiment"
    if not example[0].isalpha():
        example = f"exp_{example}"
    if keyword.iskeyword(name):
        raise UsageError(f"workload name {name!r} is a Python keyword, so no module can have it; "
                         f"choose another, e.g. {name}_exp.")
    if not _NAME.fullmatch(name):
        raise UsageError(f"workload name {name!r} is not a lower-case Python identifier; "
                         f"use letters, digits and underscores, starting with a letter, e.g. "
                         f"{example}.")
    if len(name) > MAX_NAME:
        raise UsageError(f"workload name {name!r} has {len(name)} characters; expected at most "
                         f"{MAX_NAME} (Kaggle's kernel names include it), e.g. {name[:20]}.")
    module = root / "lib" / "workloads" / f"{name}.py"
    taken = [p for p in (module, *files(name, root).values()) if p.exists()]
    if name in workloads.names(module.parent) or taken:
        where = (taken or [module])[0].relative_to(root)
        raise UsageError(f"workload {name!r} already exists ({where}); choose another name, "
                         f"e.g. {name}_2, or edit that one.")
    return name


def render(template: str, name: str) -> str:
    """The text of one template for workload `name`."""
    words = name.split("_")
    values = {"name": name, "title": " ".join(words).capitalize(),
              "config": "".join(w.capitalize() for w in words) + "Config"}
    return Template((TEMPLATES / f"{template}.py.tmpl").read_text()).substitute(values)


def new(name: str, root: Path = ROOT) -> list[Path]:
    """Write the three files of a new workload `name`; the paths written."""
    check_name(name, root)
    targets = files(name, root)
    texts = {kind: render(kind, name) for kind in targets}  # all rendered before any is written
    for kind, path in targets.items():
        path.write_text(texts[kind])
    return list(targets.values())
