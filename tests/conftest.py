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

    # xdist (3.6 on) hands loadscope's modules out most tests first, not in collection order:
    # the LONGEST order below would be undone (a notebook module of two tests started last).
    config.option.loadscopereorder = False
    if getattr(config.option, "numprocesses", 0) and not hasattr(config, "workerinput"):
        return  # xdist's controller runs no test
    folder = Path(tempfile.mkdtemp(prefix="ta-kernels-"))
    if kernel_zygote.start(folder) is None:
        os.rmdir(folder)
    else:
        import atexit

        atexit.register(shutil.rmtree, folder, True)


# xdist's `--dist loadscope` hands whole modules to the workers in collection order (with
# `loadscopereorder` off: pytest_configure); one of minutes handed out last ends its lane
# minutes after the others (the XLA lane's MSHNet module started halfway: 176 s for the lane
# where longest-first took 168 s, the lane alone on a 2-core machine). So the modules that took
# longest are collected first, longest first: their seconds (every test's setup, call and
# teardown, `--durations=0`) on the last measured lanes, round seven's ninth session, the main
# lane's the mean of two runs. One table for both lanes: a module is in one of them (the bench
# smoke tests in both: its main-lane seconds).
LONGEST = {"test_notebooks_drive.py": 207, "test_kill_resume.py": 178, "test_docs_site.py": 115,
           "test_sweep_remote.py": 90, "test_notebooks_clouds.py": 87,
           "test_compile_cache.py": 81, "test_notebooks_more_clouds.py": 78,
           "test_carry_journey.py": 78, "test_notebooks_optimizer_study.py": 75,
           "test_gpu_check.py": 73, "test_distributed.py": 65, "test_sweep.py": 64,
           "test_kaggle_sessions.py": 63, "test_notebooks_fashion.py": 49,
           "test_bench_smoke.py": 42, "test_notebooks_mshnet.py": 41,
           "test_new_workload.py": 41, "test_spiking_kernels.py": 37,
           "test_notebooks_mamba_spike.py": 35, "test_kernel_zygote.py": 34,
           "test_first_use.py": 32, "test_bootstrap_clone.py": 31,
           "test_tracking_journey.py": 31,
           "test_xla_mshnet.py": 116, "test_xla_lane.py": 70, "test_xla_lif_scan.py": 30,
           "test_xla_mamba_spike.py": 29, "test_xla_optimizer_study.py": 26,
           "test_xla_compile_cache.py": 19}


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
