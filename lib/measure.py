"""The measurement behind `train-anywhere measure` (lib/cli/measure.py says what it times), in
a process of its own: the command line never loads the session, the loop or the device
modules (tests/test_import_graph.py), so it starts this module as `run` starts a notebook's
kernel, and reads the row it records.

    python -m lib.measure WORKLOAD STEPS WARMUP OUT '{"SAMPLE_DATA": true}'
"""

from __future__ import annotations

import importlib
import itertools
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from lib import session
from lib.base.errors import UserError
from lib.cli.params import UsageError, resolve_params
from lib.runs import identity
from lib.runtime import compile, environment
from lib.training.backend import Backend
from lib.workloads import get


def measure(workload: str, overrides: dict, steps: int, warmup: int, out: Path) -> dict:
    """Measure (lib/cli/measure.py's doc) with `overrides` checked there; the row written."""
    asked = overrides.get("COMPILE")
    overrides.update(EPOCHS=1, OUT_DIR=str(out), COMPILE=False if asked is None else asked)
    _, cfg = resolve_params(workload, overrides.pop("PLATFORM", "local"), overrides)
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
    return compile.decide("auto", s.cfg, s.choice, False, s.cfg.varying_shapes())[0]


def _time_steps(s, loader, task, steps: int, warmup: int) -> dict:
    """Samples per second of `steps` training steps after `warmup` untimed ones."""
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


def main(argv: list[str] | None = None) -> int:
    workload, steps, warmup, out, overrides = (argv or sys.argv[1:])[:5]
    try:
        measure(workload, json.loads(overrides), int(steps), int(warmup), Path(out))
    except (UsageError, UserError) as exc:  # a user's mistake: one line, as the command's
        print(f"train-anywhere measure: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
