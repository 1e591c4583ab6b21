"""What a notebook's generated bootstrap cell calls once the project is on `sys.path`.

On Colab, Kaggle and the other clouds (lib/runtime/clouds.py): install only the packages the runtime
lacks (never torch, which the runtime ships and a reinstall would break) and, on Colab, mount
Drive so checkpoints survive a disconnect. A Python or torch too old for the project stops
with one line that names the fix on that service (`python_problem`, `torch_problem`).
Locally and in CI: nothing but, on a Mac, the MPS fallback switch. This module must not import
torch: `PYTORCH_ENABLE_MPS_FALLBACK` only works if set before torch is imported.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from lib.base.errors import UserError
from lib.runtime import clouds, environment

# --- Too old for this project: checked first, before a module that needs 3.11 is imported ---
MIN_PYTHON = (3, 11)  # tomllib, and what the lanes test (pyproject: requires-python)
# torch.amp.GradScaler(device) (lib/training/backend.py) is the device-generic class of torch >= 2.3
# (the CUDA-only one was deprecated in pytorch/pytorch#126527, 2024-05).
MIN_TORCH = (2, 3)


class EnvironmentTooOld(UserError, RuntimeError):
    """This kernel's Python or torch is older than the project needs."""


def python_problem(version: tuple[int, int], environ=os.environ) -> str | None:
    """One line when `version` is below MIN_PYTHON: which, and the fix on this service."""
    if tuple(version[:2]) >= MIN_PYTHON:
        return None
    have, need = ".".join(map(str, version[:2])), ".".join(map(str, MIN_PYTHON))
    runtime = clouds.detect(environ)
    if runtime == "lightning":  # older Studios run 3.10; no other env may be created there
        fix = ("start a new Studio (newer Studios run Python 3.12): a Studio allows no conda "
               "environment or venv beside its base env `cloudspace`")
    elif runtime == "studiolab":  # its old `default` env is Python 3.9
        fix = ("build the environment of environment.yml at the repository root (Studio Lab "
               "offers it when you clone the whole repository; or in a terminal `conda env "
               "create -f environment.yml`), then Kernel > Change Kernel > train-anywhere")
    else:
        fix = ("switch the kernel to a Python 3.11+ one (SageMaker: the sagemaker-distribution "
               "image; elsewhere `conda env create -f environment.yml` at the repository root)")
    return f"this kernel runs Python {have}, the project needs {need} or newer; fix: {fix}."


if problem := python_problem(sys.version_info[:2]):
    raise EnvironmentTooOld(problem)

from lib.runtime.platforms import (  # noqa: E402
    DRIVE_ENV,
    detect_runtime,
    drive_mounted,
    drive_root,
    get_platform,
)

# --- end of the too-old checks' first half (torch: `torch_problem`, called by `prepare`) ---

# import name -> pip requirement; torch, torchvision and torch_xla are the runtime's own.
REQUIREMENTS = {
    "tqdm": "tqdm>=4.66", "matplotlib": "matplotlib>=3.7", "tensorboard": "tensorboard>=2.14",
    "einops": "einops>=0.7", "scipy": "scipy>=1.10", "snntorch": "snntorch>=0.9",
    "tonic": "tonic>=1.5", "lion_pytorch": "lion-pytorch>=0.2", "aedat": "aedat>=2.0",
    "ipywidgets": "ipywidgets>=8",
}
# TRACKERS' clients, installed only when named (lib/runs/trackers.py)
TRACKER_CLIENTS = {"wandb": {"wandb": "wandb>=0.21"}, "mlflow": {  # SQLite: the last two
    "mlflow": "mlflow-skinny>=3", "sqlalchemy": "sqlalchemy>=2", "alembic": "alembic>=1.13"}}


def missing_requirements(find_spec=importlib.util.find_spec, trackers=()) -> list[str]:
    tables = [REQUIREMENTS, *(TRACKER_CLIENTS.get(name, {}) for name in trackers or ())]
    return [req for table in tables for name, req in table.items() if find_spec(name) is None]


def pip_command(requirements: list[str], constraints: Path | None = None) -> list[str]:
    # --no-compile: Python compiles what a notebook imports, not all pip adds (half its time)
    pinned = ["-c", str(constraints)] if constraints else []
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", *pinned,
            *requirements]


def image_entry(platform_name: str, root: Path) -> tuple[str, dict] | None:
    """(name, entry) of the hosted image in images.toml that `platform_name` is tested on."""
    import tomllib  # Python 3.11+; every hosted image has it

    manifest = Path(root) / "images.toml"
    if not manifest.is_file():
        return None
    images = tomllib.loads(manifest.read_text())["images"]
    return next(((n, i) for n, i in images.items() if platform_name in i["platforms"]), None)


def image_lock(platform_name: str, root: Path) -> Path | None:
    """requirements/images/<image>.txt: the exact versions of what the bootstrap installs on
    this platform's image, as its CI lane last passed with them (`make lock` writes it)."""
    found = image_entry(platform_name, root)
    lock = Path(root) / "requirements" / "images" / f"{found[0]}.txt" if found else None
    return lock if lock and lock.is_file() else None


def absent_pins(lock: Path, version=importlib.metadata.version) -> list[str]:
    """The `name==version` lines of `lock` whose package is not installed here: pins for what
    pip will add, never a change to a package the runtime already has."""
    pins = []
    for line in lock.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" not in line:
            continue
        try:
            version(line.split("==")[0].strip())
        except importlib.metadata.PackageNotFoundError:
            pins.append(line)
    return pins


def install_missing(run=subprocess.run, find_spec=importlib.util.find_spec,
                    lock: Path | None = None, version=importlib.metadata.version,
                    trackers=()) -> list[str]:
    """pip-install what is missing, at the versions of `lock` (those the image's lane tested),
    then the clients `trackers` need: when those cannot be installed (Kaggle with its internet
    off) one line says so and the notebook goes on; return the requirements installed."""
    missing = missing_requirements(find_spec)
    clients = missing_requirements(find_spec, trackers)[len(missing):]
    if not missing + clients:
        print("bootstrap: every requirement is already installed")
        return []
    constraints = None
    if lock is not None:
        constraints = Path(tempfile.mkdtemp()) / "constraints.txt"
        constraints.write_text("\n".join(absent_pins(lock, version)) + "\n")
    tested = f" (at the versions its CI lane passed with: {lock.name})" if lock else ""
    for wanted, required in ((missing, True), (clients, False)):
        cmd = pip_command(wanted, constraints)
        if wanted:
            print("bootstrap: installing what this runtime lacks" + tested + ":",
                  shlex.join(["pip", *cmd[3:]]))
        if wanted and getattr(run(cmd, check=required), "returncode", 0):
            print(f"bootstrap: {', '.join(wanted)} could not be installed (no network? on "
                  "Kaggle: Settings -> Internet on); the trackers that need them say so")
            clients = []
    return missing + clients


def mount_drive() -> Path:
    """Mount Google Drive (Colab only) where lib.runtime.platforms expects it."""
    from google.colab import drive

    root = drive_root()
    drive.mount(str(root))
    return root


def drive_line(environ=os.environ) -> str:
    """Mount Drive only where someone can answer its authorisation request: already mounted,
    use it; TA_DRIVE=off (a VM run by `colab exec`, papermill: no browser to answer, the mount
    would wait and fail; google/colab/drive.py asks the front end first), keep run folders on
    the VM's disk; else (a browser session) mount it. One line saying which."""
    if drive_mounted():
        return f"bootstrap: Google Drive already mounted at {drive_root()}: run folders there"
    if environ.get(DRIVE_ENV) == "off":
        return ("bootstrap: Drive not mounted (TA_DRIVE=off: no browser here to authorise it); "
                "run folders stay on this VM's disk, lost with it unless downloaded")
    return f"bootstrap: Google Drive mounted at {mount_drive()}"


def xla_version_problem(version=importlib.metadata.version) -> str | None:
    """torch_xla X.Y needs torch X.Y; a mismatch dies at import with 'undefined symbol'."""
    try:
        torch_v, xla_v = version("torch"), version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return None
    if torch_v.split(".")[:2] != xla_v.split(".")[:2]:
        return (f"torch {torch_v} and torch_xla {xla_v} do not match (torch_xla X.Y needs "
                "torch X.Y); importing torch_xla will fail with 'undefined symbol'. Fix: "
                "Runtime > Disconnect and delete runtime, and do not `pip install torch` on a "
                "TPU runtime.")
    return None


def tested_image_note(platform_name: str, root: Path, version=importlib.metadata.version,
                      python: str | None = None) -> str:
    """One line: the hosted image (images.toml) this platform's notebooks were tested on, and
    any version here that differs from it, the first suspect when something breaks."""
    python = python or f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = image_entry(platform_name, root)
    if found is None:
        return ""
    image = found[1]
    here = {"Python": python}
    for name in ("torch", "torchvision", "torch_xla"):
        if name in image["pins"]:
            try:
                here[name] = version(name).split("+")[0]
            except importlib.metadata.PackageNotFoundError:
                here[name] = "absent"
    tested = {"Python": image["python"], **{k: image["pins"][k] for k in here if k != "Python"}}
    differ = [f"{k} {here[k]} (tested: {tested[k]})" for k in here if here[k] != tested[k]]
    where = f"the {image['title']} image as read {image['read']}"
    if not differ:
        return f"bootstrap: this runtime matches {where} (Python {python}, torch {here['torch']})"
    return (f"bootstrap: this runtime differs from {where}: {', '.join(differ)}; if something "
            "fails, that is the first suspect (README: Platforms as tested)")


def torch_problem(runtime: str, version=importlib.metadata.version) -> str | None:
    """One line when torch is missing or older than MIN_TORCH, with this runtime's fix (read
    without importing torch: an old one may fail on import already)."""
    try:
        have = version("torch")
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have is not None:
        parts = have.split("+")[0].split(".")
        if (int(parts[0]), int(parts[1])) >= MIN_TORCH:
            return None
    need = ".".join(map(str, MIN_TORCH))
    if runtime == "paperspace":  # its default image ships torch 2.1.1 (more-clouds.md, 3)
        # cu126 keeps kernels for its M4000 / P4000 (sm_52 / sm_61) as for an RTX or A4000
        fix = ('`pip install "torch==2.14.1" "torchvision==0.29.1" --index-url '
               "https://download.pytorch.org/whl/cu126`, then Kernel > Restart Kernel "
               "(again in each new session: installs do not outlive the container)")
    elif runtime == "modal":  # its default image is unpinned: torch is what the build got
        fix = ("`%pip install -U torch torchvision` and restart the kernel (Modal's default "
               "image is unpinned; a pip install lasts as long as this container)")
    elif runtime == "lightning":  # installs go into the base env and persist
        fix = (f"`pip install -U torch torchvision` in the Studio's base conda env "
               f"`{clouds.LIGHTNING_ENV}` (kept across restarts), then restart the kernel")
    elif runtime == "studiolab":
        fix = ("use the train-anywhere kernel built from environment.yml (Kernel > Change "
               "Kernel), or `%pip install torch torchvision` and restart the kernel")
    else:
        fix = '`%pip install -U torch torchvision` and restart the kernel'
    what = f"torch {have}" if have else "no torch"
    return f"this kernel has {what}; the project needs torch {need} or newer; fix: {fix}."


def lightning_env_line(environ=os.environ, prefix: str | None = None,
                       base_prefix: str | None = None) -> str:
    """One line on where packages go in a Lightning Studio: its base conda env `cloudspace`,
    the only one it allows (no other conda env, no venv); a warning when this kernel is not
    in it, since installs elsewhere are not what the Studio keeps."""
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    env = environ.get("CONDA_DEFAULT_ENV", "")
    if prefix != base_prefix:
        where = f"a virtual environment at {prefix}"
    elif env and env != clouds.LIGHTNING_ENV:
        where = f"the conda env {env!r}"
    else:
        return (f"bootstrap: Lightning Studio: packages go into the base conda env "
                f"`{clouds.LIGHTNING_ENV}`, kept across restarts and machine switches")
    return (f"bootstrap: WARNING this kernel runs in {where}, but a Lightning Studio allows only "
            f"its base conda env `{clouds.LIGHTNING_ENV}` (no other environments or venvs): "
            "pick the Studio's default Python kernel, or installs may not survive a restart")


def modal_lines(runtime: str, environ=os.environ, version=importlib.metadata.version) -> list[str]:
    """Modal: the torch its unpinned default image brought (read here, not assumed), and the
    one line on attaching a Volume when none is (`lib.runtime.clouds.advice`)."""
    lines = []
    if runtime == "modal":
        try:
            have = version("torch")
        except importlib.metadata.PackageNotFoundError:
            have = "absent"
        lines.append(f"bootstrap: Modal's default image is unpinned: torch {have} read here")
    if advice := clouds.advice(runtime, environ):
        lines.append(f"bootstrap: {advice}")
    return lines


def prepare(platform_name: str, root: Path, environ=os.environ,
            mac: bool | None = None, trackers=()) -> str:
    """Set up this runtime for a `platform_name` notebook (and its TRACKERS); returns the
    runtime detected. `mac`: whether this is a Mac (default: sys.platform)."""
    platform = get_platform(platform_name)
    os.chdir(root)  # relative defaults (./data, ./runs) are relative to the project
    runtime = detect_runtime(environ)
    mac = sys.platform == "darwin" if mac is None else mac
    if runtime == "local" and mac:
        # Ops MPS lacks then run on the CPU (slowly) instead of raising NotImplementedError.
        environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
        print("bootstrap: a Mac: PYTORCH_ENABLE_MPS_FALLBACK=1 (ops missing on MPS run on the "
              "CPU)")
    if runtime != "local" and (problem := torch_problem(runtime)):
        raise EnvironmentTooOld(problem)  # before pip adds packages beside a torch to replace
    if runtime in ("colab", "kaggle", *clouds.RUNTIMES):
        install_missing(lock=image_lock(platform_name, root), trackers=trackers)
    if runtime == "colab":  # never "vertex" (Colab Enterprise, Workbench): no Drive there
        print(drive_line(environ))
    if runtime == "lightning":
        print(lightning_env_line(environ))
    for line in modal_lines(runtime, environ):
        print(line)
    if platform.accelerator == "xla" and (problem := xla_version_problem()):
        raise RuntimeError(problem)
    hosted = ("colab", "kaggle", *clouds.RUNTIMES)
    if runtime in hosted and (note := tested_image_note(platform_name, root)):
        print(note)
    print(f"bootstrap: {platform.title} notebook on the {runtime} runtime, project at {root}")
    return runtime


# --- What the notebook's bootstrap cell calls once it has found or cloned the project ------
class BootstrapError(UserError, RuntimeError):
    """The project this notebook needs cannot be used as it is (one line, the fix)."""


def _git(*args: str, cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        said = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise BootstrapError(f"`git {' '.join(args)}` failed in {cwd} ({said}); run this cell "
                             "again, or delete that folder to clone afresh.")
    return out.stdout.strip()


def move_clone(clone: Path, ref: str, url: str) -> str:
    """Move an earlier clone (a fresh runtime's, from another notebook) to `ref`; what was
    done, for the bootstrap's line. A clone with local changes is refused, never reset."""
    if _git("status", "--porcelain", "--untracked-files=no", cwd=clone):
        raise BootstrapError(f"the clone at {clone} has local changes, so it cannot be moved to "
                             f"{ref}: commit or stash them (git -C {clone} stash), or delete the "
                             "folder, and run this cell again.")
    before = _git("rev-parse", "HEAD", cwd=clone)
    _git("fetch", "--quiet", "--depth", "1", url, ref, cwd=clone)
    _git("checkout", "--quiet", "--detach", "FETCH_HEAD", cwd=clone)
    after = _git("rev-parse", "HEAD", cwd=clone)
    return "already there" if after == before else f"moved from {before[:12]}"


def start(platform_name: str, root: Path, project: dict, how: str | None,
          trackers=None) -> str:
    """The bootstrap cell's work once `lib` imports from `root`: move an earlier clone to the
    rendered ref (`how` "clone"; then the moved library runs the rest), check the library is
    the version the notebook was rendered for, say which, and `prepare` the runtime (with the
    clients its TRACKERS need). `how`: None (the checkout the notebook was opened from),
    "cloned", or what `move_clone` did."""
    import lib

    root = Path(root)
    repository, ref = project["repository"], project["ref"]
    if how == "clone":
        how = move_clone(root, ref, f"https://github.com/{repository}.git")
        if how != "already there":  # import the library as it is at `ref` now
            for name in [m for m in sys.modules if m == "lib" or m.startswith("lib.")]:
                del sys.modules[name]
            importlib.invalidate_caches()
            from lib import bootstrap as moved

            return moved.start(platform_name, root, project, how, trackers)
    if getattr(lib, "__version__", None) != project["version"]:
        raise BootstrapError(
            f"this notebook was rendered for train-anywhere {project['version']}, but the "
            f"library at {root} is {getattr(lib, '__version__', 'older than 0.1.0')}: open the "
            "notebook rendered there (notebooks/<platform>/), or restart the kernel if another "
            "version was imported before.")
    commit = environment.commit(root) or "no git"
    source = "the checkout" if how is None else f"{repository}@{ref} ({how})"
    print(f"bootstrap: train-anywhere {lib.__version__} at commit {commit} from {source} at "
          f"{root}")
    return prepare(platform_name, root, trackers=trackers or ())


def finish(runtime: str, out_dir: Path | None = None) -> None:
    """End of a notebook: name what it wrote in `out_dir` (not the hidden bookkeeping files),
    and on Colab flush Drive's cache and unmount, so nothing is lost."""
    if out_dir is not None:
        print(f"outputs in {out_dir}:",
              *sorted(p.name for p in Path(out_dir).iterdir() if not p.name.startswith(".")))
    if runtime == "colab" and drive_mounted():
        from google.colab import drive

        # the one documented push of what DriveFS has not uploaded yet (lib/base/durable.py)
        drive.flush_and_unmount()
        print("Drive flushed and unmounted: every checkpoint and result is on Drive.")


def show_tensorboard(logdir, runtime: str) -> None:
    """Inline TensorBoard on Colab; elsewhere say how to open it (Kaggle has no inline one);
    nothing when TRACKERS left TensorBoard out."""
    if Path(logdir).is_dir() and runtime == "colab":
        from IPython import get_ipython

        ip = get_ipython()
        ip.run_line_magic("load_ext", "tensorboard")
        ip.run_line_magic("tensorboard", f"--logdir {shlex.quote(str(logdir))}")
    elif Path(logdir).is_dir():
        print(f"TensorBoard logs: {logdir}  (view with: tensorboard --logdir {logdir})")
