"""Notebook kernels forked from one process that imported the heavy libraries once.

The main lane starts some 130 notebook kernels (papermill in the tests, and inside the
command-line runs, sweeps and stand-ins they start); each paid Python's and torch's imports
again (torch, torchvision's Dynamo, matplotlib, TensorBoard: 4.8 s of CPU on a quiet machine,
7-10 s on the lane's loaded one), about half of a SMOKE notebook's CPU. Here, each pytest
worker starts one zygote that imports them (never `lib`: the project's code is read fresh by
every kernel), and the kernelspec `python3` is pointed, through JUPYTER_PATH, at
`tests/kernel_launch.py`: a standard-library launcher that asks the zygote to fork a kernel
with the launcher's environment, working folder, arguments and stdin/stdout/stderr, then stands
in for it (signals forwarded to the kernel's process group, its exit status returned).

A notebook reads its parent's command line (lib/base/errors.py: started by papermill's? the
bootstrap: which notebook?), and a forked kernel's parent would be the zygote: so the forked
child stands in for the launcher's parent. It writes that command line over its own (the
argument area /proc/PID/cmdline shows: the zygote starts with ROOM bytes of it), forks the
kernel, waits for it and ends as it ended; the kernel writes `python -m ipykernel_launcher ...`
over its own, as a real kernel's reads. The kernel's parent's command line is then papermill's
(the Kaggle and Colab stand-ins, a test's `python -m papermill`) or a command-line run's.

Where a fork would not be what a fresh kernel is, the launcher starts a real one instead
(`python -m ipykernel_launcher`, as the kernelspec it replaces):
- the environment differs from the zygote's in a variable read at import time (IMPORT_TIME:
  thread counts, torch's, CUDA's, XLA's, matplotlib's, the temp folders). PYTHONPATH only sets
  the import path: the forked kernel takes the one a real kernel has, unless the new path would
  import something otherwise (tests/kernel_launch.py `path_differs`); HOME only places
  matplotlib's user files: forked unless a home holds any it reads (`home_differs`);
- TA_REAL_KERNEL is set (a test about the kernel's process: its peak memory, its children);
- its parent's command line cannot be read, or is longer than ROOM;
- no zygote is listening (not started, or still importing).
Whatever the zygote's imports print would be missing from the kernels' output: it refuses to
serve if they print anything (a library's warning a notebook must show), and every kernel is
then a real one.

Enabled by TA_KERNEL_ZYGOTE=1 (the Makefile's main lane and quick lane); not in the image
lanes, whose bootstraps install packages a forked kernel would not import again.

Protocol on the Unix socket, one JSON line each way, the launcher's fds 0-2 passed with the
request (SCM_RIGHTS): {"argv", "env", "cwd", "parent"} -> {"pid"} (the kernel's; its session and
process group are its own); when the kernel ends, {"status"}. A
launcher that goes away (SIGKILLed) takes its kernel with it: the zygote sees the connection
close and kills the kernel's process group. Single-threaded (select), so every fork is safe.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import io
import json
import os
import re
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.zygote import HEAVY as SCRIPT_HEAVY

# tests/zygote.py's (the fault harness's scripts) and what a notebook's kernel adds.
HEAVY = (*SCRIPT_HEAVY, "matplotlib", "IPython", "pandas", "tqdm.auto", "ipywidgets", "nbformat")
# Variables a library reads when it is imported: a kernel whose value differs is a real one.
IMPORT_TIME = re.compile(r"^(PYTHON|OMP_|MKL_|KMP_|OPENBLAS|GOMP|TORCH|PYTORCH|TRITON|CUDA|"
                         r"NVIDIA|PJRT|XLA|TPU|LD_|MPL|HOME$|XDG_|LANG$|LC_)")
# Bytes of command line the zygote starts with, so that a forked child can write one this long
# over its own (a launcher whose parent's is longer starts a real kernel).
ROOM = 16384
ENABLE = "TA_KERNEL_ZYGOTE"
SOCKET = "TA_KERNEL_ZYGOTE_SOCKET"  # set for the tests (and what they start) once it serves
ROOT = Path(__file__).resolve().parent.parent
# The zygote's own variables: how the tests start kernels, not settings the product reads.
INFRA = (ENABLE, SOCKET, "TA_KERNEL_LOG")


def without_settings(environ) -> dict:
    """`environ` without the TA_ settings a test may have made (a user's session has none),
    keeping the zygote's own (INFRA), so that its kernels are forked as any other test's."""
    return {k: v for k, v in environ.items() if not k.startswith("TA_") or k in INFRA}


# Read when used, not when imported (the child also forgets tempfile's cached folder), and set
# for its kernel by every command-line run (lib/cli/execute.py): TORCHINDUCTOR_CACHE_DIR
# (torch._inductor.runtime.cache_dir_utils.cache_dir reads it at each call), the temp folder,
# and KMP_DUPLICATE_LIB_OK (Intel's OpenMP runtime reads it; torch's Linux wheels load GNU's).
AT_USE = {"TORCHINDUCTOR_CACHE_DIR", "TMPDIR", "TEMP", "TMP", "KMP_DUPLICATE_LIB_OK"}


def import_time_env(env) -> dict:
    return {k: v for k, v in env.items() if IMPORT_TIME.match(k) and k not in AT_USE}


def _arg_area() -> tuple[int, int]:
    """(start, end) of this process's argument area: what /proc/PID/cmdline shows (proc(5):
    /proc/PID/stat's fields 48 and 49, after the command name in parentheses)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[48 - 3]), int(fields[49 - 3])


def _write_command_line(cmdline: bytes) -> None:
    """Make /proc/self/cmdline read `cmdline` (NUL-separated arguments), padded with NULs."""
    start, end = _arg_area()
    if len(cmdline) >= end - start:
        raise ValueError(f"a command line of {len(cmdline)} bytes; room for {end - start - 1}")
    ctypes.memmove(start, cmdline.ljust(end - start, b"\0"), end - start)


def _stand_in_for_parent(cmdline: bytes, told: int) -> None:
    """Become the kernel's parent as its launcher's parent shows itself (`cmdline`): fork the
    kernel (in a session of its own, as jupyter_client starts one), write its pid to fd `told`,
    wait for it and end as it ended. Returns in the kernel only."""
    _write_command_line(cmdline)
    pid = os.fork()
    if pid == 0:
        os.close(told)
        os.setsid()
        return
    while os.getsid(pid) != pid:  # signals sent to its group from now on reach it
        time.sleep(0.001)
    os.write(told, str(pid).encode())
    os.close(told)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# What ipykernel sets MPLBACKEND to when it is not set, before a notebook's code runs
# (ipykernel/kernelapp.py, init_gui_pylab): figures then show inline.
INLINE = "module://matplotlib_inline.backend_inline"


def _backend_as_at_import() -> None:
    """matplotlib reads MPLBACKEND when imported (the zygote's Agg, here); a fresh kernel's
    imports it after ipykernel set it, so its figures show inline. Give the kernel the backend
    its own MPLBACKEND names (ipykernel's when unset). The zygote drew no figure, so pyplot
    chooses it at the kernel's first, as in a fresh one (the inline backend then hooks into
    the running kernel's shell)."""
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return
    matplotlib.rcParams["backend"] = os.environ.get("MPLBACKEND") or INLINE


def _matplotlib_home() -> None:
    """matplotlib found its config and cache folders from the zygote's HOME when imported; a
    fresh kernel finds them from its own (the stand-ins' homes), makes them and writes its
    font list there (the same list: kernel_launch.home_differs forks only homes without
    fonts or settings of their own). Do the same, and let later calls find them anew."""
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return
    for name, fmt in (("get_configdir", "CONFIGDIR=%s"), ("get_cachedir", "CACHEDIR=%s")):
        fresh = getattr(matplotlib, name).__wrapped__  # memoized once: memoize it anew
        setattr(matplotlib, name, matplotlib._logged_cached(fmt, fresh))
    matplotlib.get_configdir()
    font_manager = sys.modules.get("matplotlib.font_manager")
    if font_manager is not None:
        cache = Path(matplotlib.get_cachedir(),
                     f"fontlist-v{font_manager.FontManager.__version__}.json")
        if not cache.exists():
            font_manager.json_dump(font_manager.fontManager, cache)
    style = sys.modules.get("matplotlib.style")  # its list (style.core's is the same one)
    if style is not None:
        style.USER_LIBRARY_PATHS[:] = [os.path.join(matplotlib.get_configdir(), "stylelib")]


def _child(request: dict, fds: list[int], listener: socket.socket, conns, told: int) -> None:
    """In the forked child: stand in for the launcher's parent, and in its child become
    `python -m ipykernel_launcher ...`; never return."""
    code = 1
    try:
        listener.close()
        for c in conns:
            c.close()
        os.setsid()  # out of the zygote's session, as a real kernel's parent is
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _stand_in_for_parent(request["parent"].encode("utf-8", "surrogateescape"), told)
        argv = ["ipykernel_launcher", *request["argv"]]
        _write_command_line(b"\0".join(a.encode("utf-8", "surrogateescape") for a in
                                        [sys.executable, "-m", *argv]) + b"\0")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        # `python -m` puts the working folder first, then PYTHONPATH's entries and the rest
        # (the launcher's own path: kernel_launch.path_differs allowed it)
        sys.path[:] = [request["cwd"], *request["path"]]
        importlib.invalidate_caches()
        _backend_as_at_import()
        _matplotlib_home()
        tempfile.tempdir = None
        sys.argv = argv
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        try:
            runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
        except BaseException:
            import traceback

            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def imported() -> dict[str, str | None]:
    """Each top-level module imported here -> the file it came from; None for a namespace
    package (a portion in a new path entry joins it, as in a real start). Built-in and
    frozen modules are left out: no path entry provides them."""
    out: dict[str, str | None] = {}
    for name, module in list(sys.modules.items()):
        if "." in name or module is None:
            continue
        origin = getattr(module, "__file__", None)
        if origin:
            out[name] = origin
        elif getattr(module, "__path__", None) is not None:
            out[name] = None
    return out


def serve(path: str) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        start, end = _arg_area()
    except (OSError, ValueError, IndexError) as err:  # no /proc (macOS)
        start, end, why = 0, 0, repr(err)
    else:
        why = f"{end - start} bytes of command line, not over ROOM ({ROOM})"
    if end - start <= ROOM:
        print(json.dumps({"refused": f"no room to write a command line over its own: {why}"}),
              flush=True)
        return
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for name in HEAVY:
                with contextlib.suppress(ImportError):
                    importlib.import_module(name)
    if said.getvalue() or caught:
        # A kernel forked from here would not print what a fresh one prints on import.
        print(json.dumps({"refused": said.getvalue()[:500] + "; ".join(
            str(w.message) for w in caught)[:500]}), flush=True)
        return
    Path(path).with_name("zygote.path").write_text(json.dumps(
        {"path": sys.path[1:], "modules": imported()}))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # seen by launchers only once it listens
    print(json.dumps({"ready": True}), flush=True)
    conns: dict[socket.socket, int | None] = {}  # launcher connection -> its kernel's pid
    kernels: dict[int, socket.socket] = {}
    parent = os.getppid()
    while True:
        ready, _, _ = select.select([listener, *conns], [], [], 0.2)
        for sock in ready:
            if sock is listener:
                conn, _ = listener.accept()
                conns[conn] = None
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            except OSError:
                msg, fds = b"", []
            pid = conns[sock]
            if not msg:  # the launcher went away: so does its kernel
                for fd in fds:
                    os.close(fd)
                if pid is not None:
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGKILL)
                del conns[sock]
                sock.close()
                continue
            request = json.loads(msg)
            told, tell = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(told)
                _child(request, fds, listener, list(conns), tell)
            os.close(tell)
            for fd in fds:
                os.close(fd)
            kernel = int(os.read(told, 32) or pid)  # none: the stand-in failed before the fork
            os.close(told)
            conns[sock], kernels[pid] = kernel, sock
            with contextlib.suppress(OSError):
                sock.sendall((json.dumps({"pid": kernel}) + "\n").encode())
        while kernels:  # reap the kernels that ended, and tell their launchers
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock = kernels.pop(pid, None)
            if sock is not None and sock in conns:
                with contextlib.suppress(OSError):
                    sock.sendall((json.dumps({"status": os.waitstatus_to_exitcode(status)})
                                  + "\n").encode())
                conns[sock] = None
        if os.getppid() != parent:  # the pytest worker that started it is gone
            for kernel in conns.values():
                if kernel is not None:
                    with contextlib.suppress(OSError):
                        os.killpg(kernel, signal.SIGKILL)
            return


def kernelspec(folder: Path) -> Path:
    """JUPYTER_PATH's folder whose kernels/python3 is the launcher (the native spec's argv,
    display name and language otherwise)."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(ROOT / "tests" / "kernel_launch.py"), "-f",
                 "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python",
        "metadata": {"debugger": True}}))
    return folder


def start(folder: Path) -> subprocess.Popen | None:
    """For this pytest worker (os.environ: its tests and what they start): the kernelspec now,
    the zygote in the background (kernels before it is ready are real ones)."""
    if os.environ.get(ENABLE) != "1":
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "zygote.sock"
    env = dict(os.environ)
    env.pop(SOCKET, None)
    proc = subprocess.Popen([sys.executable, "-m", "tests.kernel_zygote", str(path),
                             "-" * ROOM], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    (folder / "zygote.env").write_text(json.dumps(import_time_env(env)))
    (folder / "zygote.pid").write_text(str(proc.pid))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(kernelspec(folder / "jupyter"))] +
        [p for p in [os.environ.get("JUPYTER_PATH")] if p])
    os.environ[SOCKET] = str(path)
    atexit.register(lambda: (proc.poll() is None and proc.kill()))
    return proc


if __name__ == "__main__":
    serve(sys.argv[1])
