"""The `slurm` backend: the cells as one Slurm job array, through submitit.

`submitit.AutoExecutor(...).map_array(CellTask(), cell_dirs)`: each array task runs
`lib.cli.sweep.cell.execute_cell` on a node (the repository and its .venv on a shared file system,
as usual on a cluster). Re-submitting the same sweep skips the finished cells, since only
unfinished ones are given to the array. `--cluster local` runs the very same array with
submitit's local executor.

Time limits and preemption: submitit's own checkpoint-and-requeue. The array is submitted
with `--signal=USR2@S` (S seconds before `--time`); submitit's job wrapper catches USR2,
calls `CellTask.checkpoint` (a cell needs no state of its own: its notebook resumes from
the newest checkpoint in its OUT_DIR, RESUME="auto"), runs `scontrol requeue` on the task
and exits; Slurm starts the task again and the notebook continues from that checkpoint.
A requeue at the time limit counts against `--max-requeues` (submitit's
`slurm_max_num_timeout`); one by preemption does not (submitit tells them apart by the
time the task has run). Each requeue is written to the cell's `requeues.jsonl`, and the
sweep's line for the cell says how many there were. What is lost at each requeue is the
work since the cell's last checkpoint: set `-p CHECKPOINT_MINUTES` well below `--time`.

Quiet: a cluster without accounting (AccountingStorageType=accounting_storage/none, no
slurmdbd, so `sacct` fails) is followed with `squeue` instead, said once in one line; the
`submitit` logger is kept to errors in this process (its job logs keep everything).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lib.cli.params import UsageError
from lib.cli.sweep.cell import execute_cell


class CellTask:
    """One cell, callable by submitit and checkpointable (a `submitit.helpers.Checkpointable`
    in all but the base class, which would need submitit imported at module import)."""

    def __init__(self, submitted: float | None = None) -> None:
        self.requeued = False
        self.submitted = time.time() if submitted is None else submitted

    def __call__(self, cell_dir: str) -> dict:
        # Requeued without our signal handler (the scheduler's own requeue, as with
        # PreemptMode=REQUEUE): Slurm counts the restarts; the cell's log says so too.
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        since = getattr(self, "submitted", 0.0)  # a task pickled before this attribute
        for _ in range(restarts - requeues(cell_dir, since=since)):
            _note(cell_dir, "requeued by the scheduler")
        self.stopping = False
        self._watch_sigterm()
        try:
            return execute_cell(cell_dir)
        except Exception:
            # The notebook's kernel died of the signal that stops this task too (USR2 before
            # our requeue exited us; SIGTERM from a requeue, preemption or scancel): the task
            # is being ended, not failing, so no error is left for the sweep to read; Slurm's
            # SIGKILL (KillWait later) ends this process first.
            if self.requeued or self.stopping:
                time.sleep(300)
            raise

    def _watch_sigterm(self) -> None:
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            self.stopping = True
            if callable(previous):
                previous(signum, frame)  # submitit's: it logs and carries on

        with contextlib.suppress(ValueError):  # not the main thread: nothing to watch
            signal.signal(signal.SIGTERM, on_term)

    def checkpoint(self, cell_dir: str):
        """Called by submitit on USR2 (time limit near, or preemption): the same cell again."""
        from submitit.helpers import DelayedSubmission

        self.requeued = True
        _note(cell_dir, "signalled (time limit or preemption)")
        return DelayedSubmission(CellTask(getattr(self, "submitted", 0.0)), cell_dir)


def _note(cell_dir, why: str) -> None:
    with open(Path(cell_dir) / "requeues.jsonl", "a") as f:
        f.write(json.dumps({"at": time.time(), "why": why}) + "\n")


def requeues(cell_dir: Path, since: float = 0.0) -> int:
    """How often the cell was requeued (since the submission at `since`)."""
    path = Path(cell_dir) / "requeues.jsonl"
    if not path.exists():
        return 0
    return sum(json.loads(line)["at"] >= since for line in path.read_text().splitlines())


def _slurm(*cmd: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def check_partition(name: str) -> None:
    """A partition `sinfo` does not list is one line naming those it does."""
    proc = _slurm("sinfo", "-h", "-o", "%R")
    if proc is None or proc.returncode != 0:
        return  # no sinfo here: sbatch will say
    known = list(dict.fromkeys(proc.stdout.split()))
    if known and name not in known:
        raise UsageError(f"--partition {name} is not a partition of this cluster; sinfo lists "
                         f"{', '.join(known)}: pass one of them.")


def accounting_off() -> bool:
    proc = _slurm("scontrol", "show", "config")
    return bool(proc and proc.returncode == 0 and "accounting_storage/none" in proc.stdout)


def _squeue_watcher():
    """submitit's SlurmInfoWatcher asking `squeue` where it would ask `sacct`."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueWatcher(SlurmInfoWatcher):
        def _make_command(self):
            command = super()._make_command()  # sacct ... -j ID -j ID
            if command is None:
                return None
            ids = [command[i + 1] for i, arg in enumerate(command) if arg == "-j"]
            return ["squeue", "-h", "-r", "--states=all", "-o", "%i|%T|%N", "-j", ",".join(ids)]

        def read_info(self, string):
            text = string.decode() if isinstance(string, bytes) else string
            return super().read_info("JobID|State|NodeList\n" + text)

    return SqueueWatcher(delay_s=30)


def signal_delay(minutes: int | None) -> int:
    """Seconds before --time that USR2 is asked for: submitit's 90, or 10 under 10 minutes.
    slurmctld looks at time limits every 30 s (PERIODIC_TIMEOUT) and sends the signal at the
    last look before `end - delay`, so up to 30 s earlier than asked (sbatch(1) --signal:
    "may be sent up to 60 seconds earlier"), and always at an earlier look than the one that
    kills the job. Measured here with --time 1: USR2@30 came 14-17 s after the start (too
    early for a cell to get anywhere), USR2@10 at 34-48 s."""
    return 90 if minutes is None or minutes >= 10 else 10


def executor(args, out: Path):
    try:
        import submitit
    except ImportError:
        raise UsageError("the slurm backend needs submitit: pip install 'train-anywhere[sweep]' "
                         "(or pip install submitit).") from None
    logging.getLogger("submitit").setLevel(logging.ERROR)
    try:
        ex = submitit.AutoExecutor(folder=out / "slurm" / "%j", cluster=args.cluster,
                                   slurm_max_num_timeout=max(0, args.max_requeues))
    except RuntimeError as exc:  # 'Could not detect "srun"': not a Slurm machine
        raise UsageError(f"submitit cannot reach Slurm here ({exc}); run the sweep on a Slurm "
                         "login node, or try it on this machine with --cluster local.") from None
    params = {"name": f"ta-{Path(out).name}"[:40], "slurm_array_parallelism": max(1, args.jobs)}
    if args.time is not None:
        params["timeout_min"] = int(args.time)
    if args.cluster == "slurm":
        params["slurm_signal_delay_s"] = signal_delay(args.time)
        if args.gpus:  # --gres=gpu:N: every Slurm takes it (--gpus-per-node needs cons_tres)
            params["slurm_gres"] = f"gpu:{int(args.gpus)}"
        if args.partition:
            check_partition(args.partition)
            params["slurm_partition"] = args.partition
    elif args.gpus:
        params["gpus_per_node"] = int(args.gpus)
    ex.update_parameters(**params)
    return ex


@contextlib.contextmanager
def _stderr_into(path: Path):
    """Send this process's fd 2 to `path` meanwhile: submitit runs sbatch with our stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _submit(ex, cells: list, out: Path):
    from submitit.core.utils import FailedJobError  # what submitit raises when sbatch fails

    try:
        with _stderr_into(out / "slurm" / "sbatch.err"):  # its errors come back below
            return ex.map_array(CellTask(), [str(c.dir) for c in cells])
    except FileNotFoundError as exc:  # no sbatch here
        raise UsageError(f"cannot submit to Slurm ({exc.filename or exc} not found): run the "
                         "sweep on a Slurm login node, or try it here with --cluster local."
                         ) from None
    except (subprocess.CalledProcessError, FailedJobError) as exc:  # sbatch refused
        out = getattr(exc, "output", None)
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out or exc)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()] or [type(exc).__name__]
        line = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1])
        raise UsageError(f"sbatch refused the array: {line.removeprefix('sbatch: ')}") from None


def _reason(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return next((line.strip() for line in reversed(lines)
                 if "NotebookFailed" in line or "Error" in line),
                lines[-1].strip() if lines else type(exc).__name__)


def run(cells: list, args, out: Path) -> None:
    ex = executor(args, out)
    watcher = None
    if args.cluster == "slurm" and accounting_off():
        from submitit.slurm import slurm as submitit_slurm

        watcher = submitit_slurm.SlurmJob.watcher = _squeue_watcher()
        print("Slurm accounting is off on this cluster (sacct has no jobs): following the "
              "array with squeue", flush=True)
    jobs = _submit(ex, cells, out)
    for cell, job in zip(cells, jobs, strict=True):
        (cell.dir / "slurm.json").write_text(json.dumps({"job_id": job.job_id}))
        if watcher is not None:
            watcher.register_job(job.job_id)
    print(f"submitted array of {len(jobs)} task(s), job {jobs[0].job_id.split('_')[0]}; "
          f"logs in {out / 'slurm'}", flush=True)
    for n, (cell, job) in enumerate(zip(cells, jobs, strict=True), 1):
        try:
            result = job.result()
        except Exception as exc:  # submitit wraps the task's error (FailedJobError, ...)
            reason = _reason(exc)
            if "timed-out too many times" in reason:
                reason = (f"hit --time {args.time} min {requeues(cell.dir)} times "
                          f"(--max-requeues {args.max_requeues}); run the same command to go on "
                          "from its checkpoint, or give it a longer --time")
            if not (cell.dir / "FAILED.json").exists() or "--max-requeues" in reason:
                from lib.cli.sweep.cell import fail

                fail(cell.dir, f"{reason} (job {job.job_id})")
            print(f"[{n}/{len(cells)}] {cell.name}: failed (job {job.job_id})", flush=True)
            continue
        value = result.get("value")
        shown = f"{result['metric']} {value:.4f}" if isinstance(value, float) else "done"
        times = requeues(cell.dir)
        again = f", requeued {times} time{'s' * (times != 1)}" if times else ""
        print(f"[{n}/{len(cells)}] {cell.name}: {shown} (job {job.job_id}{again})",
              file=sys.stdout, flush=True)
