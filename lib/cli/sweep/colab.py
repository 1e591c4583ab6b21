"""The `colab` backend: each cell on a fresh Colab VM through Google's `google-colab-cli`.

Per cell (at most `--jobs` at once):

    colab new -s SESSION --gpu T4|L4|A100
    colab upload -s SESSION CELL_DIR/colab/out.tar.gz /content/out.tar.gz  # a retry only
    colab exec -s SESSION -f CELL_DIR/colab/unpack.py        # a retry: -> /content/out
    colab exec -s SESSION -f CELL_DIR/colab/notebook.ipynb --timeout SECONDS
    colab exec -s SESSION -f CELL_DIR/colab/pack.py          # in a finally: /content/out ->
    colab download -s SESSION /content/out.tar.gz CELL_DIR/colab/out.tar.gz  #  out.tar.gz
    colab stop -s SESSION                                    # always, in a finally

Packing and downloading run whatever the notebook did (failed, timed out, stopped itself
before the session limit, which --time sets: lib.cli.sweep.cell.add_session_limit), so a partial
run comes back. A cell that did not finish runs again on a new VM with that partial run
uploaded first (`colab upload`: google-colab-cli src/colab_cli/commands/files.py), so the
notebook resumes from it; after two attempts in a row without a new checkpoint it is given
up and reported.

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

from lib.cli.execute import NOTEBOOKS
from lib.cli.params import UsageError
from lib.cli.sweep.cell import add_session_limit, fail, finish, keep_output, progress_of

REMOTE_OUT = "/content/out"
ARCHIVE = "/content/out.tar.gz"
PACK = f"""import shutil
shutil.make_archive({ARCHIVE[:-len('.tar.gz')]!r}, "gztar", {REMOTE_OUT!r})
print("packed", {ARCHIVE!r})
"""
UNPACK = f"""import os, shutil
shutil.unpack_archive({ARCHIVE!r}, {REMOTE_OUT!r}, "gztar")
os.remove({ARCHIVE!r})
print("unpacked into", {REMOTE_OUT!r})
"""
STALLED_ATTEMPTS = 2  # attempts in a row without a new checkpoint before a cell is given up
STOPPED = "STOPPED.json"  # left by lib.training.loop.fit when it stops before the session limit


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


def prepare(cell, minutes: int | None = None) -> Path:
    """CELL_DIR/colab/: the parameterised notebook (with --time as its session limit) and the
    packing scripts."""
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
    add_session_limit(nb, minutes)
    # `colab exec` has no browser to answer Drive's authorisation: never wait on a mount.
    nb.cells.insert(1 + next(i for i, c in enumerate(nb.cells)
                             if "injected-parameters" in c.metadata.get("tags", [])),
                    nbformat.v4.new_code_cell('import os\nos.environ["TA_DRIVE"] = "off"',
                                              metadata={"tags": ["no-drive"]}))
    nbformat.write(nb, folder / "notebook.ipynb")
    (folder / "pack.py").write_text(PACK)
    (folder / "unpack.py").write_text(UNPACK)
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


def attempt(exe: str, cell, folder: Path, session: str, args) -> str | None:
    """One VM: upload the partial run (if any), run the notebook, and whatever happened pack
    and download /content/out; the notebook's error as one line, or None."""
    log = cell.dir / "colab.log"
    archive, error = folder / "out.tar.gz", None
    colab(exe, "new", "-s", session, "--gpu", args.gpu, log=log)
    try:
        if archive.exists():
            colab(exe, "upload", "-s", session, str(archive), ARCHIVE, log=log)
            colab(exe, "exec", "-s", session, "-f", str(folder / "unpack.py"), log=log)
        (folder / "notebook_output.ipynb").unlink(missing_ok=True)
        seconds = str(float(args.time * 60 if args.time else 12 * 3600))
        try:
            colab(exe, "exec", "-s", session, "-f", str(folder / "notebook.ipynb"),
                  "--timeout", seconds, log=log)
        except (ColabFailed, subprocess.SubprocessError) as exc:
            error = str(exc)
        error = notebook_error(folder / "notebook_output.ipynb") or error
    finally:
        try:  # the partial run comes back whatever the notebook did
            colab(exe, "exec", "-s", session, "-f", str(folder / "pack.py"), log=log)
            colab(exe, "download", "-s", session, ARCHIVE, str(folder / "out.tar.part"),
                  log=log)
            (folder / "out.tar.part").replace(archive)
        except ColabFailed:
            pass  # nothing under /content/out yet
        finally:
            colab(exe, "stop", "-s", session, log=log)  # the VM is released whatever happened
    return error


def run_one(exe: str, cell, args) -> dict:
    folder = prepare(cell, args.time)
    session = "ta-" + hashlib.sha1(str(cell.dir).encode()).hexdigest()[:8]
    started = time.time()
    (cell.dir / "colab.json").write_text(json.dumps({"session": session, "gpu": args.gpu,
                                                     "started_at": started}))
    spec = cell.spec()
    target = cell.dir.parent.parent if spec.get("shared_out") else cell.dir / "run"
    if not spec.get("shared_out") and progress_of(target):  # a partial run from before
        shutil.make_archive(str(folder / "out"), "gztar", target)
    progress, stalled = progress_of(target), 0
    while True:
        error = attempt(exe, cell, folder, session, args)
        got = folder / "out"
        shutil.rmtree(got, ignore_errors=True)
        if (folder / "out.tar.gz").exists():
            with tarfile.open(folder / "out.tar.gz") as tar:
                tar.extractall(got, filter="data")
            keep_output(got, target, STOPPED)
        if (folder / "notebook_output.ipynb").exists():
            shutil.copy(folder / "notebook_output.ipynb", cell.dir / "notebook.ipynb")
        stopped = got.is_dir() and any(got.rglob(STOPPED))
        if error is None and not stopped:
            if not got.is_dir():
                raise ColabFailed("the notebook ran but nothing came back from /content/out")
            return finish(cell.dir, target, started)
        why = error or "stopped itself before the session limit"
        now = progress_of(got)
        stalled = 0 if now and now != progress else stalled + 1
        progress = now or progress
        if stalled >= STALLED_ATTEMPTS:
            raise ColabFailed(f"{why}; no progress in {stalled} attempts in a row, so it is not "
                              "run again")
        print(f"{cell.name}: {why}; running it again on a new VM with its partial run "
              "uploaded", flush=True)


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
