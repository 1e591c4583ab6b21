"""TA_LIF_PATH: the kernel path the spiking layers' recurrence is forced onto from the
environment, its names and the check a run's config makes before anything starts.

Unset or "auto", `lib.kernels.lif.choose_path` picks the path by device. This module imports
no torch: a workload's config checks TA_LIF_PATH where torch is not loaded (the command line,
the notebook builder).
"""

from __future__ import annotations

import os

from lib.base.errors import ConfigError

LIF_PATH_ENV = "TA_LIF_PATH"
PATHS = ("auto", "triton", "portable", "reference", "scan")


def check_path_env() -> None:
    """Refuse a LIF_PATH_ENV value that is none of PATHS, in one line (a run's config calls
    this before anything starts)."""
    value = os.environ.get(LIF_PATH_ENV)
    if value and value not in PATHS:
        raise ConfigError(f"{LIF_PATH_ENV}={value!r} is not one of {PATHS}; unset it or use "
                          "'auto'.")
