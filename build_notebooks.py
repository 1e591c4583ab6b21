#!/usr/bin/env python3
"""Render notebooks_src/<workload>.py into notebooks/<platform>/<workload>.ipynb.

Each notebook gets a generated header (source, badge), a bootstrap cell, its PLATFORM in the
parameters cell and the runtime metadata Colab or Kaggle reads; Kaggle notebooks get a
kernel-metadata.json for `kaggle kernels push`. The README's badge table is rewritten too.
Output is byte-stable (fixed cell ids, no timestamps, no outputs).

    python build_notebooks.py           # write everything
    python build_notebooks.py --check   # exit 1 naming every stale or missing file
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

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

from lib.platforms import PLATFORMS, Platform  # noqa: E402

SRC, OUT = ROOT / "notebooks_src", ROOT / "notebooks"
BADGES = ("<!-- badges:start -->", "<!-- badges:end -->")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
# platform -> (kernel-metadata.json machine_shape, notebook metadata.kaggle.accelerator)
KAGGLE_SHAPES = {
    "kaggle_p100": ("NvidiaTeslaP100", "nvidiaTeslaP100"),
    "kaggle_t4x2": ("NvidiaTeslaT4", "nvidiaTeslaT4"),
    "kaggle_tpu": ("TpuV5E8", "tpuV5e8"),
}
COLAB_GPU = {"colab_t4": ("GPU", "T4"), "colab_tpu": ("TPU", "V5E1")}
_PLATFORM_LINE = re.compile(r"^PLATFORM = .*$", re.MULTILINE)


def settings(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """Repository, branch and Kaggle user: the one setting behind every link and clone."""
    conf = tomllib.loads(pyproject.read_text())["tool"]["train_anywhere"]
    return {"repository": conf["repository"], "branch": conf["branch"],
            "kaggle_user": conf.get("kaggle_user", conf["repository"].split("/")[0])}


def blob_url(cfg: dict, path: str) -> str:
    return f"https://github.com/{cfg['repository']}/blob/{cfg['branch']}/{path}"


def open_link(platform: Platform, cfg: dict, path: str) -> str | None:
    if platform.runtime == "colab":
        return f"https://colab.research.google.com/github/{cfg['repository']}/blob/{cfg['branch']}/{path}"
    if platform.runtime == "kaggle":
        return f"https://kaggle.com/kernels/welcome?src={blob_url(cfg, path)}"
    return None


def badge(platform: Platform, cfg: dict, path: str) -> str:
    link = open_link(platform, cfg, path)
    if link is None:
        return f"[{platform.title}]({path})"
    image = COLAB_BADGE if platform.runtime == "colab" else KAGGLE_BADGE
    verb = "Open in Colab" if platform.runtime == "colab" else "Open in Kaggle"
    return f"[![{verb}]({image})]({link})"


def header_cell(workload: str, platform: Platform, cfg: dict) -> str:
    path = f"notebooks/{platform.name}/{workload}.ipynb"
    return (
        f"{badge(platform, cfg, path)}\n\n"
        f"**Generated** by `build_notebooks.py` from `notebooks_src/{workload}.py` for "
        f"**{platform.title}** ({platform.gpu}). Edit the source, not this notebook: the next "
        "build overwrites it."
    )


BOOTSTRAP = '''\
# Bootstrap ({platform}, generated): find the project, or clone it on a fresh Colab/Kaggle
# runtime, then install only what the runtime lacks (never torch) and mount Drive on Colab.
import subprocess
import sys
from pathlib import Path

repository, branch = "{repository}", "{branch}"
here = Path.cwd().resolve()
root = next((p for p in (here, *here.parents) if (p / "lib" / "bootstrap.py").is_file()), None)
if root is None:
    root = here / repository.split("/")[1]
    if not root.exists():
        subprocess.run(["git", "clone", "--depth", "1", "--branch", branch,
                        f"https://github.com/{{repository}}.git", str(root)], check=True)
sys.path.insert(0, str(root))
from lib.bootstrap import prepare

prepare("{platform}", root)'''


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


def render(source: Path, platform: Platform, cfg: dict) -> str:
    """The notebook JSON text for `source` on `platform`."""
    workload = source.stem
    nb = jupytext.read(source, fmt="py:percent")
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if len(params) != 1 or not _PLATFORM_LINE.search(params[0].source):
        raise SystemExit(f"{source}: expected one cell tagged 'parameters' with a "
                         "`PLATFORM = ...` line")
    params[0].source = _PLATFORM_LINE.sub(
        f'PLATFORM = "{platform.name}"  # which notebook this is (written by build_notebooks.py)',
        params[0].source)
    cells = [
        nbformat.v4.new_markdown_cell(header_cell(workload, platform, cfg)),
        nbformat.v4.new_code_cell(BOOTSTRAP.format(platform=platform.name, **cfg)),
        *nb.cells,
    ]
    for i, cell in enumerate(cells):
        cell.id = f"{workload[:40]}-{i:02d}"
        cell.metadata = {"tags": cell.metadata["tags"]} if cell.metadata.get("tags") else {}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    out = nbformat.v4.new_notebook(cells=cells, metadata=_metadata(platform))
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


BADGE_ORDER = ("colab", "kaggle", "local")  # the badge table's columns: hosted ones first


def badge_table(workloads: list[str], cfg: dict) -> str:
    platforms = sorted(PLATFORMS.values(), key=lambda p: BADGE_ORDER.index(p.runtime))
    head = "| workload | " + " | ".join(p.title for p in platforms) + " |"
    rows = [head, "|---" * (len(platforms) + 1) + "|"]
    for w in workloads:
        cells = [badge(p, cfg, f"notebooks/{p.name}/{w}.ipynb") for p in platforms]
        rows.append(f"| `{w}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def with_badges(readme: str, table: str) -> str:
    start, end = BADGES
    if start not in readme or end not in readme:
        raise SystemExit(f"README.md needs the markers {start} and {end} around the badge table")
    before, rest = readme.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{table}\n{end}{after}"


def expected_files(root: Path = ROOT, cfg: dict | None = None) -> dict[Path, str]:
    """Every generated file and the text it must have."""
    cfg = cfg or settings(root / "pyproject.toml")
    sources = sorted((root / "notebooks_src").glob("*.py"))
    files = {}
    for src in sources:
        for p in PLATFORMS.values():
            files[root / "notebooks" / p.name / f"{src.stem}.ipynb"] = render(src, p, cfg)
            if p.runtime == "kaggle":
                path = root / "notebooks" / p.name / "kernels" / src.stem / "kernel-metadata.json"
                files[path] = kernel_metadata(src.stem, p, cfg)
    readme = root / "README.md"
    files[readme] = with_badges(readme.read_text(), badge_table([s.stem for s in sources], cfg))
    return files


def stale_files(root: Path = ROOT) -> list[str]:
    """Generated files that are missing, differ, or are left over from a removed source."""
    expected = expected_files(root)
    problems = [f"{p.relative_to(root)}: {'stale' if p.exists() else 'missing'}"
                for p, text in expected.items() if not p.exists() or p.read_text() != text]
    generated = set(expected)
    for p in sorted((root / "notebooks").rglob("*")):
        if p.is_file() and p.suffix in (".ipynb", ".json") and p not in generated:
            problems.append(f"{p.relative_to(root)}: not generated from any source (remove it)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if any generated file is stale or missing")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale_files()
        for line in problems:
            print(line)
        if problems:
            print(f"{len(problems)} generated file(s) out of date: run `python build_notebooks.py`")
            return 1
        print("notebooks and README badge table are up to date")
        return 0
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
