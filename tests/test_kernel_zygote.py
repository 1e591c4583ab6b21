"""The tests' forked kernels (tests/kernel_zygote.py) are what a fresh kernel is to a notebook:
its environment, working folder, import path, outputs, and its own and its parent's command
lines; and a kernel whose import-time environment differs from the zygote's, or that asks for
it, is a real one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

from tests import kernel_launch, kernel_zygote

PROBE = ("import json, os, sys, tempfile\n"
         "def cmdline(pid):\n"
         "    line = open(f'/proc/{pid}/cmdline', 'rb').read().decode()\n"
         "    return line.rstrip('\\0').split('\\0')\n"
         "print(json.dumps({'cwd': os.getcwd(), 'path': sys.path, 'argv0': sys.argv[0],\n"
         "    'parent': cmdline(os.getppid()), 'own': cmdline('self'),\n"
         "    'mine': os.environ.get('MINE'), 'tmp': tempfile.gettempdir(),\n"
         "    'lib': any(m == 'lib' or m.startswith('lib.') for m in sys.modules),\n"
         "    'torch': 'torch' in sys.modules, 'session': os.getsid(0) == os.getpid()}))")


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zygote")
    with mock.patch.dict(os.environ, {kernel_zygote.ENABLE: "1"}):
        saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", kernel_zygote.SOCKET)}
        proc = kernel_zygote.start(folder)
        assert json.loads(proc.stdout.readline()) == {"ready": True}
        yield folder
        proc.kill()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _free_port() -> int:
    """A port free now (bound to 0 and let go, as jupyter_client picks a kernel's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _probe(folder: Path, name: str, code: str = PROBE, **env) -> dict:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbformat.write(nb, folder / f"{name}.ipynb")
    work = folder / f"{name}-cwd"
    work.mkdir()
    with mock.patch.dict(os.environ, {"MINE": name, "TMPDIR": str(work), **env}):
        papermill.execute_notebook(str(folder / f"{name}.ipynb"), str(folder / f"{name}-out.ipynb"),
                                   kernel_name="python3", progress_bar=False, cwd=str(work))
    out = nbformat.read(folder / f"{name}-out.ipynb", as_version=4).cells[0].outputs
    return json.loads(next(o["text"] for o in out if o.get("name") == "stdout"))


def _cmdline(pid) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def _alive(pid: int) -> bool:
    """Running, not a zombie (proc(5): stat's state)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _said(folder: Path) -> list[str]:
    log = folder / "kernels.log"
    return [line.split(" ", 1)[1] for line in (log.read_text() if log.exists() else
                                               "").splitlines()]


def test_a_forked_kernel_sees_what_a_real_one_sees(zygote):
    forked = _probe(zygote, "forked")
    real = _probe(zygote, "real", TA_REAL_KERNEL="1")
    said = _said(zygote)
    assert said[0].startswith("forked: ") and said[1] == "real: TA_REAL_KERNEL", said
    assert forked.pop("torch") is True and real.pop("torch") is False  # what it saves
    assert forked.pop("path") == real.pop("path")  # '' before site-packages: IPython's
    # the command lines a notebook reads: its parent's (this worker's), and its own
    assert forked.pop("parent") == real.pop("parent") == _cmdline(os.getpid())
    own = forked.pop("own"), real.pop("own")
    assert [c[:4] for c in own] == [[sys.executable, "-m", "ipykernel_launcher", "-f"]] * 2, own
    for probe, name in ((forked, "forked"), (real, "real")):
        work = str(zygote / f"{name}-cwd")
        assert probe == {"cwd": work, "argv0": probe["argv0"], "mine": name, "tmp": work,
                         "lib": False, "session": True}, probe
        assert probe["argv0"].endswith("ipykernel_launcher.py")


def test_an_import_time_variable_that_differs_starts_a_real_kernel(zygote):
    before = len(_said(zygote))
    probe = _probe(zygote, "threads", OMP_NUM_THREADS="7")
    assert probe["torch"] is False
    assert _said(zygote)[before:] == ["real: import-time variables differ: OMP_NUM_THREADS"]


# What a kernel whose PYTHONPATH is another folder imports from it: a module of its own, and a
# portion of a namespace package the zygote imported (`google`, as protobuf's; the Colab
# stand-in's google.colab is one).
PATH_PROBE = ("import json, sys, torch\n"
              "import mine_extra, google.ta_probe\n"
              "print(json.dumps({'path': sys.path, 'extra': mine_extra.VALUE,\n"
              "    'portion': google.ta_probe.VALUE}))")


def test_a_kernel_with_another_pythonpath_is_forked_with_the_path_a_real_one_has(zygote,
                                                                                tmp_path):
    """Another PYTHONPATH (here one that drops the project's folder and adds one) is forked:
    the kernel's import path is a real kernel's, entry for entry, and it imports the new
    folder's module and its portion of a namespace package the zygote had imported."""
    extra = tmp_path / "extra"
    (extra / "google").mkdir(parents=True)
    (extra / "mine_extra.py").write_text("VALUE = 'extra'\n")
    (extra / "google" / "ta_probe.py").write_text("VALUE = 'portion'\n")
    assert "google" in json.loads((zygote / "zygote.path").read_text())["modules"]
    before = len(_said(zygote))
    forked = _probe(zygote, "path-forked", PATH_PROBE, PYTHONPATH=str(extra))
    real = _probe(zygote, "path-real", PATH_PROBE, PYTHONPATH=str(extra), TA_REAL_KERNEL="1")
    said = _said(zygote)[before:]
    assert said[0].startswith("forked: ") and said[1] == "real: TA_REAL_KERNEL", said
    assert forked == real, (forked, real)
    assert str(extra) in forked["path"] and kernel_zygote.ROOT.as_posix() not in forked["path"]
    assert (forked["extra"], forked["portion"]) == ("extra", "portion")


@pytest.mark.parametrize("planted,why", [
    ("einops.py", "provides einops, which the zygote imported"),
    ("sitecustomize.py", "has sitecustomize.py, which a real start runs")])
def test_a_pythonpath_that_would_import_otherwise_starts_a_real_kernel(zygote, tmp_path,
                                                                      planted, why):
    """A folder that provides a module the zygote imported (a real kernel would import that
    one), or a sitecustomize (a real start runs it): a real kernel, and the reason said."""
    extra = tmp_path / "shadow"
    extra.mkdir()
    (extra / planted).write_text("VALUE = 'shadow'\n")
    before = len(_said(zygote))
    probe = _probe(zygote, f"shadow-{planted}", PYTHONPATH=str(extra))
    assert probe["torch"] is False
    assert _said(zygote)[before:] == [f"real: PYTHONPATH entry {extra} {why}"]


def _figures(folder: Path, name: str, **env) -> tuple[list[str], str]:
    """A notebook that draws a figure: its outputs' MIME types and the backend it drew with."""
    code = ("import matplotlib, matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3])\n"
            "print(matplotlib.get_backend())")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbformat.write(nb, folder / f"{name}.ipynb")
    with mock.patch.dict(os.environ, env):
        papermill.execute_notebook(str(folder / f"{name}.ipynb"), str(folder / f"{name}-out.ipynb"),
                                   kernel_name="python3", progress_bar=False, cwd=str(folder))
    out = nbformat.read(folder / f"{name}-out.ipynb", as_version=4).cells[0].outputs
    kinds = sorted(k for o in out for k in o.get("data", {}))
    return kinds, next(o["text"] for o in out if o.get("name") == "stdout").strip()


def test_a_forked_kernel_shows_figures_inline_as_a_real_one_does(zygote):
    """The zygote imported matplotlib under MPLBACKEND=Agg; a fresh kernel imports it after
    ipykernel chose the inline backend, and a figure drawn in a cell is among its outputs."""
    before = len(_said(zygote))
    forked = _figures(zygote, "figure-forked")
    real = _figures(zygote, "figure-real", TA_REAL_KERNEL="1")
    assert _said(zygote)[before].startswith("forked: ")
    assert forked == real and "image/png" in real[0], (forked, real)
    assert "inline" in real[1]


HOME_PROBE = ("import json, os, matplotlib, matplotlib.style\n"
              "import matplotlib.pyplot as plt\n"
              "plt.plot([1, 2])\n"
              "home = os.environ['HOME']\n"
              "print(json.dumps({'config': matplotlib.get_configdir(),\n"
              "    'cache': matplotlib.get_cachedir(),\n"
              "    'styles': matplotlib.style.USER_LIBRARY_PATHS,\n"
              "    'files': sorted(os.path.relpath(os.path.join(d, f), home)\n"
              "                    for d, _, fs in os.walk(home) for f in fs)}))")


def test_a_kernel_in_another_home_is_forked_and_leaves_what_a_real_one_leaves(zygote, tmp_path):
    """The stand-ins' homes (Studio Lab's, SageMaker's, ...): a forked kernel finds
    matplotlib's folders in its own home and writes there what a fresh kernel writes (its
    font list), file for file."""
    homes = {name: tmp_path / name for name in ("forked", "real")}
    for home in homes.values():
        home.mkdir()
    before = len(_said(zygote))
    forked = _probe(zygote, "home-forked", HOME_PROBE, HOME=str(homes["forked"]))
    real = _probe(zygote, "home-real", HOME_PROBE, HOME=str(homes["real"]), TA_REAL_KERNEL="1")
    assert _said(zygote)[before].startswith("forked: ")
    for probe, home in ((forked, homes["forked"]), (real, homes["real"])):
        assert probe["config"] == str(home / ".config" / "matplotlib"), probe
        assert probe["cache"] == str(home / ".cache" / "matplotlib"), probe
        assert probe["styles"] == [str(home / ".config" / "matplotlib" / "stylelib")], probe
    assert forked["files"] == real["files"] and any("fontlist" in f for f in real["files"])


def test_a_home_with_matplotlib_settings_starts_a_real_kernel(zygote, tmp_path):
    """A home whose matplotlibrc a fresh kernel would read: a real kernel, and why."""
    home = tmp_path / "styled"
    (home / ".config" / "matplotlib").mkdir(parents=True)
    (home / ".config" / "matplotlib" / "matplotlibrc").write_text("lines.linewidth: 4\n")
    before = len(_said(zygote))
    probe = _probe(zygote, "home-styled", HOME=str(home))
    assert probe["torch"] is False
    assert _said(zygote)[before:] == [
        f"real: HOME {home} has .config/matplotlib/matplotlibrc, which matplotlib reads when "
        "imported"]


def test_a_killed_launcher_takes_its_kernel_with_it(zygote, tmp_path):
    """jupyter_client SIGKILLs the kernel it started (the launcher): the forked kernel goes too.
    Until then the launcher holds the kernel's ports (hold_ports, from its start)."""
    ports = [_free_port() for _ in kernel_launch.PORTS]
    conn = tmp_path / "kernel.json"
    conn.write_text(json.dumps({**dict(zip(kernel_launch.PORTS, ports, strict=True)),
                                "ip": "127.0.0.1", "key": "", "transport": "tcp",
                                "signature_scheme": "hmac-sha256"}))
    launcher = subprocess.Popen([sys.executable, str(kernel_zygote.ROOT / "tests" /
                                                     "kernel_launch.py"), "-f", str(conn)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # a failed check must not leave the launcher, and so its kernel, running
        deadline, lines = time.monotonic() + 60, []
        while not (lines and lines[-1].startswith(f"{launcher.pid} forked: ")):
            assert time.monotonic() < deadline, lines
            time.sleep(0.1)
            log = zygote / "kernels.log"  # not there before the module's first kernel
            lines = log.read_text().splitlines() if log.exists() else []
        kernel = int(lines[-1].split()[-1])
        stand_in = int(Path(f"/proc/{kernel}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert _alive(kernel) and _alive(stand_in)  # its parent, standing in for the launcher's
        fds = Path(f"/proc/{launcher.pid}/fd")  # bound, never listening: in no /proc/net table
        sockets = [f for f in fds.iterdir() if os.readlink(f).startswith("socket:")]
        assert len(sockets) == len(ports) + 1, sockets  # and its connection to the zygote
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not (_alive(kernel) or _alive(stand_in)):
            return
        time.sleep(0.1)
    pytest.fail(f"the forked kernel {kernel} or its parent {stand_in} outlived its killed "
                "launcher")


def test_a_kernel_started_by_papermills_command_line_reads_papermills_as_its_parents(zygote):
    """The notebook reads its parent's command line (papermill's? which notebook?): a forked
    kernel's parent stands in for the launcher's, papermill's command line."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    nbformat.write(nb, zygote / "cli.ipynb")
    before = len(_said(zygote))
    command = [sys.executable, "-m", "papermill", str(zygote / "cli.ipynb"),
               str(zygote / "cli-out.ipynb"), "-k", "python3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split(":")[0] for line in _said(zygote)[before:]] == ["forked"]
    out = nbformat.read(zygote / "cli-out.ipynb", as_version=4).cells[0].outputs
    probe = json.loads(next(o["text"] for o in out if o.get("name") == "stdout"))
    assert probe["parent"] == command and probe["torch"] is True


def test_a_parents_command_line_longer_than_the_room_starts_a_real_kernel(zygote):
    """A command line the stand-in could not write over its own: a real kernel, said why."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    nbformat.write(nb, zygote / "long.ipynb")
    before = len(_said(zygote))
    command = [sys.executable, "-m", "papermill", str(zygote / "long.ipynb"),
               str(zygote / "long-out.ipynb"), "-k", "python3", "--language", "python",
               "-r", "LONG", "x" * kernel_zygote.ROOM]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (said,) = _said(zygote)[before:]
    assert said.startswith("real: its parent's command line is ") and "over the zygote's" in said
    out = nbformat.read(zygote / "long-out.ipynb", as_version=4).cells[1].outputs
    probe = json.loads(next(o["text"] for o in out if o.get("name") == "stdout"))
    assert probe["parent"] == command and probe["torch"] is False


def test_the_launcher_holds_the_kernels_ports_so_no_other_process_takes_one(tmp_path):
    """jupyter_client picks a kernel's ports and lets them go before the kernel binds them: the
    launcher holds them from its start (a bind elsewhere fails) while the kernel's ZeroMQ
    listeners still bind them; a port taken before it started is reported."""
    import zmq

    ports = {name: _free_port() for name in kernel_launch.PORTS}
    squatter = socket.socket()  # another process's socket on the shell port, already listening
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    ports["shell_port"] = squatter.getsockname()[1]
    connection = tmp_path / "kernel.json"
    connection.write_text(json.dumps({**ports, "ip": "127.0.0.1", "transport": "tcp"}))
    context = zmq.Context()
    try:
        assert kernel_launch.hold_ports(["-f", str(connection)]) == [ports["shell_port"]]
        held = [p for name, p in ports.items() if name != "shell_port"]
        assert sorted(s.getsockname()[1] for s in kernel_launch.HELD) == sorted(held)
        for port in held:
            with socket.socket() as other, pytest.raises(OSError, match="in use"):
                other.bind(("127.0.0.1", port))
            listener = context.socket(zmq.ROUTER)
            listener.bind(f"tcp://127.0.0.1:{port}")  # as the kernel does: it still can
            listener.close(linger=0)
    finally:
        context.destroy(linger=0)
        squatter.close()
        while kernel_launch.HELD:
            kernel_launch.HELD.pop().close()
