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
import hashlib
import json
import re
import shutil
import sys
import tomllib
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

try:
    import jupytext
    import nbformat
except ImportError:  # run with a bare python: use the project's environment if it exists
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        import os

        os.execv(venv_python, [str(venv_python), __file__, *sys.argv[1:]])
    raise SystemExit("build_notebooks.py needs jupytext and nbformat: run `make install` "
                     "(or `pip install jupytext nbformat`).") from None

import lib  # noqa: E402
from lib import workloads as contract  # noqa: E402
from lib.runtime.platforms import KAGGLE_ROOT_ENV, PLATFORMS, Platform  # noqa: E402

SRC, OUT = ROOT / "notebooks_src", ROOT / "notebooks"
BADGES = ("<!-- badges:start -->", "<!-- badges:end -->")
IMAGES = ("<!-- images:start -->", "<!-- images:end -->")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
# platform -> (kernel-metadata.json machine_shape, notebook metadata.kaggle.accelerator)
KAGGLE_SHAPES = {
    "kaggle_p100": ("NvidiaTeslaP100", "nvidiaTeslaP100"),
    "kaggle_t4x2": ("NvidiaTeslaT4", "nvidiaTeslaT4"),
    "kaggle_tpu": ("TpuV5E8", "tpuV5e8"),
}
# Where the bootstrap clones on Kaggle, before `lib` can be imported: lib.runtime.platforms.storage
# ("kaggle").scratch, relative to the Kaggle root (tests/test_builder.py holds them equal).
KAGGLE_CLONE = {"kaggle_root_env": KAGGLE_ROOT_ENV, "kaggle_scratch": "temp/train-anywhere"}
COLAB_GPU = {"colab_t4": ("GPU", "T4"), "colab_tpu": ("TPU", "V5E1")}
# The other clouds' badges (lib/runtime/clouds.py). Studio Lab: the GitHub blob URL under
# /import/github/ (aws/studio-lab-examples: open-in-studio-lab/README.md); Paperspace:
# "Run on Gradient", github.com -> console.paperspace.com/github (docs.digitalocean.com/
# products/paperspace/notebooks/how-to/add-run-on-gradient/). Paid SageMaker has none: its
# README steps clone the repository in JupyterLab.
CLOUD_BADGES = {
    "studiolab": ("Open In SageMaker Studio Lab", "https://studiolab.sagemaker.aws/studiolab.svg",
                  "https://studiolab.sagemaker.aws/import/github/{repository}/blob/{branch}/{path}"),
    "paperspace": ("Run on Gradient", "https://assets.paperspace.io/img/gradient-badge.svg",
                   "https://console.paperspace.com/github/{repository}/blob/{branch}/{path}"),
    # Lightning: the URL-encoded blob URL as repo_url, with the Studio badge image Lightning's
    # own READMEs use; Modal: the raw blob URL after /notebooks/new/, with the badge image of
    # modal-projects/training-gym (tutorials/generate_tutorial.py).
    "lightning": ("Open In Studio",
                  "https://pl-bolts-doc-images.s3.us-east-2.amazonaws.com/app-2/studio-badge.svg",
                  "https://lightning.ai/new?repo_url={blob_quoted}"),
    "modal": ("Open in Modal", "https://modal-cdn.com/open-in-modal.svg",
              "https://modal.com/notebooks/new/{blob}"),
}
_PLATFORM_LINE = re.compile(r"^PLATFORM = .*$", re.MULTILINE)
# Notebook metadata: what the build wrote (source, platform, "id hash" of each cell in order),
# to tell a user's edit from its own (the last sections below).
RECORD = "train_anywhere"
COPY = re.compile(r"^\w+\.(edited|executed)(-\d+)?\.ipynb$")  # the copies a build keeps


def settings(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """Repository, branch and Kaggle user: the one setting behind every link and clone."""
    conf = tomllib.loads(pyproject.read_text())["tool"]["train_anywhere"]
    return {"repository": conf["repository"], "branch": conf["branch"],
            "kaggle_user": conf.get("kaggle_user", conf["repository"].split("/")[0]),
            "version": lib.__version__}


def blob_url(cfg: dict, path: str) -> str:
    return f"https://github.com/{cfg['repository']}/blob/{cfg['branch']}/{path}"


def open_link(platform: Platform, cfg: dict, path: str) -> str | None:
    if platform.runtime == "colab":
        return f"https://colab.research.google.com/github/{cfg['repository']}/blob/{cfg['branch']}/{path}"
    if platform.runtime == "kaggle":
        return f"https://kaggle.com/kernels/welcome?src={blob_url(cfg, path)}"
    if platform.runtime in CLOUD_BADGES:
        blob = blob_url(cfg, path)
        return CLOUD_BADGES[platform.runtime][2].format(
            **cfg, path=path, blob=blob, blob_quoted=urllib.parse.quote(blob, safe=""))
    return None


def badge_parts(platform: Platform, cfg: dict, path: str) -> tuple[str, str, str] | None:
    """(verb, badge image URL, link that opens `path` there), or None where the platform has
    no open link (it is cloned or downloaded). Every badge is made from this: README, notebook
    headers and the site's platform tabs (docs/build.py, which serves a local copy of the
    image)."""
    link = open_link(platform, cfg, path)
    if link is None:
        return None
    if platform.runtime in CLOUD_BADGES:
        verb, image, _ = CLOUD_BADGES[platform.runtime]
        return verb, image, link
    if platform.runtime == "colab":
        return "Open in Colab", COLAB_BADGE, link
    return "Open in Kaggle", KAGGLE_BADGE, link


def badge(platform: Platform, cfg: dict, path: str) -> str:
    parts = badge_parts(platform, cfg, path)
    if parts is None:
        return f"[{platform.title}]({path})"
    verb, image, link = parts
    return f"[![{verb}]({image})]({link})"


def header_cell(workload: str, platform: Platform, cfg: dict, legacy: bool = False) -> str:
    """The first cell; `legacy`: as renderers before the edit record wrote it."""
    path = f"notebooks/{platform.name}/{workload}.ipynb"
    advice = (" Edit the source, not this notebook: the next build overwrites it." if legacy else
              f" Edit the source; an edit made here is kept by the next build, and `python "
              f"build_notebooks.py --carry-back {path}` carries it back to the source.")
    return (
        f"{badge(platform, cfg, path)}\n\n"
        f"**Generated** by `build_notebooks.py` from `notebooks_src/{workload}.py` for "
        f"**{platform.title}** ({platform.gpu}{'; ' + platform.status if platform.status else ''})."
        f"{advice}"
    )


BOOTSTRAP = '''\
# @title Bootstrap: set up this runtime (generated; the work is lib/bootstrap.py's `start`)
# Finds the train-anywhere checkout this notebook was opened from (Jupyter, papermill), else
# clones the version below (a fresh Colab or Kaggle runtime; on Kaggle outside the output).
import os
import subprocess
import sys
from pathlib import Path

_project = {{"repository": "{repository}", "ref": "{branch}", "version": "{version}"}}


class BootstrapError(RuntimeError):
    def _render_traceback_(self):  # IPython shows this one line instead of a traceback
        return [f"BootstrapError: {{self}}"]


def _checkout():
    """(folder, how): the checkout holding papermill's input, the notebook the kernel's
    parent runs, or the kernel's folder; else a clone ("cloned"; found: "clone")."""
    named = [globals().pop("PAPERMILL_INPUT_PATH", None) or "",
             globals().pop("PAPERMILL_OUTPUT_PATH", "")]
    try:
        named += Path(f"/proc/{{os.getppid()}}/cmdline").read_bytes().decode().split("\\0")
    except OSError:  # no /proc (macOS): ask ps
        ps = ["ps", "-o", "args=", "-p", str(os.getppid())]
        named += subprocess.run(ps, capture_output=True, text=True).stdout.split()
    for start in [Path(a).parent for a in named if a.endswith(".ipynb")] + [Path.cwd()]:
        for folder in (start.resolve(), *start.resolve().parents):
            if (folder / "lib" / "bootstrap.py").is_file():
                return folder, None
    kaggle = Path(os.environ.get("{kaggle_root_env}", "/kaggle")) / "{kaggle_scratch}"
    home = kaggle if "KAGGLE_KERNEL_RUN_TYPE" in os.environ else Path.cwd().resolve()
    clone = home / _project["repository"].split("/")[1]
    if (clone / ".git").is_dir():
        return clone, "clone"
    url = f"https://github.com/{{_project['repository']}}.git"
    cmd = ["git", "clone", "--quiet", "--depth", "1", "--branch", _project["ref"], url]
    if (git := subprocess.run([*cmd, str(clone)], capture_output=True, text=True)).returncode:
        said = (git.stderr.strip().splitlines() or ["no message"])[-1]
        raise BootstrapError(
            f"`{{' '.join(cmd)}}` failed ({{said}}). To run without the network, start the "
            "notebook inside your train-anywhere checkout (papermill: --cwd <checkout>/"
            "notebooks/<platform>); DATA_DIR and OUT_DIR then default to its ./data and ./runs.")
    return clone, "cloned"


_root, _how = _checkout()
sys.path.insert(0, str(_root))
from lib import bootstrap

if not hasattr(bootstrap, "start"):  # a library older than this notebook's
    raise BootstrapError(f"the library at {{_root}} is older than this notebook "
                         f"(train-anywhere {{_project['version']}}): delete that folder and run "
                         "this cell again, or open the notebook rendered there.")
_runtime = bootstrap.start(PLATFORM, _root, _project, _how, globals().get("TRACKERS"))'''


def bootstrap_metadata(platform: Platform) -> dict:
    """The bootstrap cell shown folded, as each front end reads it: Colab's form view (the
    `# @title` line is what it shows), Kaggle's hidden input, JupyterLab's hidden source."""
    meta = {"jupyter": {"source_hidden": True}}
    if platform.runtime == "colab":
        meta["cellView"] = "form"
    if platform.runtime == "kaggle":
        meta["_kg_hide-input"] = True
    return meta


def _metadata(platform: Platform) -> dict:
    meta = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    if platform.runtime == "colab":
        accelerator, gpu_type = COLAB_GPU[platform.name]
        meta["accelerator"] = accelerator
        meta["colab"] = {"provenance": [], "gpuType": gpu_type}
    if platform.runtime == "kaggle":
        meta["kaggle"] = {
            "accelerator": KAGGLE_SHAPES[platform.name][1],
            "isGpuEnabled": platform.accelerator == "cuda",
            "isInternetEnabled": True, "dataSources": [], "language": "python",
            "sourceType": "notebook",
        }
    return meta


# Colab's form view (googlecolab/colabtools#3377: Colab has no cell tags, so a form is how it
# sets parameters): `# @title` first, each parameter `NAME = value  # @param ...` (a closed
# list is a drop-down; `raw` takes any Python literal: None, a list), its explanation a
# `# @markdown` line above it; the cell shown as the form alone (metadata cellView "form", as
# Colab saves it). The code stays valid Python, so papermill's cell after it still overrides.
FORM_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def form_annotation(kind, choices: tuple | None) -> str:
    """What follows `# @param` for a parameter of type `kind` (a type hint) and closed list."""
    if choices and all(isinstance(c, str) for c in choices):
        return json.dumps(list(choices))
    return json.dumps({"type": FORM_TYPES.get(kind, "raw")}, separators=(",", ":")).replace(
        '"type"', "type")


def colab_form(cell, workload: str, platform: Platform) -> None:
    """Turn the parameters `cell` into a Colab form (in place); PLATFORM stays out of it."""
    import ast
    import io
    import tokenize
    import typing

    tree = ast.parse(cell.source)
    values = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body
              if isinstance(n, ast.Assign)}
    try:
        config = contract.get(workload).config
    except LookupError:  # a notebook of no workload (a test's probe): its values' own types
        hints, choices = {n.lower(): type(v) for n, v in values.items()}, {}
    else:
        choices = config.closed_choices(dict(values, PLATFORM=platform.name))
        hints = typing.get_type_hints(config)
    comments = {tok.start[0]: tok for tok in tokenize.generate_tokens(
        io.StringIO(cell.source).readline) if tok.type == tokenize.COMMENT}
    lines = ["# @title Parameters (a form: set the values, then run the cell)"]
    for number, line in enumerate(cell.source.splitlines(), start=1):
        name = line.split("=", 1)[0].strip()
        if name not in values or name == "PLATFORM":
            lines.append(line)
            continue
        comment = comments.get(number)
        code = line[:comment.start[1]].rstrip() if comment else line.rstrip()
        if comment:
            lines.append(f"# @markdown `{name}`: {comment.string.lstrip('#').strip()}")
        annotation = form_annotation(hints[name.lower()], choices.get(name))
        lines.append(f"{code}  # @param {annotation}")
    cell.source = "\n".join(lines)
    cell.metadata["cellView"] = "form"


def plain_parameters(text: str) -> str:
    """A Colab form's parameters cell as the source writes it (what `colab_form` added, taken
    out: its title, each explanation back as the line's comment); other cells as they are."""
    out, said = [], {}
    for line in text.splitlines():
        if line.startswith("# @title"):
            continue
        if explained := re.match(r"# @markdown `(\w+)`: (.*)$", line):
            said[explained[1]] = explained[2]
            continue
        if param := re.match(r"(\w+)( = .*?)  # @param .*$", line):
            why = said.get(param[1])
            line = f"{param[1]}{param[2]}" + (f"  # {why}" if why else "")
        out.append(line)
    return "\n".join(out)


def render(source: Path, platform: Platform, cfg: dict, legacy: bool = False) -> str:
    """The notebook JSON text for `source` on `platform`, with the record of its cells (`legacy`:
    as renderers before the record wrote it)."""
    workload = source.stem
    nb = jupytext.read(source, fmt="py:percent")
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if len(params) != 1 or not _PLATFORM_LINE.search(params[0].source):
        raise SystemExit(f"{source}: expected one cell tagged 'parameters' with a "
                         "`PLATFORM = ...` line")
    params[0].source = _PLATFORM_LINE.sub(
        f'PLATFORM = "{platform.name}"  # which notebook this is (written by build_notebooks.py)',
        params[0].source)
    # The bootstrap follows the parameters (and the cell papermill injects after them): it
    # reads PLATFORM from there, so the platform is written once and `-p PLATFORM` moves both.
    for cell in nb.cells:  # the source's own cell metadata is dropped, tags kept
        cell.metadata = {"tags": cell.metadata["tags"]} if cell.metadata.get("tags") else {}
    if platform.runtime == "colab":  # Colab has no cell tags: its form sets the parameters
        colab_form(params[0], workload, platform)
    at = nb.cells.index(params[0]) + 1
    boot = nbformat.v4.new_code_cell(BOOTSTRAP.format(**cfg, **KAGGLE_CLONE),
                                     metadata=bootstrap_metadata(platform))
    cells = [nbformat.v4.new_markdown_cell(header_cell(workload, platform, cfg, legacy)),
             *nb.cells[:at], boot, *nb.cells[at:]]
    for i, cell in enumerate(cells):
        cell.id = f"{workload[:40]}-{i:02d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    meta = _metadata(platform)
    if not legacy:  # what this build wrote, cell by cell: a later build tells an edit from it
        meta[RECORD] = {"source": f"notebooks_src/{source.name}", "platform": platform.name,
                        "cells": [f"{cell.id} {cell_hash(cell)}" for cell in cells]}
    out = nbformat.v4.new_notebook(cells=cells, metadata=meta)
    out.nbformat_minor = 5
    nbformat.validate(out)
    return nbformat.writes(out, version=4) + "\n"


def kernel_metadata(workload: str, platform: Platform, cfg: dict) -> str:
    """kernel-metadata.json for `kaggle kernels push -p notebooks/<p>/kernels/<workload>`."""
    slug = f"{workload.replace('_', '-')}-{platform.name.replace('_', '-')}"
    meta = {
        "id": f"{cfg['kaggle_user']}/{slug}", "title": slug,
        "code_file": f"../../{workload}.ipynb", "language": "python", "kernel_type": "notebook",
        "is_private": True, "enable_gpu": platform.accelerator == "cuda",
        "enable_tpu": platform.accelerator == "xla", "enable_internet": True,
        "machine_shape": KAGGLE_SHAPES[platform.name][0], "dataset_sources": [],
        "competition_sources": [], "kernel_sources": [], "model_sources": [],
    }
    return json.dumps(meta, indent=2) + "\n"


# the badge table's columns: hosted ones first
BADGE_ORDER = ("colab", "kaggle", "studiolab", "sagemaker", "paperspace", "lightning", "modal",
               "local")


def badge_table(workloads: list[str], cfg: dict) -> str:
    platforms = sorted(PLATFORMS.values(), key=lambda p: BADGE_ORDER.index(p.runtime))
    titles = [f"{p.title} ({p.status})" if p.status else p.title for p in platforms]
    head = "| workload | " + " | ".join(titles) + " |"
    rows = [head, "|---" * (len(platforms) + 1) + "|"]
    for w in workloads:
        cells = [badge(p, cfg, f"notebooks/{p.name}/{w}.ipynb") for p in platforms]
        rows.append(f"| `{w}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def images_table(manifest: Path) -> str:
    """README's "Platforms as tested": images.toml as a table, one row per hosted image."""
    images = tomllib.loads(manifest.read_text())["images"]
    rows = ["| image | Python | torch / torchvision | accelerator stack | pins the notebooks "
            "touch | notebooks tested on it | read from |", "|---" * 7 + "|"]
    for image in images.values():
        pins = dict(image["pins"])
        torch = " / ".join(pins.pop(k) for k in ("torch", "torchvision") if k in pins)
        xla = [f"{k} {pins.pop(k)}" for k in ("torch_xla", "jax") if k in pins]
        stack = "; ".join(filter(None, [", ".join(xla), image["accelerators"]]))
        others = [f"{k} {v}" for k, v in pins.items()]
        others += [f"{k} (newest)" for k in image.get("unpinned", [])]
        tested = ", ".join(f"`{p}`" for p in image["platforms"])
        rows.append(f"| {image['title']} | {image['python']} | {torch} | {stack} | "
                    f"{', '.join(others) or '-'} | {tested} | {image['source']}, {image['read']} |")
    return "\n".join(rows)


def _between(readme: str, markers: tuple[str, str], text: str, what: str) -> str:
    start, end = markers
    if start not in readme or end not in readme:
        raise SystemExit(f"README.md needs the markers {start} and {end} around the {what}")
    before, rest = readme.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{text}\n{end}{after}"


def with_badges(readme: str, table: str) -> str:
    return _between(readme, BADGES, table, "badge table")


def workload_sources(root: Path = ROOT) -> list[Path]:
    """notebooks_src/NAME.py of every workload; each must have its module lib/workloads/NAME.py
    (the contract), and each module its source."""
    sources = sorted((root / "notebooks_src").glob("*.py"))
    modules = set(contract.names(root / "lib" / "workloads"))
    for src in sources:
        if src.stem not in modules:
            raise SystemExit(f"notebooks_src/{src.name} has no lib/workloads/{src.name}: a "
                             "workload is both files (see lib/workloads/__init__.py); add it, "
                             "or start from `train-anywhere new NAME`.")
    for name in sorted(modules - {s.stem for s in sources}):
        raise SystemExit(f"lib/workloads/{name}.py has no notebooks_src/{name}.py: a workload "
                         "is both files (see lib/workloads/__init__.py); add it or remove both.")
    return sources


def expected_files(root: Path = ROOT, cfg: dict | None = None) -> dict[Path, str]:
    """Every generated file and the text it must have."""
    cfg = cfg or settings(root / "pyproject.toml")
    sources = workload_sources(root)
    files = {}
    for src in sources:
        for p in PLATFORMS.values():
            files[root / "notebooks" / p.name / f"{src.stem}.ipynb"] = render(src, p, cfg)
            if p.runtime == "kaggle":
                path = root / "notebooks" / p.name / "kernels" / src.stem / "kernel-metadata.json"
                files[path] = kernel_metadata(src.stem, p, cfg)
    readme = root / "README.md"
    text = with_badges(readme.read_text(), badge_table([s.stem for s in sources], cfg))
    files[readme] = _between(text, IMAGES, images_table(root / "images.toml"),
                             "table of hosted images")
    return files


# ---- a notebook a user changed ------------------------------------------------------------
# A rendered notebook records, per cell, a hash of what a user writes in it. A build rewrites a
# notebook only when its cells are the ones a build wrote: an edit is kept (and carried back to
# the source on request), and a run's outputs are never deleted without a copy kept beside them.

def cell_hash(cell) -> str:
    """What a user writes in a cell, hashed: its type, source (trailing newlines aside) and
    tags. Outputs, execution counts and what a front end adds to its metadata are not edits."""
    tags = cell.get("metadata", {}).get("tags", [])
    text = json.dumps([cell["cell_type"], cell["source"].rstrip("\n"), tags])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _injected(cell) -> bool:
    """papermill's injected-parameters cell belongs to a run, like outputs: it is no edit."""
    return "injected-parameters" in cell.get("metadata", {}).get("tags", [])


def has_outputs(nb) -> bool:
    return any(_injected(c) or c.cell_type == "code" and (
        c.get("outputs") or c.get("execution_count") is not None) for c in nb.cells)


def matched_cells(nb, record: dict[str, str]) -> list[tuple[str | None, Any]]:
    """(the id the build gave it, None for a cell added since; cell) for each cell of `nb`: by
    id (JupyterLab keeps nbformat 4.5 ids), by position where a tool dropped every id."""
    cells = [c for c in nb.cells if not _injected(c)]
    ids = [c.get("id") for c in cells]
    if not set(ids) & set(record) and len(cells) == len(record):
        return list(zip(record, cells, strict=True))
    return [(i if i in record else None, c) for i, c in zip(ids, cells, strict=True)]


def edits(nb, record: dict[str, str], fresh: dict[str, str]) -> list[str]:
    """How `nb`'s cells differ from what a build wrote (`record`: id -> cell_hash, in order),
    a few words each. A cell as this build writes it (`fresh`) is no edit: nothing is lost."""
    matched = matched_cells(nb, record)
    found = [f"cell {n} {'is new' if rid is None else 'changed'}"
             for n, (rid, cell) in enumerate(matched, 1)
             if rid is None or cell_hash(cell) not in (record[rid], fresh.get(rid))]
    present = [rid for rid, _ in matched if rid]
    found += [f"cell {rid} deleted" for rid in record if rid not in present and rid in fresh]
    if present != [rid for rid in record if rid in present]:
        found.append("cells moved")
    return found


def record_of(nb, legacy: Callable[[], str]) -> dict[str, str]:
    """The cells a build wrote into `nb`, from its record; for a notebook rendered before
    records were written, those of `legacy()`, the text the previous renderer wrote."""
    try:
        return dict(line.split() for line in nb.metadata[RECORD]["cells"])
    except (KeyError, TypeError, ValueError, AttributeError):  # none, or not as a build wrote it
        return {c.id: cell_hash(c) for c in nbformat.reads(legacy(), as_version=4).cells}


def notebook_state(path: Path, expected: str, legacy: Callable[[], str]) -> tuple[str, list]:
    """(state, what differs) of the notebook at `path`, whose rendering is now `expected`:
    current; stale (the build's own cells: rewrite it); executed (outputs of a run in place,
    cells current); executed-stale (outputs, cells out of date); edited; unreadable."""
    text = path.read_text(errors="replace")
    if text == expected:
        return "current", []
    try:
        nb = nbformat.reads(text, as_version=4)
    except (ValueError, KeyError, TypeError) as exc:  # a merge conflict, a truncated save
        return "unreadable", [f"not a notebook nbformat can read: {type(exc).__name__}"]
    ran = has_outputs(nb)
    fresh = {c.id: cell_hash(c) for c in nbformat.reads(expected, as_version=4).cells}
    if [cell_hash(c) for c in nb.cells if not _injected(c)] == list(fresh.values()):
        return ("executed" if ran else "stale"), []
    if found := edits(nb, record_of(nb, legacy), fresh):
        return "edited", found + (["outputs of a run"] if ran else [])
    return ("executed-stale" if ran else "stale"), []


def file_states(root: Path, cfg: dict, expected: dict[Path, str]) -> dict[Path, tuple]:
    """notebook_state of every generated file (missing, current or stale for the others)."""
    states = {}
    for path, text in expected.items():
        if not path.exists():
            states[path] = ("missing", [])
        elif path.suffix == ".ipynb":
            src, platform = root / "notebooks_src" / f"{path.stem}.py", PLATFORMS[path.parent.name]
            states[path] = notebook_state(path, text, lambda s=src, p=platform: render(
                s, p, cfg, legacy=True))
        else:
            states[path] = ("current" if path.read_text() == text else "stale", [])
    return states


def keep_copy(path: Path, kind: str) -> Path:
    """`path` copied beside it as NAME.<kind>.ipynb (NAME.<kind>-2.ipynb, ... when taken)."""
    name, n = path.name.split(".")[0], 1
    dest = path.with_name(f"{name}.{kind}.ipynb")
    while dest.exists():
        n += 1
        dest = path.with_name(f"{name}.{kind}-{n}.ipynb")
    shutil.copy2(path, dest)
    return dest


def _rel(path: Path, root: Path) -> Path:
    path = path.resolve()
    return path.relative_to(root) if path.is_relative_to(root) else path


def stale_files(root: Path = ROOT) -> list[str]:
    """Generated files that are missing, differ, carry outputs or edits, or are left over from
    a removed source: one line each, with what to run."""
    cfg = settings(root / "pyproject.toml")
    expected = expected_files(root, cfg)
    problems = []
    for path, (state, found) in file_states(root, cfg, expected).items():
        rel = path.relative_to(root)
        if state in ("missing", "stale"):
            problems.append(f"{rel}: {state}")
        elif state.startswith("executed"):
            problems.append(f"{rel}: carries outputs (run in place): clean it with `python "
                            f"build_notebooks.py --force {rel}` (it keeps your executed copy "
                            "beside it)")
        elif state == "edited":
            problems.append(f"{rel}: edited by hand ({'; '.join(found)}): `python "
                            f"build_notebooks.py --carry-back {rel}` carries the edits to the "
                            f"source, `--force {rel}` keeps a copy and renders it afresh")
        elif state == "unreadable":
            problems.append(f"{rel}: {found[0]}: `python build_notebooks.py --force {rel}` "
                            "keeps it as a copy beside it and renders it afresh")
    generated = set(expected)
    for p in sorted((root / "notebooks").rglob("*")):
        if p.is_file() and p.suffix in (".ipynb", ".json") and p not in generated \
                and ".ipynb_checkpoints" not in p.parts \
                and not COPY.match(p.name):  # Jupyter's autosaves, the copies a build kept
            problems.append(f"{p.relative_to(root)}: not generated from any source (remove it)")
    return problems


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
                             "notebooks_src/")
    kept, left = [], []
    for path, (state, _) in file_states(root, cfg, expected).items():
        rel, forced = path.relative_to(root), force is not None and (not force or path in wanted)
        if state == "current":
            continue
        if state in ("edited", "unreadable", "executed") and not forced:
            (left if state == "executed" else kept).append(rel)
            continue
        note = ""
        if state not in ("missing", "stale"):  # the user's notebook first, beside it
            kind = "executed" if state.startswith("executed") else "edited"
            note = f" (your {kind} notebook kept as {keep_copy(path, kind).relative_to(root)})"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected[path])
        print(f"wrote {rel}{note}")
    if kept:
        names, one = _one_or_all(kept)
        print(f"kept {len(kept)} notebook(s) edited by hand as they are: {names}. `python "
              f"build_notebooks.py --carry-back {one}` carries the edits to the source and "
              f"renders every platform from it; `python build_notebooks.py --force {one}` keeps "
              "a copy beside it and renders it afresh")
    if left:
        names, one = _one_or_all(left)
        print(f"left {len(left)} notebook(s) run in place as they are (their cells are current: "
              f"rendering would only delete the outputs): {names}. Before committing, `python "
              f"build_notebooks.py --force {one}` keeps the executed copy beside it and renders "
              "it clean")
    return 0


# ---- carrying a notebook's edits back to its source -----------------------------------------

def _label(n: int, cell) -> str:
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return f"cell {n} ({first if len(first) <= 40 else first[:40].rsplit(' ', 1)[0] + '...'!r})"


def write_source(src: Path, nb) -> str:
    """`nb` as percent text, written by jupytext, under `src`'s own header (jupytext's YAML
    block, kept as it is: no version lines added), so a carried cell is the only change."""
    old = src.read_text()
    fmt = {"extension": ".py", "format_name": "percent", "notebook_metadata_filter": "-all"}
    body = jupytext.writes(jupytext.reads(old, fmt="py:percent"), fmt=fmt)
    if not old.endswith(body):  # the source is not as jupytext writes it: jupytext's header
        return jupytext.writes(nb, fmt="py:percent")
    return old[:len(old) - len(body)] + jupytext.writes(nb, fmt=fmt)


def _carried(cell, old, problems: list[str], label: str, platform_line: str):
    """`cell` (a notebook's) as the source cell replacing `old`: the parameters cell keeps the
    source's PLATFORM line; the source's cell metadata is kept, the notebook's tags taken."""
    text = cell.source
    if "parameters" in old.metadata.get("tags", []):
        text = plain_parameters(text)  # a Colab form's annotations stay out of the source
        mine = _PLATFORM_LINE.search(text)
        if mine is None:
            problems.append(f"{label}: the parameters cell lost its `PLATFORM = ...` line: put "
                            "it back, then carry again")
            return None
        if mine.group(0) != platform_line:
            problems.append(f"{label}: PLATFORM is written into each notebook by the build: "
                            "that line is not carried, the rest of the cell is")
        theirs = _PLATFORM_LINE.search(old.source).group(0)
        text = _PLATFORM_LINE.sub(lambda _: theirs, text, count=1)
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell.cell_type]
    new = make(text, metadata={k: v for k, v in old.metadata.items() if k != "tags"})
    if cell.get("metadata", {}).get("tags"):
        new.metadata["tags"] = list(cell.metadata["tags"])
    return new


def _rendered_notebook(notebook: Path, root: Path) -> tuple[Any, Path, Platform]:
    """(the notebook, its source, its platform), or one line saying what is wrong."""
    path = notebook.resolve()
    if not path.is_file() or path.suffix != ".ipynb":
        raise SystemExit(f"--carry-back {notebook}: no such notebook; expected a notebook "
                         "this project rendered, notebooks/<platform>/<workload>.ipynb")
    try:
        nb = jupytext.read(path)
    except (ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--carry-back {notebook}: not a notebook nbformat can read "
                         f"({type(exc).__name__}); open it in Jupyter and save it, or carry "
                         "the edits by hand") from None
    rec = nb.metadata.get(RECORD, {})
    workload = Path(rec.get("source", path.name.split(".")[0])).stem
    name = rec.get("platform", path.parent.name)
    if name not in PLATFORMS:
        raise SystemExit(f"--carry-back {notebook}: {name!r} is no platform: expected a "
                         "notebook this project rendered, notebooks/<platform>/<workload>.ipynb "
                         f"with <platform> one of {', '.join(PLATFORMS)}")
    src = root / "notebooks_src" / f"{workload}.py"
    if not src.is_file():
        raise SystemExit(f"--carry-back {notebook}: there is no notebooks_src/{workload}.py to "
                         "carry it into: expected a notebook this project rendered, "
                         "notebooks/<platform>/<workload>.ipynb")
    return nb, src, PLATFORMS[name]


def carry_plan(nb, src: Path, platform: Platform, cfg: dict, src_rel: Path):
    """(the source with `nb`'s edits carried, [(source cell index, label)] carried, one line
    per edit not carried). A cell is carried when it maps one to one onto a source cell that
    is unchanged there since `nb` was rendered; the generated cells never are."""
    fresh = nbformat.reads(render(src, platform, cfg), as_version=4)
    record = record_of(nb, lambda: render(src, platform, cfg, legacy=True))
    params = next(i for i, c in enumerate(fresh.cells) if "parameters" in c.metadata.get(
        "tags", []))
    generated = {fresh.cells[0].id: "header", fresh.cells[params + 1].id: "bootstrap"}
    to_source = {c.id: k for k, c in enumerate(c for c in fresh.cells if c.id not in generated)}
    now = {c.id: cell_hash(c) for c in fresh.cells}
    platform_line = _PLATFORM_LINE.search(fresh.cells[params].source).group(0)
    source, carried, problems = jupytext.read(src, fmt="py:percent"), [], []
    matched = matched_cells(nb, record)
    for n, (rid, cell) in enumerate(matched, 1):
        label = _label(n, cell)
        if rid is None:
            problems.append(f"{label}: added here, so it has no place in {src_rel}: add it "
                            "there by hand")
        elif cell_hash(cell) in (record[rid], now.get(rid)):  # unchanged, or the source's already
            continue
        elif rid in generated:
            problems.append(f"{label}: the generated {generated[rid]} cell is never carried: "
                            "undo the edit, or keep a copy and render afresh with --force")
        elif now.get(rid) != record[rid] or rid not in to_source:
            problems.append(f"{label}: {src_rel} changed this cell since the notebook was "
                            "rendered: carry the edit by hand")
        elif (new := _carried(cell, source.cells[to_source[rid]], problems, label,
                              platform_line)) is not None:
            source.cells[to_source[rid]] = new
            carried.append((to_source[rid], label))
    present = [rid for rid, _ in matched if rid]
    problems += [f"cell {rid}: deleted here; delete it from {src_rel} by hand (a deletion is "
                 "not carried)" for rid in record if rid not in present and rid in now]
    if present != [rid for rid in record if rid in present]:
        problems.append(f"cells were moved here: move them in {src_rel} by hand (a move is not "
                        "carried)")
    return source, carried, problems


def _checked_text(src: Path, source, carried: list, src_rel: Path) -> str:
    """`source` as `src`'s new text, once jupytext reads each carried cell back as it was
    carried and one cell is tagged 'parameters'; else one line, and nothing is written."""
    text = write_source(src, source)
    back = jupytext.reads(text, fmt="py:percent")
    for k, label in carried:
        if len(back.cells) != len(source.cells) or cell_hash(back.cells[k]) != cell_hash(
                source.cells[k]):
            raise SystemExit(f"{label}: {src_rel} would not read back as this cell (a `# %%` "
                             "line splits it?): nothing carried; carry it by hand")
    tagged = [c for c in back.cells if "parameters" in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise SystemExit(f"the carried cells leave {src_rel} with {len(tagged)} cells tagged "
                         "'parameters' (one expected): nothing carried; tag the parameters "
                         "cell again, then carry again")
    return text


def carry_back(notebook: Path, root: Path = ROOT) -> int:
    """Write the cells edited in `notebook` (a rendered notebook) into its source,
    notebooks_src/<workload>.py, then build every platform from it (carry_plan says which
    cells). Exit 1 when an edit was not carried: each is one line naming its cell."""
    nb, src, platform = _rendered_notebook(notebook, root)
    src_rel, nb_rel = _rel(src, root), _rel(notebook, root)
    source, carried, problems = carry_plan(nb, src, platform,
                                           settings(root / "pyproject.toml"), src_rel)
    if carried:
        src.write_text(_checked_text(src, source, carried, src_rel))
        print(f"carried {len(carried)} cell(s) of {nb_rel} into {src_rel}: "
              + ", ".join(label for _, label in carried))
    for line in problems:
        print(line)
    if not carried:
        print(f"nothing carried: {nb_rel} has "
              + ("no edit that maps onto the source" if problems else "no edits"))
        return 1 if problems else 0
    build(root)
    return 1 if problems else 0


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
                        help="render notebooks edited by hand or run in place too (these, or "
                             "all), each kept first as a copy beside it (NAME.edited.ipynb, "
                             "NAME.executed.ipynb)")
    args = parser.parse_args(argv)
    if args.force is not None and (args.check or args.carry_back):
        parser.error("--force renders: use it without --check and --carry-back")
    if args.carry_back:
        return carry_back(args.carry_back, root)
    if not args.check:
        return build(root, args.force)
    problems = stale_files(root)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} generated file(s) to see to: `python build_notebooks.py` "
              "renders what is out of date; each line says what else to run")
        return 1
    print("notebooks and README badge table are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
