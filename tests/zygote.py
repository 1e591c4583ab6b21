"""A process that imports the heavy libraries once and forks a fresh child for each run.

The kill-and-resume tests restart a notebook's script some 50 times a run; each start paid
Python's and torch's import again (2-4 s on a quiet machine, tens of seconds on a loaded one)
before the few steps the test is about. The zygote imports torch, torchvision, numpy,
matplotlib, tensorboard, snntorch, tonic and friends (never `lib`: the project's own code, and
so its failpoints, are read fresh in every child), then for each request forks a child that
runs the script as `python script.py` would, in its own environment, its stderr to a file.
What the child does is what a restarted kernel does after its imports; a SIGKILL of the
child (a failpoint's, or the test's) kills only that run.

Protocol, one JSON line each: {"ready"} once the imports are done; then per request
{"script", "env", "cwd", "stderr", "stdout"} -> {"pid"} (stdout true: into the stderr file,
else discarded), and when the child ends, {"status"} (its exit code, -9 for SIGKILL).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import traceback
from pathlib import Path

HEAVY = ("numpy", "torch", "torchvision", "matplotlib.pyplot", "PIL.Image", "scipy.ndimage",
         "torch.utils.tensorboard", "IPython.display", "einops", "snntorch", "tonic", "h5py")


def _child(request: dict) -> None:
    """In the forked child: become `python script` and never return."""
    code = 1
    try:
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        # stdout: into the same file (one offset: the two interleave as a terminal shows them)
        os.dup2(err if request.get("stdout") else os.open(os.devnull, os.O_WRONLY), 1)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [request["script"]]
        try:
            runpy.run_path(request["script"], run_name="__main__")
            code = 0
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()  # what the interpreter runs at a normal exit
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in HEAVY:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


class Zygote:
    """The client: `start` a script, `wait` for its exit code (None: still running)."""

    def __init__(self, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.zygote"], env=env,
                                     cwd=Path(__file__).resolve().parent.parent,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._fd, self._buffer = self.proc.stdout.fileno(), b""  # read unbuffered: select
        self._ready = False
        atexit.register(self.close)

    def ready(self) -> None:
        """Wait until the zygote has imported everything (a fork's clock starts after)."""
        if not self._ready:
            assert self._read(None) == {"ready": True}
            self._ready = True

    def _read(self, timeout: float | None) -> dict | None:
        """The next answer, or None when none came within `timeout` seconds."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._fd, 4096)
            if not chunk:
                raise RuntimeError(f"the zygote ended (exit {self.proc.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def start(self, script: Path, env: dict, cwd: Path, stderr: Path,
              stdout: bool = False) -> int:
        self.ready()
        self.proc.stdin.write(json.dumps({"script": str(script), "env": env, "cwd": str(cwd),
                                          "stderr": str(stderr), "stdout": stdout}) + "\n")
        self.proc.stdin.flush()
        return self._read(None)["pid"]

    def wait(self, timeout: float | None = None) -> int | None:
        answer = self._read(timeout)
        return None if answer is None else answer["status"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


if __name__ == "__main__":
    serve()
