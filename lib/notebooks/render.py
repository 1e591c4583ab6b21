"""One notebook per platform from a workload's source, and the README's generated tables.

`render(source, platform, cfg)` is the notebook's text: a generated header (source, badge), the
platform written into the parameters cell (a Colab form on Colab), the bootstrap cell after it,
the runtime metadata Colab or Kaggle reads and the record of what was written
(lib.notebooks.edits). Kaggle notebooks get a kernel-metadata.json for `kaggle kernels push`.
`expected_files` is every generated file and its text; `build_notebooks.py` writes them.
Output is byte-stable: fixed cell ids, no timestamps, no outputs.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jupytext
import nbformat

from lib import workloads as contract
from lib.notebooks.badges import ROOT, badge, badge_table, settings
from lib.notebooks.edits import RECORD, cell_hash
from lib.runtime.platforms import KAGGLE_ROOT_ENV, PLATFORMS, Platform

BADGES = ("<!-- badges:start -->", "<!-- badges:end -->")
IMAGES = ("<!-- images:start -->", "<!-- images:end -->")
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
PLATFORM_LINE = re.compile(r"^PLATFORM = .*$", re.MULTILINE)


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
    if len(params) != 1 or not PLATFORM_LINE.search(params[0].source):
        raise SystemExit(f"{source}: expected one cell tagged 'parameters' with a "
                         "`PLATFORM = ...` line")
    params[0].source = PLATFORM_LINE.sub(
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


# kernel-metadata.json's keys (Kaggle/kaggle-cli docs/kernels_metadata.md) that follow from the
# project and the platform: the build writes them. The others are the user's (a dataset
# attached in dataset_sources, is_private false to publish, enable_internet, id_no, ...): a
# build keeps them as the file has them and writes its defaults only into a new file. `title`
# and `id` are the build's together: Kaggle links a kernel's slug to its title.
KERNEL_KEYS = ("id", "title", "code_file", "language", "kernel_type", "enable_gpu", "enable_tpu",
               "machine_shape")


def kernel_metadata(workload: str, platform: Platform, cfg: dict,
                    current: dict | None = None) -> str:
    """kernel-metadata.json for `kaggle kernels push -p notebooks/<p>/kernels/<workload>`:
    the build's keys (KERNEL_KEYS) as the project has them, the user's from `current` (the
    file as it is) where it has them."""
    slug = f"{workload.replace('_', '-')}-{platform.name.replace('_', '-')}"
    meta = {
        "id": f"{cfg['kaggle_user']}/{slug}", "title": slug,
        "code_file": f"../../{workload}.ipynb", "language": "python", "kernel_type": "notebook",
        "is_private": True, "enable_gpu": platform.accelerator == "cuda",
        "enable_tpu": platform.accelerator == "xla", "enable_internet": True,
        "machine_shape": KAGGLE_SHAPES[platform.name][0], "dataset_sources": [],
        "competition_sources": [], "kernel_sources": [], "model_sources": [],
    }
    meta.update((k, v) for k, v in (current or {}).items() if k not in KERNEL_KEYS)
    return json.dumps(meta, indent=2) + "\n"


def json_object(path: Path) -> dict | None:
    """The JSON object in the file at `path`; None when there is none, or it is no object."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def lane_workloads(image: dict, platform: str) -> list[str] | None:
    """The workloads whose `platform` notebooks an image's CI lane runs (images.toml: its
    `platform_workloads` for that platform, else its `workloads`); None: every workload. The
    lanes run these (tests/lanes.py `notebooks`) and the README's table names them."""
    return image.get("platform_workloads", {}).get(platform, image.get("workloads"))


def _only(image: dict, platform: str) -> str:
    """The workloads in brackets after a platform whose lane runs only some of its notebooks;
    "" when it runs them all."""
    only = lane_workloads(image, platform)
    return f" ({', '.join(only)})" if only else ""


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
        tested = ", ".join(f"`{p}`" + _only(image, p) for p in image["platforms"])
        rows.append(f"| {image['title']} | {image['python']} | {torch} | {stack} | "
                    f"{', '.join(others) or '-'} | {tested} | {image['source']}, {image['read']} |")
    return "\n".join(rows)


def replace_between(readme: str, markers: tuple[str, str], text: str, what: str) -> str:
    start, end = markers
    if start not in readme or end not in readme:
        raise SystemExit(f"README.md needs the markers {start} and {end} around the {what}")
    before, rest = readme.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{text}\n{end}{after}"


def with_badges(readme: str, table: str) -> str:
    return replace_between(readme, BADGES, table, "badge table")


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
                files[path] = kernel_metadata(src.stem, p, cfg, json_object(path))
    readme = root / "README.md"
    text = with_badges(readme.read_text(), badge_table([s.stem for s in sources], cfg))
    files[readme] = replace_between(text, IMAGES, images_table(root / "images.toml"),
                             "table of hosted images")
    return files
