"""lib/cli/execute.py: one notebook run from a terminal (`run`, each sweep cell)."""

import socket

import nbformat
from jupyter_client.connect import LocalPortCache
from nbformat import v4

from lib.cli.execute import execute
from tests.notebook_run import stream_text


def test_a_kernel_that_dies_on_a_port_taken_before_it_bound_it_is_started_again(
        tmp_path, monkeypatch):
    """jupyter/jupyter_client#487 staged: the first kernel's first port is one another socket
    took (listening) after jupyter_client picked it, so that kernel dies before it runs a cell
    ("Address already in use"; a sweep cell was lost to it in CI). `execute` starts the kernel
    again on new ports, and the notebook runs once, with its parameters."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken, handed = held.getsockname()[1], []
    pick = LocalPortCache.find_available_port

    def find_available_port(self, ip):
        handed.append(taken if not handed else pick(self, ip))
        return handed[-1]

    monkeypatch.setattr(LocalPortCache, "find_available_port", find_available_port)
    notebook = tmp_path / "in.ipynb"
    nbformat.write(v4.new_notebook(cells=[
        v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        v4.new_code_cell("print('ran with', x)")], metadata={
            "kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"},
            "language_info": {"name": "python"}}), notebook)
    try:
        execute(notebook, tmp_path / "out.ipynb", {"x": 2})
    finally:
        held.close()
    assert handed.count(taken) == 1 and len(handed) >= 10  # two kernels' five ports each
    text = stream_text(nbformat.read(tmp_path / "out.ipynb", as_version=4))
    assert text.count("ran with 2") == 1
