"""Errors a user can cause and fix, shown as one line wherever the project runs.

A `UserError` names the value, what was expected and the fix in its message. In a notebook
it renders as that one line (IPython asks an exception for `_render_traceback_`), at a
command line the entry point prints it and exits 2, and papermill shows it as the cell's
error. The full traceback stays one switch away for a bug report: set `TA_TRACEBACK=1`
(`%env TA_TRACEBACK=1`, then re-run the cell) and the notebook shows it whole. Anything that
is not a `UserError` is a bug and always keeps its traceback.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import traceback
from pathlib import Path

TRACEBACK_ENV = "TA_TRACEBACK"
# Which front end the parameters come from, so that a fix is said as it is typed there:
# "cli" (`train-anywhere`, which sets it for itself and its kernels), "papermill" or
# "notebook"; unset, a kernel started by the papermill command line says "papermill".
FRONT_END_ENV = "TA_FRONT_END"
FRONT_ENDS = ("cli", "papermill", "notebook")


def _parent_command() -> str:
    """The command line of this process's parent (the papermill CLI that started a kernel)."""
    try:
        return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # no /proc (macOS): ask ps
        try:
            return subprocess.run(["ps", "-o", "args=", "-p", str(os.getppid())],
                                  capture_output=True, text=True, timeout=5).stdout
        except (OSError, subprocess.SubprocessError):
            return ""


def front_end(environ=os.environ) -> str:
    """"cli", "papermill" or "notebook": where the user sets parameters (FRONT_END_ENV)."""
    named = environ.get(FRONT_END_ENV, "")
    if named in FRONT_ENDS:
        return named
    return "papermill" if "papermill" in _parent_command() else "notebook"


def new_out_dir(environ=os.environ) -> str:
    """The fix "use another run folder", as the front end in use types it."""
    return ("give --out a new folder" if front_end(environ) == "cli"
            else "set OUT_DIR to a new folder")


def literal(value) -> str:
    """`value` as a Python literal whose strings are in double quotes (`["wandb"]`): read
    back by `-p` (lib.cli.params.parse_value) and quoted by a shell's '...' without escapes."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' * (len(value) == 1)})"
    return repr(value)


def how_to_set(name: str, example, environ=os.environ) -> str:
    """The fix "set NAME to `example`", as the front end in use types it: `-p EPOCHS 3` at
    the terminal, papermill's `-p EPOCHS 3`, `EPOCHS = 3` in a notebook's parameters cell;
    a list as `-p TRACKERS '["wandb"]'`, quoted once for the shell."""
    where = front_end(environ)
    if where == "notebook":
        return f"set {name} = {literal(example)} in the parameters cell"
    text = example if isinstance(example, str) else literal(example)
    typed = f"-p {name} {shlex.quote(text)}"
    return f"set it with {typed}" if where == "cli" else f"set it with papermill's {typed}"


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
