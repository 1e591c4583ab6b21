"""Checks shared by the XLA lane's notebook tests (imported only where torch_xla is)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from lib.runs.checkpoints import to_cpu
from lib.runs.records import read_jsonl
from lib.runtime import xla
from tests.notebook_run import XLA_ON_CPU


def compiles_per_epoch(metrics: Path, cpu_device_fallbacks: frozenset = frozenset()) -> list[int]:
    """`xla_compiles` of each epoch record, asserted flat after the first epoch (static
    shapes: the step, the evaluation and the metrics compile once), and no graph compiled
    twice in the first: `xla_repeat_compiles` (graphs compiled by a step or an evaluation
    batch after the session's first of its kind, lib.training.backend) 0 in every epoch; and
    nothing run on the CPU for want of a lowering: `xla_fallback_ops` empty in every record
    (each such op cuts the graph and copies its inputs to the host and back) but for the ops
    named in `cpu_device_fallbacks`, which torch_xla lowers on a TPU and not on its CPU
    device, the lane's stand-in."""
    records = read_jsonl(metrics)
    compiles = [r["xla_compiles"] for r in records]
    assert compiles[0] > 0 and all(c == compiles[0] for c in compiles[1:]), compiles
    repeats = [r["xla_repeat_compiles"] for r in records]
    assert repeats == [0] * len(records), repeats
    fallbacks = [sorted(set(r["xla_fallback_ops"]) - cpu_device_fallbacks) for r in records]
    assert fallbacks == [[]] * len(records), fallbacks
    return compiles


def cpu_and_xla_outputs(build, checkpoint: Path, inputs: torch.Tensor):
    """(output on a plain CPU, output on XLA moved back) of `build(model_config)` with the
    checkpoint's weights, in eval mode."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    outputs = []
    for device in (torch.device("cpu"), xla.device()):
        model = build(state["model_config"])
        model.load_state_dict(state["model"])
        model.eval().to(device)
        with torch.no_grad():
            outputs.append(to_cpu(model(inputs.to(device))))
    return outputs


WATCHDOG = """import faulthandler, sys
faulthandler.dump_traceback_later({seconds}, exit=True)  # a hang prints every thread, exits 1
"""


# Where Python keeps bytecode (the XLA lane's, inside its venv: the Makefile's XLA_PYC): passed
# on, or each child compiles torch's and torch_xla's sources again (11 s of CPU a child).
BYTECODE = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
# XLA's own LLVM optimization, for a child that mostly runs what it compiled: at XLA_ON_CPU's
# level 0 the float64 front-end at T = 50 took 20 s to run and 0.8 s to compile, at the default
# 2.8 s and 3.3 s (the notebooks, whose large graphs mostly compile, take level 0: MSHNet's
# 103 s there, 214 s at the default).
OPTIMIZED = {**XLA_ON_CPU, "XLA_FLAGS": ""}


def run_on_xla(code: str, watchdog_s: int, *, tries: int = 1,
               optimized: bool = False) -> subprocess.CompletedProcess:
    """`code` in a fresh process on torch_xla's CPU client (only XLA_ON_CPU, or OPTIMIZED,
    PATH and where bytecode lives set).

    A process still running after `watchdog_s` prints every thread's Python stack (faulthandler)
    and exits, so a hang fails with where it stood rather than a bare timeout; one still running
    two minutes later is killed. Its output goes to files, not pipes: a DataLoader worker it
    forked, deadlocked at its start (glibc's atexit lock taken while torch_xla's threads ran),
    outlived it and, holding a pipe, kept a CI run waiting 360 s with nothing printed (workers
    on XLA now start from a forkserver: `DeviceChoice.worker_start`). `tries` > 1 is for a
    measurement that is not about hanging: a hung or killed try is reported as a warning
    carrying its stacks, and the code is run again; a try that fails otherwise is never
    retried.
    """
    for attempt in range(1, tries + 1):
        with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
            args = [sys.executable, "-c", WATCHDOG.format(seconds=watchdog_s) + code]
            try:
                env = {**(OPTIMIZED if optimized else XLA_ON_CPU), "PATH": "/usr/bin:/bin",
                       **{k: os.environ[k] for k in BYTECODE if k in os.environ}}
                rc = subprocess.run(args, stdout=stdout, stderr=stderr, timeout=watchdog_s + 120,
                                    env=env).returncode
            except subprocess.TimeoutExpired:
                rc = None
            stdout.seek(0)
            stderr.seek(0)
            out = subprocess.CompletedProcess(args, rc, stdout.read(), stderr.read())
        hung = rc is None or (rc == 1 and "Timeout (" in out.stderr)
        if not hung or attempt == tries:
            if rc is None:
                raise AssertionError(f"killed after {watchdog_s + 120} s; its output:\n"
                                     + out.stdout[-2000:] + out.stderr[-4000:])
            return out
        warnings.warn(f"try {attempt} of {tries} hung for {watchdog_s} s; its threads:\n"
                      + out.stderr[-6000:], stacklevel=2)
    raise AssertionError("unreachable")
