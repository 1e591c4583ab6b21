"""Run a rendered notebook headless with papermill, the way CI and users do."""

from __future__ import annotations

import os
import re
from pathlib import Path
from unittest import mock

import nbformat
import papermill

ROOT = Path(__file__).resolve().parent.parent
FAKES = Path(__file__).resolve().parent / "fakes"
# The TPU stand-in: torch_xla's PJRT client on the CPU. Its graphs, compile counts and
# transfers are a TPU's; how hard LLVM optimises the CPU code is not, and XLA's CPU backend at
# its default level spends most of a smoke run compiling (MSHNet's first epoch: 96 s at the
# default, 37 s at level 0, where each step runs about 1.8x slower). The Makefile's test-xla
# sets the same for the tests that use XLA in their own process.
XLA_ON_CPU = {"PJRT_DEVICE": "CPU", "XLA_FLAGS": "--xla_backend_optimization_level=0"}


def execute(workload: str, platform: str, out: Path, env: dict | None = None,
            **parameters) -> nbformat.NotebookNode:
    """Execute notebooks/<platform>/<workload>.ipynb into `out`; return the executed notebook.

    `env` is set for the kernel (papermill's kernel inherits this process's environment).
    """
    notebook = ROOT / "notebooks" / platform / f"{workload}.ipynb"
    out.mkdir(parents=True, exist_ok=True)
    executed = out / f"{platform}-{workload}.ipynb"
    with mock.patch.dict(os.environ, env or {}):  # the kernel inherits it
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters,
                                   cwd=str(notebook.parent), progress_bar=False,
                                   kernel_name="python3")
    return nbformat.read(executed, as_version=4)


def stream_text(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook printed, and the plain-text lines a run shows
    (lib.base.progress.Lines
    keeps them in one display output, updated in place)."""
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            if o.get("output_type") == "stream":
                parts.append(o.get("text", ""))
            elif set(o.get("data", {})) == {"text/plain"}:
                parts.append(o["data"]["text/plain"] + "\n")
    return "".join(parts)


MAX_OUTPUTS = 8  # per code cell: a few prints, figures and one progress bar; never one a refresh
_LIBRARY_WARNING = re.compile(r"\w+Warning\b|WARNING \||IProgress not found")


def check_clean_outputs(nb: nbformat.NotebookNode, max_outputs: int = MAX_OUTPUTS) -> None:
    """What a reader of the executed notebook sees: every code cell has a handful of outputs
    (a progress bar must not add one per refresh), nothing on stderr, and no library warning
    a user cannot act on."""
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        outputs = cell.get("outputs", [])
        assert len(outputs) <= max_outputs, (i, len(outputs), cell.source[:80])
        for o in outputs:
            assert not (o.get("output_type") == "stream" and o.get("name") == "stderr"), (
                i, o.get("text", "")[:300])
            text = o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
            found = _LIBRARY_WARNING.search(text)
            assert found is None, (i, found and found.group(0), text[:300])


def epoch_lines(nb: nbformat.NotebookNode) -> list[str]:
    """The `epoch N/M  ...` rows the training cell printed."""
    return [line for line in stream_text(nb).splitlines() if re.match(r"epoch \d+/\d+  ", line)]


def figure_titles(folder: Path) -> dict[str, str]:
    """name -> title of every PNG figure saved under `folder` (`lib.plots.save` writes the
    title into the PNG's Title field)."""
    from PIL import Image

    titles = {}
    for path in sorted(Path(folder).rglob("*.png")):
        with Image.open(path) as image:
            titles[path.name] = image.text.get("Title", "")
    return titles


def markdown_outputs(nb: nbformat.NotebookNode) -> str:
    """Every Markdown output (tables rendered with IPython.display.Markdown)."""
    return "\n".join(o["data"]["text/markdown"] for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if "text/markdown" in o.get("data", {}))


def report_without_torch(out: Path, unloaded: tuple[str, ...] = ("torch",)) -> str:
    """`train-anywhere report OUT` in a fresh process on a folder a real run left: its text,
    after asserting that it exited 0 and never imported torch (issue 52: a workload's module
    imports torch; `report` reads the workload's card instead, lib.workloads.card), nor any
    other module named in `unloaded` (matplotlib: a report with no figure to draw)."""
    import json
    import subprocess
    import sys

    code = ("import contextlib, io, json, sys\nfrom lib.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as text:\n"
            f"    rc = main(['report', {str(out)!r}])\n"
            "print(json.dumps({'rc': rc, 'text': text.getvalue(),\n"
            f"                  'loaded': sorted(set(sys.modules) & {set(unloaded)!r})}}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout.splitlines()[-1])
    assert said["rc"] == 0 and said["loaded"] == [], (said, proc.stderr)
    return said["text"]
