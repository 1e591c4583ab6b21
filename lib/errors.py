"""Errors a user can cause and fix, shown as one line wherever the project runs.

A `UserError` names the value, what was expected and the fix in its message. In a notebook
it renders as that one line (IPython asks an exception for `_render_traceback_`), at a
command line the entry point prints it and exits 2, and papermill shows it as the cell's
error. The full traceback stays one switch away for a bug report: set `TA_TRACEBACK=1`
(`%env TA_TRACEBACK=1`, then re-run the cell) and the notebook shows it whole. Anything that
is not a `UserError` is a bug and always keeps its traceback.
"""

from __future__ import annotations

import os
import traceback

TRACEBACK_ENV = "TA_TRACEBACK"


class UserError(Exception):
    """A mistake in a parameter, a path, the data or OUT_DIR; the message says the fix."""

    def one_line(self) -> str:
        return f"{type(self).__name__}: {' '.join(str(self).split())}"

    def _render_traceback_(self) -> list[str]:  # IPython's hook; see the module docstring
        if os.environ.get(TRACEBACK_ENV):
            return traceback.format_exception(type(self), self, self.__traceback__)
        return [self.one_line()]


class ConfigError(UserError, ValueError):
    """A parameter has a wrong name, type or value."""


class DataError(UserError, ValueError):
    """DATA_DIR holds something other than the dataset, or in the wrong layout."""


class DataNotFound(UserError, FileNotFoundError):
    """The dataset is not where DATA_DIR says, or only part of it is."""


class DeviceError(UserError, RuntimeError):
    """The requested device is absent, or this torch cannot run on it."""


class OutDirError(UserError, ValueError):
    """OUT_DIR cannot hold this run: not a folder, not writable, or another experiment."""


class ExperimentChanged(OutDirError):
    """OUT_DIR holds a run of the same workload with other defining parameters."""


class CheckpointError(OutDirError):
    """A checkpoint the run needs cannot be read or belongs to another model."""


def one_line(exc: BaseException) -> str:
    """What a front end prints for `exc`: the one line of a UserError, else type and text."""
    if isinstance(exc, UserError):
        return exc.one_line()
    return f"{type(exc).__name__}: {exc}"
