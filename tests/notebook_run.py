"""Run a rendered notebook headless with papermill, the way CI and users do."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import papermill

ROOT = Path(__file__).resolve().parent.parent
FAKES = Path(__file__).resolve().parent / "fakes"


def execute(workload: str, platform: str, out: Path, env: dict | None = None,
            **parameters) -> nbformat.NotebookNode:
    """Execute notebooks/<platform>/<workload>.ipynb into `out`; return the executed notebook.

    `env` is set for the kernel (papermill's kernel inherits this process's environment).
    """
    notebook = ROOT / "notebooks" / platform / f"{workload}.ipynb"
    out.mkdir(parents=True, exist_ok=True)
    executed = out / f"{platform}-{workload}.ipynb"
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters,
                                   cwd=str(notebook.parent), progress_bar=False,
                                   kernel_name="python3")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nbformat.read(executed, as_version=4)


def stream_text(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook printed."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")
