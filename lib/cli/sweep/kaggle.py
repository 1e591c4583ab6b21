"""The `kaggle` backend: each cell pushed as a Kaggle kernel through the `kaggle` client.

Per cell, CELL_DIR/kaggle/ holds what is pushed: the builder's kernel-metadata.json for the
platform (its id made unique per cell) and the platform notebook with the cell's parameters
baked in by papermill (an `injected-parameters` cell, as papermill would run it). Then
`KaggleApi.kernels_push`, `kernels_status` every `--poll` seconds, and `kernels_output`
of `out/` (the cell's OUT_DIR, /kaggle/working/out) into the cell's run folder. At most
`--max-running` kernels run at once (Kaggle's GPU concurrency limit). A pushed cell is
remembered in CELL_DIR/kaggle.json, so re-running the sweep polls it instead of pushing
it again; a failed one is pushed again.

A cell is DONE only when its kernel completed with a run that finished (no STOPPED.json,
which the loop leaves when it stops before the session limit) and a non-empty output. Any
other end pushes it again as the *other* of two kernel slugs (`<slug>`, `<slug>-b`) with
`kernel_sources: [the kernel that just ran]`, so the new version mounts that output under
/kaggle/input and the session carries the run over (`lib.runs.identity.carry_over`): pushing to
the same slug would replace the version whose output held the partial run, and whether a
kernel may list itself as its own source is not documented. `kernel_sources` is sent as the
push's `kernel_data_sources` (kaggle-cli src/kaggle/api/kaggle_api_extended.py:
`kernels_push`; docs/kernels_metadata.md: "the latest output of the source kernel is used").
A cell whose newest checkpoint did not move in two attempts in a row is not pushed again and
is reported. `kernels output` pages through all files from kaggle 2.2.2 on (kaggle-cli
#1046; earlier clients fetched the first page only), so older clients are refused.

The client reads credentials as `kaggle` itself does (KAGGLE_API_TOKEN, ~/.kaggle/...,
KAGGLE_USERNAME + KAGGLE_KEY). KAGGLE_API_ENVIRONMENT selects kagglesdk's endpoint (TEST:
http://localhost:7777, which the tests serve with a stand-in); kaggle 2.2's KaggleApi
passes only its own --local/--staging flags to kagglesdk, so `_Api` hands it that choice.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

from lib.base import atomic
from lib.cli.execute import NOTEBOOKS
from lib.cli.kaggle_api import KaggleFailed, check_client_version, client  # noqa: F401
from lib.cli.params import UsageError
from lib.cli.sweep.cell import add_session_limit, fail, finish, keep_output, progress_of

REMOTE_WORK = "/kaggle/working"
REMOTE_OUT = f"{REMOTE_WORK}/out"  # the cell's OUT_DIR on Kaggle; gathered as out/...
MAX_SLUG = 50  # Kaggle's longest kernel title / slug
FINAL_FAILED = ("ERROR", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED")
STALLED_ATTEMPTS = 2  # attempts in a row without progress before a cell is given up
STOPPED = "STOPPED.json"  # left by lib.training.loop.fit when it stops before the session limit


def slug_for(base: str, cell: str) -> str:
    """A kernel slug for one cell: lower-case, dashes, at most 50 characters, unique."""
    import hashlib

    slug = re.sub(r"[^a-z0-9]+", "-", f"{base}-{cell}".lower()).strip("-")
    if len(slug) > MAX_SLUG:
        digest = hashlib.sha1(slug.encode()).hexdigest()[:8]
        slug = f"{slug[:MAX_SLUG - 9].rstrip('-')}-{digest}"
    return slug


# A pinned image in a push (kernel-metadata.json `docker_image`, or the notebook's
# metadata.kaggle.dockerImageVersionId) makes Kaggle run a TpuV5E8 request on the CPU image,
# silently (kaggle-cli#1197): a push never carries one; the service picks the current image.
PINNED_IMAGE_KEYS = ("docker_image",)


def unpinned(meta: dict, nb) -> list[str]:
    """Drop every pinned image from a push's metadata and notebook; what was dropped."""
    dropped = [k for k in PINNED_IMAGE_KEYS if meta.pop(k, None) is not None]
    kaggle = nb.metadata.get("kaggle", {})
    if kaggle.pop("dockerImageVersionId", None) is not None:
        dropped.append("metadata.kaggle.dockerImageVersionId")
    return dropped


def prepare(cell, owner: str | None, attempt: int = 1, source: str | None = None,
            minutes: int | None = None) -> tuple[Path, str]:
    """CELL_DIR/kaggle/: kernel-metadata.json and the parameterised notebook; (folder, ref).

    Attempts alternate between two slugs; `source` (the kernel that ran before) is attached
    as a kernel source. `minutes` (--time) becomes the session limit the notebook stops
    itself before (TA_SESSION_HOURS, set in a cell after the parameters)."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    spec = cell.spec()
    workload, platform = spec["workload"], spec["platform"]
    meta_path = NOTEBOOKS / platform / "kernels" / workload / "kernel-metadata.json"
    if not meta_path.exists():
        raise UsageError(f"platform {platform} is not a Kaggle platform (no "
                         f"{meta_path.relative_to(NOTEBOOKS.parent)}); use --platform "
                         "kaggle_p100, kaggle_t4x2 or kaggle_tpu.")
    meta = json.loads(meta_path.read_text())
    meta_owner, base = meta["id"].split("/", 1)
    slug = slug_for(base, spec["name"] + ("" if attempt % 2 else " b"))
    meta.update(id=f"{owner or meta_owner}/{slug}", title=slug, code_file="notebook.ipynb",
                kernel_sources=[source] if source else [])
    folder = cell.dir / "kaggle"
    folder.mkdir(parents=True, exist_ok=True)
    nb = load_notebook_node(str(NOTEBOOKS / platform / f"{workload}.ipynb"))  # as papermill
    params = {**spec["params"], "OUT_DIR": REMOTE_OUT}
    nb = parameterize_notebook(nb, params, kernel_name="python3", language="python")
    add_session_limit(nb, minutes)
    if dropped := unpinned(meta, nb):
        print(f"kaggle: {spec['name']}: pushed without the pinned image ({', '.join(dropped)}): "
              "a pinned image runs a TPU request on the CPU image")
    nbformat.write(nb, folder / "notebook.ipynb")
    atomic.write_text(folder / "kernel-metadata.json", json.dumps(meta, indent=2))
    return folder, meta["id"]


def _quota(cells: list, todo: list, args) -> None:
    """Say (one line) when the grid's estimated GPU hours exceed the weekly quota left."""
    per_cell = args.hours_per_cell
    if per_cell is None:
        took = [json.loads((c.dir / "DONE.json").read_text()) for c in cells if c.done]
        took = [(d["finished_at"] - d["started_at"]) / 3600 for d in took if "started_at" in d]
        per_cell = statistics.median(took) if took else None
    if per_cell is None:
        return
    need = per_cell * len(todo)
    if need > args.quota_hours:
        print(f"warning: {len(todo)} cells x {per_cell:.2f} GPU h = {need:.1f} h exceed the "
              f"{args.quota_hours:g} h of weekly Kaggle GPU quota left (--quota-hours); the "
              "cells past it fail when the quota runs out: run the same command after the "
              "weekly reset to finish them.", file=sys.stderr, flush=True)


def _download(api, cell, ref: str) -> Path:
    """The kernel's latest output under out/ into CELL_DIR/remote (the client pages)."""
    remote = cell.dir / "remote"
    shutil.rmtree(remote, ignore_errors=True)
    with contextlib.redirect_stdout(io.StringIO()):
        api.kernels_output(ref, str(remote), file_pattern=r"^out/", force=True, quiet=True)
    return remote / "out"


def _keep(cell, got: Path) -> Path:
    """What the kernel produced, into the cell's run folder (or the shared OUT)."""
    target = cell.dir.parent.parent if cell.spec().get("shared_out") else cell.dir / "run"
    return keep_output(got, target, STOPPED)


def judge(status: str, got: Path, failure: str, state: dict) -> tuple[str, str, dict]:
    """After a kernel ended: ("done" | "retry" | "give up", why, the state for the next push)."""
    files = [p for p in got.rglob("*") if p.is_file()] if got.is_dir() else []
    stopped = any(p.name == STOPPED for p in files)
    if status == "COMPLETE" and files and not stopped:
        return "done", "", state
    if stopped:
        why = "stopped itself before the session limit"
    elif status == "COMPLETE":
        why = "completed with nothing under out/"
    else:
        why = f"ended {status}" + (f": {failure}" if failure else "")
    progress = progress_of(got)
    moved = bool(progress) and progress != state.get("progress")
    stalled = 0 if moved else state.get("stalled", 0) + 1
    nxt = {"attempt": state.get("attempt", 1) + 1, "source": state["ref"], "stalled": stalled,
           "progress": progress or state.get("progress", [])}
    if stalled >= STALLED_ATTEMPTS:
        return "give up", (f"{why}; no progress in {stalled} attempts in a row, so it is not "
                           "pushed again"), nxt
    return "retry", why, nxt


def run(cells: list, args, out: Path) -> None:
    from lib.cli.sweep import BackendError

    _quota(cells, cells, args)
    api = client()
    owner = api.config_values.get(api.CONFIG_NAME_USER)
    queue, running = [], {}
    for cell in cells:
        pushed = cell.dir / "kaggle.json"
        if pushed.exists() and not (cell.dir / "FAILED.json").exists():
            running[cell.name] = (cell, json.loads(pushed.read_text()))  # poll, don't re-push
        else:
            queue.append((cell, {}))
    total, n = len(cells), 0
    try:
        while queue or running:
            while queue and len(running) < max(1, args.max_running):
                cell, before = queue.pop(0)
                attempt = before.get("attempt", 1)
                folder, ref = prepare(cell, owner, attempt, before.get("source"), args.time)
                with contextlib.redirect_stdout(io.StringIO()):
                    resp = api.kernels_push(str(folder), timeout=(str(args.time * 60)
                                                                 if args.time else None))
                if getattr(resp, "error", None):
                    fail(cell.dir, f"Kaggle refused the push of {ref}: {resp.error}")
                    n += 1
                    print(f"[{n}/{total}] {cell.name}: push refused: {resp.error}", flush=True)
                    continue
                state = dict(before, ref=ref, version=getattr(resp, "version_number", None),
                             url=getattr(resp, "url", ""), pushed_at=time.time(),
                             attempt=attempt)
                state.setdefault("first_pushed_at", state["pushed_at"])
                (cell.dir / "FAILED.json").unlink(missing_ok=True)
                atomic.write_text(cell.dir / "kaggle.json", json.dumps(state, indent=1))
                running[cell.name] = (cell, state)
                source = f", continuing {before['source']}" if before.get("source") else ""
                print(f"pushed {cell.name} as kernel {ref} (version {state['version']}"
                      f"{source})", flush=True)
            for name, (cell, state) in list(running.items()):
                resp = api.kernels_status(state["ref"])
                status = getattr(resp.status, "name", str(resp.status))
                if status != "COMPLETE" and status not in FINAL_FAILED:
                    continue
                del running[name]
                got = _download(api, cell, state["ref"])
                target = _keep(cell, got)
                lines = (getattr(resp, "failure_message", "") or "").strip().splitlines()
                verdict, why, nxt = judge(status, got, lines[-1] if lines else "", state)
                if verdict == "done":
                    result = finish(cell.dir, target, state.get("first_pushed_at",
                                                                state["pushed_at"]))
                    n += 1
                    value = result.get("value")
                    shown = (f"{result['metric']} {value:.4f}" if isinstance(value, float)
                             else "done")
                    print(f"[{n}/{total}] {cell.name}: {shown} (kernel {state['ref']})",
                          flush=True)
                elif verdict == "retry":
                    print(f"{cell.name}: kernel {state['ref']} {why}; pushing it again with "
                          "that output attached", flush=True)
                    queue.append((cell, dict(nxt, first_pushed_at=state.get(
                        "first_pushed_at", state["pushed_at"]))))
                else:
                    fail(cell.dir, f"kernel {state['ref']} {why}")
                    n += 1
                    print(f"[{n}/{total}] {cell.name}: {why} (kernel {state['ref']})",
                          flush=True)
            if running:
                time.sleep(args.poll)
    except (OSError, ValueError) as exc:  # requests' errors are OSErrors; the client's ValueError
        detail = str(exc).strip().splitlines()
        raise BackendError(f"Kaggle: {detail[-1] if detail else type(exc).__name__}; the "
                           f"grid's state is kept in {out}: run the same command again to "
                           "resume.") from None
