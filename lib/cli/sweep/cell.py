"""Run one grid cell where this process is: `python -m lib.cli.sweep.cell CELL_DIR`.

Reads CELL_DIR/cell.json, runs its notebook through papermill into CELL_DIR/notebook.ipynb
and leaves DONE.json (with the headline metric) or FAILED.json (with the error's one line).
The local and slurm backends call this; the kaggle and colab stand-ins run the pushed
notebook the same way.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from lib import workloads as contract
from lib.base import atomic
from lib.cli.execute import NotebookFailed, execute, headline
from lib.cli.params import ROOT

CELL, DONE, FAILED = "cell.json", "DONE.json", "FAILED.json"


def finish(cell_dir: Path, out_dir: Path, started: float) -> dict:
    """Write DONE.json for a cell whose outputs are in `out_dir`.

    When cells share OUT_DIR (a GRID workload) the cell's run is the one whose
    metrics.jsonl changed since the cell started.
    """
    spec = json.loads((cell_dir / CELL).read_text())
    metric, runs = headline(out_dir, contract.get(spec["workload"]).headline)
    if spec.get("shared_out"):
        fresh = [(label, last) for label, last in runs
                 if (Path(out_dir) / label / "metrics.jsonl").stat().st_mtime >= started - 1]
        runs = fresh or runs
    value = next((last.get(metric) for _, last in runs if metric in last), None)
    result = {"name": spec["name"], "values": spec["values"], "metric": metric, "value": value,
              "runs": [label for label, _ in runs] if spec.get("shared_out") else ["run"],
              "started_at": started, "finished_at": time.time()}
    (cell_dir / FAILED).unlink(missing_ok=True)
    atomic.write_text(cell_dir / DONE, json.dumps(result, indent=1))
    return result


def add_session_limit(nb, minutes: int | None) -> None:
    """A remote cell's time limit (--time) as the session limit its notebook stops itself
    before: a cell after the injected parameters sets TA_SESSION_HOURS (lib.runtime.platforms)."""
    import nbformat

    if not minutes:
        return
    at = next(i for i, c in enumerate(nb.cells)
              if "injected-parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
        f'import os\nos.environ["TA_SESSION_HOURS"] = "{minutes / 60!r}"  # --time',
        metadata={"tags": ["session-limit"]}))


def progress_of(out_dir: Path) -> list[str]:
    """What a cell's output has trained: each run folder's newest checkpoint."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    newest = {}
    for ckpt in sorted(out_dir.rglob("ckpt-*.pt")):
        newest[str(ckpt.parent.relative_to(out_dir))] = ckpt.name
    return sorted(f"{k}/{v}" for k, v in newest.items())


def keep_output(got: Path, target: Path, stopped: str = "STOPPED.json") -> Path:
    """Copy a remote cell's output into its local run folder; a STOPPED marker of an earlier
    attempt, whose run has since resumed, is removed."""
    if Path(got).is_dir():
        shutil.copytree(got, target, dirs_exist_ok=True, copy_function=shutil.copy)
        for marker in Path(target).rglob(stopped):
            if not (Path(got) / marker.relative_to(target)).exists():
                marker.unlink()
    return target


def fail(cell_dir: Path, error: str) -> None:
    atomic.write_text(Path(cell_dir) / FAILED, json.dumps({"error": error}, indent=1))


def execute_cell(cell_dir: str | Path) -> dict:
    """Run the cell here; its DONE.json content, or NotebookFailed (FAILED.json written)."""
    cell_dir = Path(cell_dir)
    spec = json.loads((cell_dir / CELL).read_text())
    if (cell_dir / DONE).exists():
        return json.loads((cell_dir / DONE).read_text())
    notebook = ROOT / "notebooks" / spec["platform"] / f"{spec['workload']}.ipynb"
    started = time.time()
    try:
        execute(notebook, cell_dir / "notebook.ipynb", spec["params"])
    except NotebookFailed as exc:
        fail(cell_dir, str(exc))
        raise
    return finish(cell_dir, Path(spec["params"]["OUT_DIR"]), started)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m lib.cli.sweep.cell CELL_DIR", file=sys.stderr)
        return 2
    try:
        result = execute_cell(argv[0])
    except NotebookFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
