"""One CI lane per hosted image (images.toml): its Python, exactly its pins, built with uv.

    python -m tests.lanes build [IMAGE ...]   # (re)build .lanes/<image> for each (all if none)
    python -m tests.lanes test [IMAGE ...]    # run each lane's notebooks, two lanes at a time
    python -m tests.lanes show                # the images, their platforms and requirements
    python -m tests.lanes lock [IMAGE ...]    # write requirements/images/<image>.txt (`make lock`)

A lane is a virtual environment with the image's Python (from pyenv or PATH: a missing one
fails, it is never skipped) and the image's pinned packages, and nothing the notebook's
bootstrap installs, so the bootstrap's install list is tested too. It is rebuilt from
nothing on every `make test-lanes` (uv links from its cache: seconds once downloaded). A
kernelspec `ta-<image>` lets papermill, run from the project's own environment, start the
notebook's kernel in the lane (tests/test_image_lanes.py).

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
    shutil.rmtree(dest, ignore_errors=True)
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")  # the image's Python, never a download
    # --seed: pip is in the lane as in the images, and the bootstrap installs with it.
    subprocess.run([_uv(), "venv", "--quiet", "--seed", "--python", str(python), str(dest)],
                   env=env, check=True)
    subprocess.run([_uv(), "pip", "install", "--quiet", "--python", str(lane_python(name)),
                    *requirements(image)], env=env, check=True)
    spec = jupyter_path() / "kernels" / kernel_name(name) / "kernel.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({
        "argv": [str(lane_python(name)), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"{image['title']} stand-in (Python {image['python']})",
        "language": "python"}, indent=1))
    return time.monotonic() - start


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


def longest_first(names: list[str], known: dict[str, dict]) -> list[str]:
    """The lanes in the order that ends soonest on `jobs` workers: longest first. XLA images
    compile every graph on the CPU (colab_tpu 981 s, kaggle_tpu 885 s, the others 124-400 s
    at the last measured run), then by how many notebooks a lane runs."""
    def cost(name: str) -> tuple[bool, int, int]:
        image = known[name]
        return ("torch_xla" in image["pins"], len(image.get("workloads", WORKLOADS)),
                len(image["platforms"]))
    return sorted(names, key=cost, reverse=True)


def test(names: list[str], jobs: int = 2) -> int:
    """One pytest process per lane (a lane's notebooks share its environment, so they run in
    order), `jobs` lanes at a time; each lane's output and wall time, then one summary line."""
    waiting, running, failed = list(names), {}, []
    logs = LANES / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                name = waiting.pop(0)
                log = (logs / f"{name}.log").open("w")
                cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "lane",
                       "tests/test_image_lanes.py"]
                env = dict(os.environ, TA_LANE=name, TA_LANES_DIR=str(LANES))
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                        stderr=subprocess.STDOUT)
                running[name] = (proc, log, time.monotonic())
            time.sleep(1)
            for name, (proc, log, start) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[name]
                print(f"===== lane {name}: exit {proc.returncode} after "
                      f"{time.monotonic() - start:.0f} s =====")
                print((logs / f"{name}.log").read_text(), flush=True)
                if proc.returncode:
                    failed.append(name)
    finally:  # interrupted: stop the lanes still running
        for proc, log, _ in running.values():
            proc.terminate()
            log.close()
    print(f"lanes: {len(names) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    known = images()
    if argv[:1] == ["show"]:
        for name, image in known.items():
            print(f"{name}: Python {image['python']}, platforms {', '.join(image['platforms'])}:"
                  f" {' '.join(requirements(image))}")
        return 0
    if argv[:1] not in (["build"], ["test"], ["lock"]):
        print(__doc__.split("\n\n")[1])
        return 2
    names = argv[1:] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown image(s) {unknown}; images.toml has {sorted(known)}")
        return 2
    if argv[0] == "test":
        return test(longest_first(names, known), int(os.environ.get("JOBS", "2")))
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
