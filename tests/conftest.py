"""Collection rules shared by every test module."""

import importlib.util
import sys

import pytest

from lib.platforms import detect_runtime

# The XLA lane's modules import torch_xla; the main lane's environment has none, so it does
# not collect them at all (rather than report them as skipped). `make test-xla` runs them.
collect_ignore_glob = [] if importlib.util.find_spec("torch_xla") else ["test_xla_*.py"]


@pytest.fixture(autouse=True)
def _no_platform_left_behind():
    """A test that leaves the fake `google.colab` imported, or a platform's variable set, makes
    every later test of its worker detect that platform (lib.platforms.detect_runtime): which
    tests share a worker changes from run to run, so it fails here, at the test that did it."""
    before = detect_runtime()
    yield
    after = detect_runtime()
    if after != before:
        left = [m for m in sys.modules if m.startswith("google.colab")]
        pytest.fail(f"this test left the runtime detected as {after!r} (was {before!r}): "
                    f"modules {left}, or a platform's variable in os.environ; undo it in teardown "
                    "(monkeypatch, or del sys.modules[...])", pytrace=False)
