"""The `colab` backend: each cell on a fresh Colab VM through Google's `google-colab-cli`.

Per cell (at most `--jobs` at once):

    colab new -s SESSION --gpu T4|L4|A100
    colab exec -s SESSION -f CELL_DIR/colab/notebook.ipynb --timeout SECONDS
    colab exec -s SESSION -f CELL_DIR/colab/pack.py          # /content/out -> out.tar.gz
    colab download -s SESSION /content/out.tar.gz CELL_DIR/colab/out.tar.gz
    colab stop -s SESSION                                    # always, in a finally

The notebook is the platform notebook with the cell's parameters baked in by papermill
(OUT_DIR=/content/out). `colab exec` writes the executed copy beside it as
`notebook_output.ipynb`; an error output there fails the cell with the error's one line.
google-colab-cli needs Python >= 3.12, so it lives in its own tool environment
(`uv tool install google-colab-cli`); this backend only needs `colab` on PATH.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from lib.cli import NOTEBOOKS, UsageError
from lib.sweep.cell import fail, finish

REMOTE_OUT = "/content/out"
ARCHIVE = "/content/out.tar.gz"
PACK = f"""import shutil
shutil.make_archive({ARCHIVE[:-len('.tar.gz')]!r}, "gztar", {REMOTE_OUT!r})
print("packed", {ARCHIVE!r})
"""


class ColabFailed(RuntimeError):
    pass


def executable() -> str:
    found = shutil.which("colab")
    if found is None:
        raise UsageError("`colab` (google-colab-cli) is not on PATH; install it in its own "
                         "Python >= 3.12 tool environment: uv tool install google-colab-cli.")
    return found


def colab(exe: str, *args: str, log: Path, timeout: float | None = None) -> str:
    """Run one `colab` command; its output appended to `log`; ColabFailed with its last line."""
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    with open(log, "a") as f:
        f.write(f"$ colab {' '.join(args)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        last = lines[-1].strip() if lines else f"exit {proc.returncode}"
        raise ColabFailed(f"`colab {args[0]}` failed ({last})")
    return proc.stdout


def prepare(cell) -> Path:
    """CELL_DIR/colab/: the parameterised notebook and the packing script."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    spec = cell.spec()
    if not spec["platform"].startswith("colab_"):
        raise UsageError(f"platform {spec['platform']} is not a Colab platform; use --platform "
                         "colab_t4 (or colab_tpu) with --on colab.")
    folder = cell.dir / "colab"
    folder.mkdir(parents=True, exist_ok=True)
    nb = load_notebook_node(str(NOTEBOOKS / spec["platform"] / f"{spec['workload']}.ipynb"))
    nb = parameterize_notebook(nb, {**spec["params"], "OUT_DIR": REMOTE_OUT},
                               kernel_name="python3", language="python")
    nbformat.write(nb, folder / "notebook.ipynb")
    (folder / "pack.py").write_text(PACK)
    for old in ("notebook_output.ipynb", "out.tar.gz"):
        (folder / old).unlink(missing_ok=True)
    return folder


def notebook_error(path: Path) -> str | None:
    """The first error output of an executed notebook, as one line."""
    import nbformat

    if not path.exists():
        return "the executed notebook did not come back"
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            if o.get("output_type") == "error":
                lines = [line for line in str(o.get("evalue", "")).splitlines() if line.strip()]
                return f"{o.get('ename')}: {lines[-1] if lines else ''}".rstrip(": ")
    return None


def run_one(exe: str, cell, args) -> dict:
    folder = prepare(cell)
    log = cell.dir / "colab.log"
    session = "ta-" + hashlib.sha1(str(cell.dir).encode()).hexdigest()[:8]
    started = time.time()
    (cell.dir / "colab.json").write_text(json.dumps({"session": session, "gpu": args.gpu,
                                                     "started_at": started}))
    colab(exe, "new", "-s", session, "--gpu", args.gpu, log=log)
    try:
        seconds = str(float(args.time * 60 if args.time else 12 * 3600))
        try:
            colab(exe, "exec", "-s", session, "-f", str(folder / "notebook.ipynb"),
                  "--timeout", seconds, log=log)
        finally:
            error = notebook_error(folder / "notebook_output.ipynb")
        if error:
            raise ColabFailed(error)
        colab(exe, "exec", "-s", session, "-f", str(folder / "pack.py"), log=log)
        colab(exe, "download", "-s", session, ARCHIVE, str(folder / "out.tar.gz"), log=log)
    finally:
        colab(exe, "stop", "-s", session, log=log)  # the VM is released whatever happened
    shutil.copy(folder / "notebook_output.ipynb", cell.dir / "notebook.ipynb")
    spec = cell.spec()
    target = cell.dir.parent.parent if spec.get("shared_out") else cell.dir / "run"
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "out.tar.gz") as tar:
        tar.extractall(target, filter="data")
    return finish(cell.dir, target, started)


def run(cells: list, args, out: Path) -> None:
    exe = executable()
    total = len(cells)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, exe, c, args): c for c in cells}
        for n, fut in enumerate(as_completed(futures), 1):
            cell = futures[fut]
            try:
                result = fut.result()
            except (ColabFailed, OSError, tarfile.TarError, subprocess.SubprocessError) as exc:
                fail(cell.dir, str(exc))
                print(f"[{n}/{total}] {cell.name}: failed on Colab (log {cell.dir / 'colab.log'})",
                      flush=True)
                continue
            value = result.get("value")
            shown = f"{result['metric']} {value:.4f}" if isinstance(value, float) else "done"
            print(f"[{n}/{total}] {cell.name}: {shown} (Colab {args.gpu})", flush=True)
