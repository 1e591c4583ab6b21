"""Collection rules shared by every test module."""

import importlib.util
import shutil
import sys

import pytest

from lib.runtime.platforms import detect_runtime

# The XLA lane's modules import torch_xla; the main lane's environment has none, so it does
# not collect them at all (rather than report them as skipped). `make test-xla` runs them.
collect_ignore_glob = [] if importlib.util.find_spec("torch_xla") else ["test_xla_*.py"]


def pytest_configure(config):
    """Each process that runs tests (an xdist worker, or pytest without xdist) starts its kernel
    zygote when TA_KERNEL_ZYGOTE=1 (the Makefile's main and quick lanes): tests/kernel_zygote.py."""
    import os
    import tempfile
    from pathlib import Path

    from tests import kernel_zygote

    if getattr(config.option, "numprocesses", 0) and not hasattr(config, "workerinput"):
        return  # xdist's controller runs no test
    folder = Path(tempfile.mkdtemp(prefix="ta-kernels-"))
    if kernel_zygote.start(folder) is None:
        os.rmdir(folder)
    else:
        import atexit

        atexit.register(shutil.rmtree, folder, True)


# xdist's `--dist loadscope` hands whole modules to the workers in collection order; one of
# minutes handed out last ends its lane minutes after the others (the XLA lane's MSHNet module,
# 229 s, started halfway: 415 s where longest-first gives about 315). So the modules that took
# longest are collected first, longest first: their seconds (every test's setup, call and
# teardown) on the last measured lanes (`--durations=0`, 2-core machine, round seven).
LONGEST = {"test_sweep_remote.py": 479, "test_notebooks_drive.py": 286,
           "test_kill_resume.py": 267, "test_notebooks_clouds.py": 259, "test_sweep.py": 228,
           "test_carry_journey.py": 228, "test_first_use.py": 217, "test_gpu_check.py": 211,
           "test_new_workload.py": 200, "test_notebooks_more_clouds.py": 192,
           "test_docs_site.py": 191, "test_xla_mshnet.py": 229, "test_xla_lane.py": 128}


def pytest_collection_modifyitems(config, items):
    """The LONGEST modules first, longest first; the rest as collected (a stable sort)."""
    items.sort(key=lambda item: -LONGEST.get(item.path.name, 0))


@pytest.fixture(autouse=True)
def _no_platform_left_behind():
    """A test that leaves the fake `google.colab` imported, or a platform's variable set, makes
    every later test of its worker detect that platform (lib.runtime.platforms.detect_runtime):
    which
    tests share a worker changes from run to run, so it fails here, at the test that did it."""
    before = detect_runtime()
    yield
    after = detect_runtime()
    if after != before:
        left = [m for m in sys.modules if m.startswith("google.colab")]
        pytest.fail(f"this test left the runtime detected as {after!r} (was {before!r}): "
                    f"modules {left}, or a platform's variable in os.environ; undo it in teardown "
                    "(monkeypatch, or del sys.modules[...])", pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def _module_folders_go_with_it(request, tmp_path_factory):
    """The folders a module's fixtures made (tmp_path_factory.mktemp: trained runs, sample data,
    a served clone; up to 1.7 GB each) are removed when the module ends, not when the worker's
    whole session does: a passed test's tmp_path already goes as it ends (pyproject's
    tmp_path_retention_policy), and so, now, does a finished module's. A module with a failure
    keeps everything, to look into. (Whole modules run on one worker: `--dist loadscope`.)"""
    base = tmp_path_factory.getbasetemp()
    before, failed = set(base.iterdir()), request.session.testsfailed
    yield
    if request.session.testsfailed == failed:
        for path in set(base.iterdir()) - before:
            if path.is_symlink() or not path.is_dir():
                path.unlink(missing_ok=True)
            else:
                shutil.rmtree(path, ignore_errors=True)
