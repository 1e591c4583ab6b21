"""A test double of Colab's `google.colab` package (no real one can be installed: the
`google-colab` wheel on PyPI is an old snapshot that breaks environments).

Only what the project calls: `drive.mount`, `drive.flush_and_unmount` and `userdata.get` (the
Secrets panel, read from TA_FAKE_COLAB_SECRETS). Each call is
appended to `calls.jsonl` in the folder named by TA_FAKE_COLAB_LOG (default: the mount
point's parent), so a test can assert on them after papermill ran a notebook.
"""

import os as _os
import sys as _sys

# Colab's image has TensorBoard's command on PATH, which `%tensorboard` starts; the stand-in's
# kernel runs from a venv that is not: its `tensorboard` (../../bin, tests/fakes/
# fake_tensorboard.py) goes on PATH when the kernel first imports google.colab, as the magic
# does before it starts one (tensorboard/notebook.py `_get_context`), in this kernel's Python.
_BIN = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.dirname(
    _os.path.abspath(__file__)))), "bin")
# Only in a kernel: a test importing this double in its own process keeps its PATH.
if "ipykernel" in _sys.modules and _BIN not in _os.environ.get("PATH", "").split(_os.pathsep):
    _os.environ["PATH"] = _os.pathsep.join(filter(None, [_BIN, _os.environ.get("PATH")]))
    _os.environ["TA_FAKE_COLAB_PYTHON"] = _sys.executable
