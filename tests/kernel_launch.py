"""The tests' `python3` kernelspec: a kernel forked by this worker's zygote, or a real one.

Standard library only (it starts in milliseconds). See tests/kernel_zygote.py for when a kernel
is forked and when it is real, and the protocol.

Its first step holds the kernel's five ports (hold_ports). jupyter_client picks them by binding
port 0 and letting go, writes them in the connection file and starts us; until the kernel binds
them, any process may take one (another worker's kernel manager picking ports, or any connect()
choosing its local port), and the kernel then dies with "Address already in use" (a known race
of the protocol: jupyter_client's LocalPortCache only guards one process's picks; CI lost a run
to it). Held from our start, the window is our interpreter's start, not a kernel's imports.
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


HELD: list[socket.socket] = []  # the kernel's ports, held while it starts (and for its life)
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")  # connection file


def hold_ports(argv: list[str]) -> list[int]:
    """Bind the connection file's TCP ports (argv's `-f FILE`), each with SO_REUSEADDR and never
    listening: no other bind and no connect() can take them (Linux gives neither a port bound
    that way), while the kernel's ZeroMQ listeners, which set SO_REUSEADDR too, still bind them.
    Inheritable, so a real kernel (exec'd) holds them as well. Returns the ports that another
    process took first (the kernel will die on them: said in kernels.log)."""
    try:
        with open(argv[argv.index("-f") + 1]) as f:
            info = json.load(f)
    except (ValueError, IndexError, OSError):
        return []
    if info.get("transport", "tcp") != "tcp":
        return []
    taken = []
    for name in PORTS:
        port = info.get(name)
        if not port:
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((info.get("ip", "127.0.0.1"), port))
        except OSError:
            sock.close()
            taken.append(port)
            continue
        sock.set_inheritable(True)
        HELD.append(sock)
    if taken:
        say(f"ports taken before the kernel started: {taken}")
    return taken


def real(why: str = "") -> None:
    say(f"real: {why}")
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[1:]])


def main() -> None:
    hold_ports(sys.argv[1:])
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
