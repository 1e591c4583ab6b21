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

import itertools
import time
from datetime import UTC, datetime
from pathlib import Path

from lib.cli.params import UsageError, collect_overrides, resolve_params

DEFAULT_OUT = "runs/speed-local"


def measure(workload: str, pairs, steps: int, warmup: int, out: Path) -> dict:
    """Measure (module doc); the row written."""
    overrides = collect_overrides(pairs)
    if overrides.get("SMOKE"):
        raise UsageError("measure times the real model: SMOKE trains a smaller one, whose speed "
                         "plans nothing; leave -p SMOKE out (-p SAMPLE_DATA True for the "
                         "offline sample).")
    if steps < 1 or warmup < 0:
        raise UsageError(f"--steps {steps} --warmup {warmup}: expected --steps 1 or more and "
                         "--warmup 0 or more, e.g. --steps 5 --warmup 2.")
    asked = overrides.get("COMPILE")
    overrides.update(EPOCHS=1, OUT_DIR=str(out), COMPILE=False if asked is None else asked)
    _, cfg = resolve_params(workload, overrides.pop("PLATFORM", "local"), overrides)
    import importlib

    from lib import session
    from lib.runs import identity
    from lib.runtime import environment
    from lib.workloads import get

    module = importlib.import_module(f"lib.workloads.{workload}")
    if cfg.GRID:  # a grid's first run, in its own folder, as the grid would train it
        if not (hasattr(module, "plan") and hasattr(module, "cell_session")):
            raise UsageError(f"{workload} trains a grid of runs and names none to measure; "
                             "measure it with train-anywhere run and one epoch.")
        grid = session.start(cfg, runtime="local")
        s = module.cell_session(grid, module.plan(cfg)[0])
    else:
        s = session.start(cfg, runtime="local", grid=False)
    timings: dict = {}

    def timed_fit(loaders, task, model_config):
        timings.update(_time_steps(s, loaders[0], task, steps, warmup), model=model_config,
                       auto=compile_auto(s))
        return []

    s.fit = timed_fit  # the workload builds its model, data and loaders as it trains
    started = datetime.now(UTC)
    get(workload).train(s)
    row = dict(s.resolved(), platform=cfg.platform, epochs=0, from_epoch=1,
               timed=s.timed(timings["model"]), **environment.facts(s.choice.type),
               started_at=started.isoformat(timespec="seconds"),
               ended_at=datetime.now(UTC).isoformat(timespec="seconds"), epochs_trained=0,
               measured_steps=steps, warmup_steps=warmup, compiled=timings["compiled"],
               compile_auto=timings["auto"],
               samples_per_s=round(timings["samples_per_s"], 3),
               seconds_per_epoch=round(timings["epoch_samples"] / timings["samples_per_s"], 3),
               epoch_samples=timings["epoch_samples"])
    identity.append_session(s.out_dir, row)
    return dict(row, folder=s.out_dir)


def compile_auto(s) -> bool:
    """Whether COMPILE "auto" compiles this workload on this device."""
    from lib.runtime import compile

    return compile.decide("auto", s.cfg, s.choice, False, s.cfg.varying_shapes())[0]


def _time_steps(s, loader, task, steps: int, warmup: int) -> dict:
    """Samples per second of `steps` training steps after `warmup` untimed ones."""
    from lib.runtime import compile
    from lib.training.backend import Backend

    on, _ = compile.decide(s.cfg.compile, s.cfg, s.choice, False, s.cfg.varying_shapes())
    compile.apply(task.model, on)
    backend = Backend(s.choice, s.device, s.dist, s.plan)
    backend.prepare(task.model)
    task.model.train()

    def batches():
        for epoch in itertools.count():
            loader.sampler.set_epoch(epoch, 0)
            yield from backend.loader(loader)

    seen, t0 = 0, None
    for i, batch in enumerate(itertools.islice(batches(), warmup + steps)):
        if i == warmup:
            t0 = time.perf_counter()
        loss, n = backend.train_step(task, batch)
        float(loss)  # the step done on the device, not only queued
        seen += n if i >= warmup else 0
    seconds = time.perf_counter() - t0
    return {"samples_per_s": seen / max(seconds, 1e-9), "compiled": on,
            "epoch_samples": len(loader) * s.batch_size * s.devices}


def cmd_measure(args) -> int:
    out = Path(args.out).expanduser().resolve()
    row = measure(args.workload, args.param, args.steps, args.warmup, out)
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
