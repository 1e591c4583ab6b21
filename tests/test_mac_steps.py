"""The README's steps for a Mac, checked on any machine: what they name exists, an old Python
gets one line, and the local notebooks' kernel is the venv's own Python."""

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mac_commands() -> list[list[str]]:
    """The shell commands of the README's "On a Mac" block, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## On a Mac", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_every_mac_step_names_a_make_target_extra_or_folder_that_exists():
    commands = mac_commands()
    assert any(c[:2] == ["make", "install"] for c in commands)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for cmd in commands:
        if cmd[0] == "make":
            dry = subprocess.run(["make", "-n", *cmd[1:], "VENV=/nonexistent-venv"], cwd=ROOT,
                                 capture_output=True, text=True)
            assert dry.returncode == 0, dry.stderr
        if cmd[0].endswith("/pip"):
            (extra,) = re.findall(r"\[(\w+)\]", cmd[-1])
            assert {"jupyterlab", "ipykernel"} <= {re.split(r"[<>=]", d)[0]
                                                    for d in extras[extra]}
        if cmd[0].endswith("/jupyter"):
            assert cmd[1] == "lab"
            folder = ROOT / cmd[2]
            assert {p.stem for p in folder.glob("*.ipynb")} >= {
                p.stem for p in (ROOT / "notebooks_src").glob("*.py")}


def test_an_old_python_gets_one_line_naming_its_version_and_the_fix(tmp_path):
    """A Mac's python3 is Apple's 3.9: say so, instead of pip's "no matching distribution"."""
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\nexec " + shlex.quote(sys.executable) + " -c 'import sys; "
                   'sys.version_info = (3, 9, 6, "final", 0); exec(sys.argv[1])\' "$2"\n')
    old.chmod(0o755)
    venv = tmp_path / "venv"
    out = subprocess.run(["make", "install", f"PYTHON={old}", f"VENV={venv}"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode != 0 and not venv.exists()
    first = out.stderr.splitlines()[0]
    assert f"PYTHON={old} is Python 3.9; train-anywhere needs 3.11 or newer" in first
    assert "PYTHON=python3.12" in first


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks" / "local").glob("*.ipynb")),
                         ids=lambda p: p.stem)
def test_the_local_notebooks_kernel_is_the_python_jupyterlab_runs_from(path, tmp_path,
                                                                        monkeypatch):
    """JupyterLab started from .venv/bin opens these notebooks on .venv's Python: the kernel
    they name is ipykernel's own, which runs the server's interpreter."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    for var in ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR"):  # no user specs
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    name = json.loads(path.read_text())["metadata"]["kernelspec"]["name"]
    spec = KernelSpecManager().get_kernel_spec(name)
    manager = KernelManager(kernel_name=name)
    assert manager.format_kernel_cmd()[0] == sys.executable, spec.argv
