"""One CI lane per hosted image (images.toml): its Python, exactly its pins, built with uv.

    python -m tests.lanes run [--keep] [IMAGE ...]  # build, test, remove each; two at a time
    python -m tests.lanes build [IMAGE ...]   # (re)build .lanes/<image> for each (all if none)
    python -m tests.lanes test [IMAGE ...]    # run each built lane's notebooks, two at a time
    python -m tests.lanes show                # the images, their platforms and requirements
    python -m tests.lanes lock [IMAGE ...]    # write requirements/images/<image>.txt (`make lock`)

A lane is a virtual environment with the image's Python (from pyenv or PATH: a missing one
fails, it is never skipped) and the image's pinned packages, and nothing the notebook's
bootstrap installs, so the bootstrap's install list is tested too. A kernelspec `ta-<image>`
lets papermill, run from the project's own environment, start the notebook's kernel in the
lane (tests/test_image_lanes.py).

Disk: each image brings its own CUDA torch stack (5-7 GB unpacked), and `run` (`make
test-lanes`) builds each lane just before its tests and removes it after them, so at most JOBS
lanes are on disk. They share one uv cache (.lanes/.uv-cache) whose files uv links into each
lane: CUDA libraries of the same version (cuDNN, cuBLAS, ... of torch 2.8, 2.9 and 2.10) are on
disk once however many lanes hold them (torch 2.8's lane and torch 2.10's: 9.5 GB together,
13.6 GB apart). The cache is kept through a run, so what two lanes share is downloaded and
unpacked once (torch 2.8 and its CUDA libraries for the Kaggle TPU and SageMaker lanes, the
CUDA libraries of torch 2.8-2.10 for four): the five lanes' builds, one after another, took
115 s and 157 s of CPU here, against 230 s and 330 s when each started from an empty cache.
When the run ends, every cache entry no lane left on disk links to is removed (`collect`):
19 GB for all five lanes until then. A failed lane is kept, to look into, as pytest keeps a
failed test's folder (`--keep` keeps every one).

The bootstrap installs what an image lacks at the versions of requirements/images/<image>.txt,
the image's bootstrap lock: what its requirements resolve to beside the image's pins, less what
the image itself brings. The lane installs them the same way, so it tests exactly that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "images.toml"
LOCKS = ROOT / "requirements" / "images"
LANES = Path(os.environ.get("TA_LANES_DIR", ROOT / ".lanes")).resolve()  # kernels start elsewhere
WORKLOADS = sorted(p.stem for p in (ROOT / "notebooks_src").glob("*.py"))


class LaneError(RuntimeError):
    """A lane cannot be built here; the message says which and what to do."""


def images(manifest: Path = MANIFEST) -> dict[str, dict]:
    """image name -> its entry in the manifest, checked for the fields the lanes use."""
    data = tomllib.loads(manifest.read_text())["images"]
    for name, image in data.items():
        missing = {"title", "platforms", "python", "pins", "source", "read"} - set(image)
        if missing:
            raise LaneError(f"{manifest.name}: image {name!r} lacks {sorted(missing)}")
    return data


def requirements(image: dict) -> list[str]:
    """What the lane installs: the image's pins exactly, then what it has at an unread version."""
    return [f"{name}=={version}" for name, version in image["pins"].items()] + list(
        image.get("unpinned", []))


def _runs(python: Path, version: str) -> bool:
    """True when `python` starts and is `version` (a pyenv shim of an inactive one is not)."""
    code = "import sys; print('%d.%d' % sys.version_info[:2])"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == version


def find_python(version: str, environ=os.environ) -> Path:
    """The interpreter for Python `version` ("3.13"): in pyenv's versions, else on PATH."""
    pyenv = Path(environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)
    on_path = shutil.which(f"python{version}", path=environ.get("PATH"))
    for python in [*candidates, *([Path(on_path)] if on_path else [])]:
        if _runs(python, version):
            return python
    raise LaneError(
        f"no Python {version} here (none under {pyenv}, no working python{version} on PATH): "
        f"the lanes of images on Python {version} cannot run. Fix: `pyenv install {version}` "
        f"(or put python{version} on PATH) and run `make test-lanes` again.")


def lane_dir(name: str) -> Path:
    return LANES / name


def lane_python(name: str) -> Path:
    return lane_dir(name) / "bin" / "python"


def kernel_name(name: str) -> str:
    return f"ta-{name}"


def jupyter_path() -> Path:
    """Give this as JUPYTER_PATH to find every lane's kernelspec."""
    return LANES / "share" / "jupyter"


def _uv() -> str:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not uv:
        raise LaneError("uv is not installed: run `make install` (uv is a dev dependency).")
    return uv


def build(name: str, image: dict) -> float:
    """(Re)build the lane of image `name` from nothing; return its wall time in seconds."""
    start = time.monotonic()
    python, dest = find_python(image["python"]), lane_dir(name)
    remove(name)
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")  # the image's Python, never a download
    # --seed: pip is in the lane as in the images, and the bootstrap installs with it.
    subprocess.run([_uv(), "venv", "--quiet", "--seed", "--python", str(python), str(dest)],
                   env=env, check=True)
    with CACHE_LOCK:  # not while `collect` removes what no lane links to yet
        subprocess.run([_uv(), "pip", "install", "--quiet", "--cache-dir", str(cache_dir()),
                        "--python", str(lane_python(name)), *requirements(image)], env=env,
                       check=True)
    spec = jupyter_path() / "kernels" / kernel_name(name) / "kernel.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    # uv writes no bytecode and this machine (CI's too) sets PYTHONDONTWRITEBYTECODE=1: every
    # kernel would compile torch's sources again (13 s of CPU each). The lane's kernels (and
    # what they start) write it once, beside the lane, removed with it; an image has its .pyc.
    spec.write_text(json.dumps({
        "argv": [str(lane_python(name)), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "env": {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(dest / ".pycache")},
        "display_name": f"{image['title']} stand-in (Python {image['python']})",
        "language": "python"}, indent=1))
    return time.monotonic() - start


def cache_dir() -> Path:
    """uv's cache for the lanes: the lanes' files are links to its files."""
    return LANES / ".uv-cache"


CACHE_LOCK = threading.Lock()


def collect(cache: Path | None = None) -> int:
    """Remove each unpacked wheel of uv's cache that no lane links to (no file of it has a
    second link); return the bytes freed. uv unpacks a wheel once into archive-v0/<id> and
    links its files into each venv; an entry removed here is downloaded again by the next
    install that needs it."""
    archive, freed = (cache or cache_dir()) / "archive-v0", 0
    with CACHE_LOCK:
        for entry in archive.iterdir() if archive.is_dir() else []:
            if entry.is_symlink() or not entry.is_dir():
                continue
            files = [f for f in entry.rglob("*") if f.is_file() and not f.is_symlink()]
            if all(f.stat().st_nlink == 1 for f in files):
                freed += sum(f.stat().st_size for f in files)
                shutil.rmtree(entry, ignore_errors=True)
    return freed


def remove(name: str) -> None:
    """The lane of image `name` and its kernelspec gone (nothing if it is not there); the cache
    entries it used stay for the next lane (`collect` removes them)."""
    shutil.rmtree(lane_dir(name), ignore_errors=True)
    shutil.rmtree(jupyter_path() / "kernels" / kernel_name(name), ignore_errors=True)


def resolve(requirements: list[str], python: str) -> dict[str, str]:
    """name -> version that uv resolves `requirements` to on Linux x86_64 (the hosted images)
    under Python `python`."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "requirements.in"
        source.write_text("\n".join(requirements) + "\n")
        out = subprocess.run([_uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
                              "--python-version", python, "--python-platform",
                              "x86_64-manylinux_2_28", str(source)],
                             capture_output=True, text=True, check=True)
    return dict(line.strip().split("==", 1) for line in out.stdout.splitlines() if "==" in line)


def lock(name: str, image: dict) -> Path:
    """Write requirements/images/<name>.txt: what the bootstrap adds to image `name`, pinned."""
    from lib.bootstrap import REQUIREMENTS

    brought = resolve(requirements(image), image["python"])
    wanted = resolve(requirements(image) + sorted(set(REQUIREMENTS.values())), image["python"])
    LOCKS.mkdir(parents=True, exist_ok=True)
    path = LOCKS / f"{name}.txt"
    path.write_text(
        f"# What the bootstrap installs on the {image['title']} image (Python {image['python']}, "
        f"pins of images.toml read {image['read']}),\n# beside what the image brings; written by "
        "`make lock`, tested by the image's lane.\n"
        + "".join(f"{k}=={v}\n" for k, v in sorted(wanted.items()) if k not in brought))
    return path


def installed(name: str) -> dict[str, str]:
    """Distribution name (normalised) -> version, as the lane's Python sees them."""
    code = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower()"
            ".replace('_', '-'): d.version for d in m.distributions()}))")
    out = subprocess.run([str(lane_python(name)), "-c", code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def notebooks(image: dict) -> list[tuple[str, str]]:
    """(platform, workload) of each notebook a lane runs: its platforms x the workloads
    lib/notebooks/render.py `lane_workloads` names (every workload when it names none), the
    README's table is written from the same."""
    from lib.notebooks.render import lane_workloads  # jupytext and the rest: not at import

    return [(p, w) for p in image["platforms"] for w in lane_workloads(image, p) or WORKLOADS]


def longest_first(names: list[str], known: dict[str, dict]) -> list[str]:
    """The lanes in the order that ends soonest on `jobs` workers: longest first, by the
    notebooks a lane runs (`notebooks`), three times as long on an XLA image
    (every graph compiled on the CPU). At the last measured run (a clean clone's `.ci/run`, each
    lane with its build, beside the XLA lane): kaggle_gpu (5 notebooks) 347 s, colab_gpu (4)
    313 s, colab_tpu (1, XLA) 296 s, kaggle_tpu (2, XLA) 280 s, sagemaker (2) 150 s; in this
    order the two workers ended after 743 s and 643 s, where the best split ends after 726 s."""
    def cost(name: str) -> int:
        image = known[name]
        return len(notebooks(image)) * (3 if "torch_xla" in image["pins"] else 1)
    return sorted(names, key=cost, reverse=True)


def pytest_lane(name: str, log: Path) -> int:
    """Run lane `name`'s notebooks (tests/test_image_lanes.py) in one pytest; its exit status."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "lane",
           "--durations=10", "tests/test_image_lanes.py"]
    env = dict(os.environ, TA_LANE=name, TA_LANES_DIR=str(LANES))
    with log.open("a") as out:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode


def run(names: list[str], known: dict[str, dict], jobs: int = 2, fresh: bool = True,
        keep: bool = False, build=build, check=pytest_lane, remove=remove) -> int:
    """Each lane: built from nothing (`fresh`; else the one there is used), its notebooks run in
    one pytest (a lane's notebooks share its environment, so they run in order), then removed
    unless it failed or `keep`; `jobs` lanes at a time, in the order given. Each lane's output
    and wall time as it ends, then one summary line; 0 when every lane passed. The cache is
    collected once, after the last lane (module docstring)."""
    waiting, failed, lock = list(names), [], threading.Lock()
    logs = LANES / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def one(name: str) -> int:
        log = logs / f"{name}.log"
        log.write_text("")
        if fresh:
            try:
                seconds = build(name, known[name])
            except Exception as err:  # a full disk too: the lane fails, and says why
                log.write_text(f"lane {name}: the build failed: {err}\n")
                return 1
            with log.open("a") as out:
                out.write(f"lane {name}: built in {seconds:.0f} s\n")
        return check(name, log)

    def worker() -> None:
        while True:
            with lock:
                if not waiting:
                    return
                name = waiting.pop(0)
            start = time.monotonic()
            rc = one(name)
            if not (rc or keep):
                remove(name)
            with lock:
                print(f"===== lane {name}: exit {rc} after {time.monotonic() - start:.0f} s"
                      + (", removed" if not (rc or keep) else "") + " =====")
                print((logs / f"{name}.log").read_text(), flush=True)
                if rc:
                    failed.append(name)

    threads = [threading.Thread(target=worker) for _ in range(max(1, min(jobs, len(names))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    collect()
    print(f"lanes: {len(names) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)}: kept in {LANES} to look into)" if failed else ""))
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    known = images()
    if argv[:1] == ["show"]:
        for name, image in known.items():
            print(f"{name}: Python {image['python']}, platforms {', '.join(image['platforms'])}:"
                  f" {' '.join(requirements(image))}")
        return 0
    if argv[:1] not in (["build"], ["test"], ["run"], ["lock"]):
        print(__doc__.split("\n\n")[1])
        return 2
    keep = "--keep" in argv
    names = [a for a in argv[1:] if a != "--keep"] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown image(s) {unknown}; images.toml has {sorted(known)}")
        return 2
    if argv[0] in ("test", "run"):
        return run(longest_first(names, known), known, int(os.environ.get("JOBS", "2")),
                   fresh=argv[0] == "run", keep=keep or argv[0] == "test")
    if argv[0] == "lock":
        for name in names:
            print(f"lane {name}: {lock(name, known[name]).relative_to(ROOT)}")
        return 0
    for name in names:
        print(f"lane {name}: built in {build(name, known[name]):.0f} s at {lane_dir(name)}",
              flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except LaneError as err:
        sys.exit(f"lanes: {err}")
