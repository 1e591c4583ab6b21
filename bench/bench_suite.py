"""The project's own tooling: rendering every notebook, `--check`, and (optionally) executing
every rendered notebook in smoke mode through papermill, the way the notebook tests do.

Run: ``python -m bench.bench_suite [--notebooks]``.

Rendering runs on a copy of the sources in a temporary folder (so the repository is never
rewritten while others edit it), each as a fresh `python build_notebooks.py` process: the
time a user waits, interpreter and imports included. Notebook execution takes minutes, so it
is behind ``--notebooks``; the TPU notebook runs on the CPU fallback here (the XLA lane of
`make test` runs it on torch_xla).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT, markdown_table, median, run_python

COPIED = ("build_notebooks.py", "pyproject.toml", "images.toml", "README.md", "notebooks_src",
          "notebooks", "lib")


def workspace(dest: Path) -> Path:
    """A copy of what `build_notebooks.py` reads and writes, under `dest`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def time_render(repeats: int = 3, python: str = sys.executable) -> dict:
    """Median seconds of `build_notebooks.py` and of `--check` right after it (which passes)."""
    render, check, rendered = [], [], 0
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        ws = workspace(Path(tmp))
        for _ in range(repeats):
            for args, times in (([], render), (["--check"], check)):
                out = run_python([str(ws / "build_notebooks.py"), *args], python)
                if out["returncode"] != 0:
                    detail = (out["stderr"] or out["stdout"]).strip().splitlines()[-1:]
                    raise RuntimeError(f"build_notebooks.py {' '.join(args)} failed: {detail}")
                times.append(out["seconds"])
        rendered = len(list((ws / "notebooks").glob("*/*.ipynb")))
    return {"notebooks": rendered, "repeats": repeats,
            "rows": [{"task": f"render all {rendered} notebooks", "seconds": median(render),
                      "runs": render},
                     {"task": "build_notebooks.py --check", "seconds": median(check),
                      "runs": check}]}


def notebooks() -> list[tuple[str, str]]:
    """(platform, workload) of every rendered notebook."""
    return sorted((p.parent.name, p.stem) for p in (ROOT / "notebooks").glob("*/*.ipynb"))


# Run in a fresh process per notebook, so that the peak memory it reports (of the processes
# it waited for: the kernel and whatever the kernel started) is this notebook's alone.
_EXECUTE = """
import json, resource, sys
from pathlib import Path
from tests.notebook_run import execute
platform, workload, out, epochs = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
nb = execute(workload, platform, out, DATA_DIR=str(out / "data"), OUT_DIR=str(out / "run"),
             SMOKE=True, SAMPLE_DATA=True, EPOCHS=epochs)
cells = sum(c.metadata.get("papermill", {}).get("duration") or 0.0 for c in nb.cells)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
print(json.dumps({"cell_seconds": cells, "peak_mb": peak}))
"""

SMOKE_TARGET_S, SMOKE_TARGET_MB = 30.0, 2048.0  # a smoke run: seconds, and a laptop's memory


def time_notebooks(folder: Path | None = None, which: list[tuple[str, str]] | None = None,
                   epochs: int = 2) -> list[dict]:
    """Execute each notebook with SMOKE and SAMPLE_DATA (as the tests do), each in its own
    process: wall seconds (kernel start included), seconds inside cells, the kernel's peak
    resident memory (MB)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-notebooks-") as tmp:
        base = Path(folder or tmp)
        for platform, workload in which or notebooks():
            out = base / f"{platform}-{workload}"
            res = run_python(["-c", _EXECUTE, platform, workload, str(out), str(epochs)])
            row = {"platform": platform, "workload": workload, "seconds": res["seconds"],
                   "cell_seconds": "-", "peak_mb": "-"}
            if res["returncode"] == 0:
                row.update(json.loads(res["stdout"].strip().splitlines()[-1]), status="ok")
                fits = (row["cell_seconds"] <= SMOKE_TARGET_S
                        and row["peak_mb"] <= SMOKE_TARGET_MB)
                row["target"] = "meets" if fits else "misses"
            else:  # a failing notebook is a result here, not a crash
                last = (res["stderr"] or res["stdout"]).strip().splitlines()[-1:]
                row.update(status=f"failed: {last[0][:80] if last else res['returncode']}",
                           target="-")
            rows.append(row)
    return rows


def run(repeats: int = 3, with_notebooks: bool = False, workloads: list[str] | None = None,
        ) -> dict:
    """Render timings; with `with_notebooks`, executions of every notebook (or `workloads`')."""
    res = time_render(repeats)
    every = notebooks()
    which = [(p, w) for p, w in every if not workloads or w in workloads]
    res["executions"] = time_notebooks(which=which) if with_notebooks else None
    res["not_executed"] = sorted({w for _, w in every} - {w for _, w in which})
    return res


def report(res: dict) -> str:
    text = [f"Fresh processes on a copy of the sources; median of {res['repeats']}.", "",
            markdown_table(res["rows"], [("task", "task"), ("seconds", "seconds")])]
    runs = res["executions"]
    if runs is None:
        text += ["", "Notebook execution: not measured in this run (`python -m bench "
                 "--notebooks` executes every notebook in smoke mode; it takes minutes)."]
    else:
        total = sum(r["seconds"] for r in runs)
        skipped = res.get("not_executed") or []
        ran = ", ".join(sorted({r["workload"] for r in runs}))
        scope = f"The {ran} notebooks" if skipped else "Every notebook"
        text += ["", f"{scope} in smoke mode (SMOKE, SAMPLE_DATA, EPOCHS=2) through "
                 f"papermill, one process each: {total:.0f} s in all. Target: at most "
                 f"{SMOKE_TARGET_S:.0f} s inside the notebook's cells and {SMOKE_TARGET_MB:.0f} "
                 "MB peak (the kernel and the processes it starts; wall time adds the kernel's "
                 "start).", "",
                 markdown_table(runs, [("platform", "platform"), ("workload", "workload"),
                                       ("seconds", "wall s"), ("cell_seconds", "cells s"),
                                       ("peak_mb", "peak MB"), ("target", "target"),
                                       ("status", "status")])]
        if skipped:
            text += ["", f"Not executed in this run: the {', '.join(skipped)} notebooks."]
    return "\n".join(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="time rendering, --check and notebook runs")
    parser.add_argument("--notebooks", nargs="*", default=None, metavar="WORKLOAD",
                        help="also execute every notebook (or only these workloads')")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(report(run(args.repeats, args.notebooks is not None, args.notebooks)))


if __name__ == "__main__":
    main()
