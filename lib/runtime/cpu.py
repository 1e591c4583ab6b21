"""This machine's CPU model, read without torch: the one reader of it, for the device module
(the accelerator a session records on the CPU), the planner (which matches those records
against this machine: lib/cli/plan/speeds.py, which may not load torch) and the benches."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC 7B13"), or what `platform` knows ("CPU" at worst)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or "CPU"
