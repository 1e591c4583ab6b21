"""The `slurm` backend: the cells as one Slurm job array, through submitit.

`submitit.AutoExecutor(...).map_array(run_cell, cell_dirs)`: each array task runs
`lib.sweep.cell.run_cell` on a node (the repository and its .venv on a shared file system,
as usual on a cluster). `--partition`, `--gpus` and `--time` pass through; `--jobs` caps
the tasks running at once (`slurm_array_parallelism`). Re-submitting the same sweep skips
the finished cells, since only unfinished ones are given to the array. `--cluster local`
runs the very same array with submitit's local executor (what the tests do).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lib.cli import UsageError
from lib.sweep.cell import run_cell


def executor(args, out: Path):
    try:
        import submitit
    except ImportError:
        raise UsageError("the slurm backend needs submitit: pip install 'train-anywhere[sweep]' "
                         "(or pip install submitit).") from None
    try:
        ex = submitit.AutoExecutor(folder=out / "slurm" / "%j", cluster=args.cluster)
    except RuntimeError as exc:  # 'Could not detect "srun"': not a Slurm machine
        raise UsageError(f"submitit cannot reach Slurm here ({exc}); run the sweep on a Slurm "
                         "login node, or try it on this machine with --cluster local.") from None
    params = {"name": f"ta-{Path(out).name}"[:40], "slurm_array_parallelism": max(1, args.jobs)}
    if args.time is not None:
        params["timeout_min"] = int(args.time)
    if args.gpus is not None:
        params["gpus_per_node"] = int(args.gpus)
    if args.partition:
        params["slurm_partition"] = args.partition
    ex.update_parameters(**params)
    return ex


def run(cells: list, args, out: Path) -> None:
    ex = executor(args, out)
    try:
        jobs = ex.map_array(run_cell, [str(c.dir) for c in cells])
    except FileNotFoundError as exc:  # no sbatch here
        raise UsageError(f"cannot submit to Slurm ({exc.filename or exc} not found): run the "
                         "sweep on a Slurm login node, or try it here with --cluster local."
                         ) from None
    for cell, job in zip(cells, jobs, strict=True):
        (cell.dir / "slurm.json").write_text(json.dumps({"job_id": job.job_id}))
    print(f"submitted array of {len(jobs)} task(s), job {jobs[0].job_id.split('_')[0]}; "
          f"logs in {out / 'slurm'}", flush=True)
    for n, (cell, job) in enumerate(zip(cells, jobs, strict=True), 1):
        try:
            result = job.result()
        except Exception as exc:  # submitit wraps the task's error (FailedJobError, ...)
            lines = [line for line in str(exc).splitlines() if line.strip()]
            reason = next((line.strip() for line in reversed(lines)
                           if "NotebookFailed" in line or "Error" in line), lines[-1] if lines
                          else type(exc).__name__)
            if not (cell.dir / "FAILED.json").exists():
                from lib.sweep.cell import fail

                fail(cell.dir, f"{reason} (job {job.job_id})")
            print(f"[{n}/{len(cells)}] {cell.name}: failed (job {job.job_id})", flush=True)
            continue
        value = result.get("value")
        shown = f"{result['metric']} {value:.4f}" if isinstance(value, float) else "done"
        print(f"[{n}/{len(cells)}] {cell.name}: {shown} (job {job.job_id})", file=sys.stdout,
              flush=True)
