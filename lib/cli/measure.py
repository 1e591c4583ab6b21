"""`train-anywhere measure WORKLOAD`: the real model's speed on this machine, in minutes, where
`train-anywhere plan` finds it.

    train-anywhere measure mamba_spike -p SAMPLE_DATA True     # the sample: no download
    train-anywhere measure fashion_mnist --steps 20            # the data in DATA_DIR

A few training steps of the real model (SMOKE refused: it trains another, smaller one) at the
real batch (the platform's default, or BATCH_SIZE), on the data you have: the dataset in
DATA_DIR, or the offline sample (SAMPLE_DATA True, the same model and input size). Eager
unless -p COMPILE says otherwise: a compile can take longer than the measurement (Mamba-Spike
at T = 300 on a CPU: 39 min, BENCHMARKS.md), so the output says when COMPILE "auto" would
compile here (the run's steps then faster than measured). The first `--warmup` steps (the
compile, where it compiles, the allocator, cuDNN's autotuning) are run and left out; the
next `--steps` are timed, each to its loss on the host, so the device's queue is drained. The
test pass and the data's loading are not timed (a few percent of an epoch, BENCHMARKS.md).
The measurement is one row of sessions.jsonl in `--out` (default runs/speed-local, which
`plan` reads by default), beside config.json, as any session records itself: the device
(accelerator, count, precision) and what it timed (`timed`), plus `measured_steps`,
`warmup_steps` and `epochs_trained` 0 (it trained no epoch). Seconds per epoch there are this
data's epoch (its batches x the batch) at the speed measured; `plan` scales samples per second
to the full dataset's epoch (lib/cli/plan/speeds.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lib.cli.params import UsageError, collect_overrides, resolve_params
from lib.runs.identity import timed_sessions

DEFAULT_OUT = "runs/speed-local"


class Unmeasured(Exception):
    """The measuring process ended without a row; it said why, in its own line."""

    def __init__(self, returncode: int):
        super().__init__(returncode)
        self.returncode = returncode


def measure(workload: str, pairs, steps: int, warmup: int, out: Path) -> dict:
    """Check the request here (one line for a mistake), measure in a process of its own
    (lib/measure.py), and return the row it recorded, with its folder."""
    overrides = collect_overrides(pairs)
    if overrides.get("SMOKE"):
        raise UsageError("measure times the real model: SMOKE trains a smaller one, whose speed "
                         "plans nothing; leave -p SMOKE out (-p SAMPLE_DATA True for the "
                         "offline sample).")
    if steps < 1 or warmup < 0:
        raise UsageError(f"--steps {steps} --warmup {warmup}: expected --steps 1 or more and "
                         "--warmup 0 or more, e.g. --steps 5 --warmup 2.")
    resolve_params(workload, overrides.get("PLATFORM", "local"), dict(overrides))  # names, types
    before = {folder: len(rows) for folder, rows in timed_sessions(out)}
    sys.stdout.flush()
    done = subprocess.run([sys.executable, "-m", "lib.measure", workload, str(steps),
                           str(warmup), str(out), json.dumps(overrides)])
    # the row is in `out`, or in a grid's first run's folder under it
    grown = [(folder, rows) for folder, rows in timed_sessions(out)
             if len(rows) > before.get(folder, 0)]
    if done.returncode or not grown:
        raise Unmeasured(done.returncode or 1)
    folder, rows = grown[0]
    return dict(rows[-1], folder=folder)


def cmd_measure(args) -> int:
    out = Path(args.out).expanduser().resolve()
    try:
        row = measure(args.workload, args.param, args.steps, args.warmup, out)
    except Unmeasured as failed:
        return failed.returncode
    what = "the sample" if row["timed"]["sample_data"] else "the data in DATA_DIR"
    compiled = ("compiled; the compile was in the warm-up, left out" if row["compiled"] else
                "eager; COMPILE \"auto\" compiles here, so a run's steps are faster: -p COMPILE "
                "auto times them, the compile in the warm-up, left out" if row["compile_auto"]
                else "eager, as a run here trains")
    print(f"measured {args.workload} on {row['accelerator']} ({row['device']}, "
          f"{row['precision']}, batch {row['global_batch']}): {row['samples_per_s']:.2f} "
          f"samples/s over {row['measured_steps']} steps after {row['warmup_steps']} warm-up "
          f"steps ({compiled}), on {what}: {row['seconds_per_epoch']:.1f} s for its epoch of "
          f"{row['epoch_samples']} samples")
    print(f"recorded in {row['folder'] / 'sessions.jsonl'}; `train-anywhere plan "
          f"{args.workload}` reads it from runs/ (or --measured {out.parent})")
    return 0


def add_measure_parser(sub, param_help: str) -> None:
    p = sub.add_parser(
        "measure", help="time a few real-size training steps here, for `plan`",
        description="Time a few training steps of the real model at the real batch on this "
                    "machine (after warm-up steps, the compile among them), on the data in "
                    "DATA_DIR or the sample, and record the speed where `train-anywhere plan` "
                    "reads it.")
    p.add_argument("workload", metavar="WORKLOAD")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help=param_help)
    p.add_argument("--steps", type=int, default=5, help="steps timed (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="steps run first, untimed (default 2)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"where the measurement is recorded (default {DEFAULT_OUT})")
    p.set_defaults(fn=cmd_measure)
