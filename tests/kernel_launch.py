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


# The zygote's own modules: its package, its __main__ and multiprocessing's alias of that (a
# kernel runs ipykernel_launcher as __main__).
OWN = ("tests", "__main__", "__mp_main__")


def path_differs(ours: list[str], zygote: dict) -> str:
    """Why a kernel whose import path (`ours`: sys.path after its first entry, as PYTHONPATH
    made it) differs from the zygote's cannot be forked from it; "" when it can: the forked
    child takes `ours` as its path (tests/kernel_zygote.py `_child`), and that is all a real
    start would differ in, unless an entry added provides a module the zygote imported (a real
    kernel would import that one instead; a namespace package's portion is fine: its
    __path__ is computed again from sys.path) or a sitecustomize (which a real start runs), or
    an entry removed is where the zygote imported one from (its own, OWN, aside)."""
    theirs, modules = zygote["path"], zygote["modules"]
    common = list(dict.fromkeys(p for p in ours if p in theirs))  # an entry twice: as once
    if common != list(dict.fromkeys(p for p in theirs if p in ours)):
        return "PYTHONPATH orders the zygote's entries otherwise"
    for entry in (p for p in ours if p not in theirs):
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue  # a path entry that does not exist provides nothing
        for child in names:
            full = os.path.join(entry, child)
            package = os.path.isdir(full)
            name = child if package else child.split(".", 1)[0]
            if not package and not child.endswith((".py", ".pyc", ".so", ".pyd")):
                continue
            if name in ("sitecustomize", "usercustomize"):
                return f"PYTHONPATH entry {entry} has {child}, which a real start runs"
            if name not in modules:
                continue
            namespace = package and not os.path.exists(os.path.join(full, "__init__.py"))
            if not (namespace and modules[name] is None):
                return f"PYTHONPATH entry {entry} provides {name}, which the zygote imported"

    def came_from(origin: str) -> str:
        """The longest of the zygote's entries holding `origin` (site-packages may lie inside
        another entry: a venv inside the project)."""
        origin = os.path.abspath(origin)
        inside = [e for e in theirs if origin.startswith(os.path.join(os.path.abspath(e or "."),
                                                                      ""))]
        return max(inside, key=len, default="")

    for name, origin in modules.items():
        if origin and name not in OWN and (entry := came_from(origin)) and entry not in ours:
            return f"the zygote imported {name} from {entry}, which PYTHONPATH drops"
    return ""


# What matplotlib reads from a home folder when it is imported (the only library a kernel
# imports that reads one then: an audit hook on the zygote's imports saw no other): a user's
# matplotlibrc and styles, and fonts. Its caches are written there too, and so is a forked
# kernel's (tests/kernel_zygote.py `_matplotlib_home`).
HOME_INPUTS = (".config/matplotlib/matplotlibrc", ".config/matplotlib/stylelib",
               ".matplotlib", ".fonts", ".local/share/fonts")


def home_differs(ours: str | None, theirs: str | None) -> str:
    """Why a kernel whose HOME is `ours` cannot be forked from a zygote whose HOME is
    `theirs`; "" when neither holds anything matplotlib reads at import (HOME_INPUTS): both
    then import it as a fresh home would, and only its caches' place differs."""
    for home in (ours, theirs):
        if not home:
            return "HOME is not set"
        held = [name for name in HOME_INPUTS if os.path.exists(os.path.join(home, name))]
        if held:
            return f"HOME {home} has {held[0]}, which matplotlib reads when imported"
    return ""


def main() -> None:
    path = sys.path[1:]  # after the script's folder: what a real kernel's path has after its cwd
    hold_ports(sys.argv[1:])
    sock = os.environ.get("TA_KERNEL_ZYGOTE_SOCKET")
    if not sock or os.environ.get("TA_REAL_KERNEL"):
        real("TA_REAL_KERNEL" if sock else "no zygote")
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
    while not os.path.exists(sock):  # still importing: a fork is seconds sooner than a start
        try:
            with open(os.path.join(os.path.dirname(sock), "zygote.pid")) as f:
                os.kill(int(f.read()), 0)
        except (OSError, ValueError):
            real("the zygote refused (its imports printed something) or ended")
        if waited > 120:
            real("the zygote was not ready in 120 s")
        time.sleep(0.05)
        waited += 0.05
    try:
        with open(os.path.join(os.path.dirname(sock), "zygote.env")) as f:
            theirs = json.load(f)
        with open(os.path.join(os.path.dirname(sock), "zygote.path")) as f:
            zygote_path = json.load(f)
    except (OSError, ValueError):
        real("no zygote.env or zygote.path")
    ours = import_time_env(os.environ)
    # PYTHONPATH only sets the import path, which the forked kernel takes as a real one's
    # (unless path_differs says why not): the Colab stand-in's fakes, the site's build. And
    # HOME only places matplotlib's user files (unless home_differs says why not).
    differ = sorted(k for k in set(ours) | set(theirs)
                    if ours.get(k) != theirs.get(k) and k not in ("PYTHONPATH", "HOME"))
    if differ:
        real("import-time variables differ: " + ", ".join(differ))
    why = ""
    if ours.get("HOME") != theirs.get("HOME"):  # the stand-ins' homes
        why = home_differs(ours.get("HOME"), theirs.get("HOME"))
    why = why or path_differs(path, zygote_path)
    if why:
        real(why)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock)
        request = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                   "path": path, "parent": parent.decode("utf-8", "surrogateescape")}
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
