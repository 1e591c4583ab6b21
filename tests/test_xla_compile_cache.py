"""torch_xla's persistent cache in the run folder, as far as its CPU client allows
(lib/runs/compile_cache_xla.py). Each session is a new process: torch_xla's cache must
be set before the process compiles anything. What only a TPU shows (executables loaded, not
compiled, in the next session) is said in docs/moving-a-run.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xla
pytest.importorskip("torch_xla", reason="the XLA lane's environment has torch_xla")

from lib.runs import compile_cache  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SESSION = """
import json, sys
from lib.runs.compile_cache_xla import XlaCache
from lib.runs.folder import RunFolder
from lib.runtime import xla
from lib.runtime.device import Probe, choose_device
from lib.runtime.platforms import get_platform
from lib.training.loop import fit
from tests.test_train import loaders, make_task, strip

out, epochs, feed = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
cache = XlaCache(out, feed=feed)
cache.setup()
choice = choose_device("xla", get_platform("colab_tpu"),
                       Probe(xla_installed=True, xla_device_type="CPU"), environ={})
run = RunFolder(out, "toy", {"hidden": 16}, tensorboard=False, progress=False)
run.compile_cache = cache
task = make_task()
history = fit(task, *loaders(), choice, run, epochs)  # no loader workers: seconds
print(json.dumps({"history": strip(history), "failures": xla.cache_failures()}))
"""


def session(out: Path, epochs: int, feed=None) -> tuple[dict, list[str], str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PJRT_DEVICE="CPU")
    done = subprocess.run([sys.executable, "-c", SESSION, str(out), str(epochs),
                           json.dumps(feed)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    *lines, last = done.stdout.strip().splitlines()
    return json.loads(last), lines, done.stderr


def test_the_xla_cache_is_saved_checked_and_carried_as_far_as_the_cpu_client_allows(tmp_path):
    first, _, _ = session(tmp_path / "run", 1)
    tag = compile_cache.read_tag(tmp_path / "run", "xla")
    assert tag["device"] == "xla CPU" and tag["torch_xla"] and tag["graphs"] > 0
    assert compile_cache.problem(tmp_path / "run", "xla") is None  # each file as tagged
    kept = sorted(p.name for p in (tmp_path / "run" / "compile-cache" / "xla").iterdir())
    assert kept == sorted(tag["files"])
    shutil.copytree(tmp_path / "run", tmp_path / "fed")
    # The CPU client cannot load an executable: it is not handed one, and that is said once.
    second, lines, err = session(tmp_path / "run", 2)
    said = [ln for ln in lines if ln.startswith("compile cache")]
    assert len(said) == 1 and "CPU client cannot load the" in said[0], lines
    assert second["failures"] == 0 and "Failed to deserialize" not in err
    # Handed them anyway (what a TPU session does): the client's refusal is counted and
    # said once, and it compiles them; the numbers are the same either way.
    fed, lines, err = session(tmp_path / "fed", 2, feed=True)
    said = [ln for ln in lines if ln.startswith("compile cache")]
    assert fed["failures"] > 0
    assert "Deserializing serialized executable not supported" in err
    assert any("could not be loaded on this CPU client" in ln for ln in said), lines
    assert sum("could not be loaded" in ln for ln in said) == 1, said
    assert fed["history"] == second["history"] and second["history"][0] == first["history"][0]
    assert compile_cache.problem(tmp_path / "fed", "xla") is None  # saved again, whole
