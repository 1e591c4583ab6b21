"""The tests' `python3` kernelspec: a kernel forked by this worker's zygote, or a real one.

Standard library only (it starts in milliseconds). See tests/kernel_zygote.py for when a kernel
is forked and when it is real, and the protocol.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time


def say(line: str) -> None:
    """One line in the zygote's folder's kernels.log (or TA_KERNEL_LOG, which outlives it): each
    kernel, forked or real and why."""
    path = os.environ.get("TA_KERNEL_ZYGOTE_SOCKET")
    log = os.environ.get("TA_KERNEL_LOG") or (path and os.path.join(os.path.dirname(path),
                                                                   "kernels.log"))
    if log:
        with contextlib.suppress(OSError), open(log, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


def real(why: str = "") -> None:
    say(f"real: {why}")
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[1:]])


def main() -> None:
    path = os.environ.get("TA_KERNEL_ZYGOTE_SOCKET")
    if not path or os.environ.get("TA_REAL_KERNEL"):
        real("TA_REAL_KERNEL" if path else "no zygote")
    # A kernel reads its parent's command line (lib/base/errors.py: started by papermill's?
    # the bootstrap: which notebook?): the forked kernel's parent stands in for ours with it.
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read()
    except OSError as err:
        real(f"cannot read its parent's command line: {err}")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.kernel_zygote import ROOM, import_time_env  # the zygote's own rules

    if len(parent) >= ROOM:
        real(f"its parent's command line is {len(parent)} bytes, over the zygote's {ROOM}")
    waited = 0.0
    while not os.path.exists(path):  # still importing: a fork is seconds sooner than a start
        try:
            with open(os.path.join(os.path.dirname(path), "zygote.pid")) as f:
                os.kill(int(f.read()), 0)
        except (OSError, ValueError):
            real("the zygote refused (its imports printed something) or ended")
        if waited > 120:
            real("the zygote was not ready in 120 s")
        time.sleep(0.05)
        waited += 0.05
    try:
        with open(os.path.join(os.path.dirname(path), "zygote.env")) as f:
            theirs = json.load(f)
    except (OSError, ValueError):
        real("no zygote.env")
    ours = import_time_env(os.environ)
    if ours != theirs:
        real("import-time variables differ: " + ", ".join(
            sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                   "parent": parent.decode("utf-8", "surrogateescape")}
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    except OSError as err:
        conn.close()
        real(f"could not reach the zygote: {err}")
    reader = conn.makefile("r")
    pid = json.loads(reader.readline())["pid"]
    say(f"forked: {pid}")

    def forward(signum, _frame):
        with contextlib.suppress(OSError):
            os.killpg(pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                signal.SIGUSR2):
        signal.signal(sig, forward)
    line = ""
    while not line:
        try:
            line = reader.readline()
            break
        except InterruptedError:
            continue
    status = json.loads(line)["status"] if line else 1
    if status < 0:  # killed by a signal: end the same way
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


if __name__ == "__main__":
    main()
