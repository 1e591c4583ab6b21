"""A user's copy of the repository, for tests that act as that user (`train-anywhere new`, the
guide): the files git would give them, and a record of which files they changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=user", "-c", "user.email=user@example.com",
                           *args], cwd=root, capture_output=True, check=True, text=True).stdout


def copy_repository(dest: Path, *only: str) -> Path:
    """A clone as the user has it: the repository's files (tracked ones, and new ones not
    ignored: no virtual environments, runs or data) in a git repository at `dest` (ruff and
    git then ignore what .gitignore says, as in a clone). `only`: just these paths (a test
    that needs a few folders copies a tenth of the time)."""
    listed = git(ROOT, "ls-files", "-co", "--exclude-standard", "-z", "--", *only).split("\0")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "the repository as cloned")
    return dest


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under `root` (caches left out)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and ".pytest_cache" not in path.parts:
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """Files added, removed or edited between two snapshots."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def user_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell has: nothing pointing at this checkout's `lib`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def run(root: Path, *args: str, env: dict | None = None, timeout: float = 600,
        ) -> subprocess.CompletedProcess:
    """A command typed in the user's copy: `train-anywhere` is `python -m lib` (its console
    script runs lib.cli.main:main), `python` the Python running the tests."""
    if args[0] == "train-anywhere":
        args = (sys.executable, "-m", "lib", *args[1:])
    elif args[0] == "python":
        args = (sys.executable, *args[1:])
    return subprocess.run(list(args), cwd=root, env=env or user_env(), capture_output=True,
                          text=True, timeout=timeout)


# What importing a workload and checking its parameters must not load (the contract's rule,
# lib/workloads/__init__.py): the command line and the notebook builder do both, and never train.
HEAVY = ("torch", "torchvision", "tonic", "snntorch", "numpy", "matplotlib")
_IMPORTS = f"""
import json, sys
from lib import workloads
HEAVY, loaded, found = {HEAVY!r}, set(), {{}}
def newly():
    new = [m for m in HEAVY if m in sys.modules and m not in loaded]
    loaded.update(new)
    return new
found["lib.workloads"] = newly()
for name in workloads.names():
    face = workloads.get(name)
    face.config.from_params({{"PLATFORM": "local", **face.tiny}}).check_micro_batch()
    found[name] = newly()
print(json.dumps(found))
"""


def heavy_imports(root: Path) -> dict[str, list[str]]:
    """Each workload of the repository at `root` -> the HEAVY modules that `get` and a check
    of its parameters (`from_params`, `check_micro_batch`: what `train-anywhere run` does) first
    loaded, all in one fresh process, in `names()` order ("lib.workloads": the contract's own)."""
    done = run(root, "python", "-c", _IMPORTS, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])
