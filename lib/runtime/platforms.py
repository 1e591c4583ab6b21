"""Platform profiles (what each rendered notebook targets), runtime detection, and each
runtime's storage roles and session limit.

A profile says what a platform *should* have; `lib.runtime.device` decides what the machine really
has. `storage(runtime)` says where things live there: *scratch* (downloads, unpacked data,
caches: fast, gone with the session), *durable* (run folders: kept), *inputs* (read-only
folders the user attached). `session_limit_hours` is the hard limit a session runs under.
`lib.session` reads these once; nothing else asks which platform it is on.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lib.base.errors import ConfigError
from lib.runtime.clock import Clock

_IMPORTED_AT = time.time()

DEVICE_CHOICES = ("auto", "cuda", "xla", "mps", "cpu")  # DEVICE: "auto" or a device kind
ANY = "any"  # the local notebook's accelerator: whatever this machine has, CUDA > MPS > CPU
# Platforms renamed: PLATFORM = an old name is refused in one line naming the new one (an
# alias would record two names for one notebook in sessions.jsonl and sweeps).
RENAMED = {"local_mps": "local"}
DRIVE_MOUNT_ENV = "TA_COLAB_DRIVE"  # where Drive is mounted; tests point it at a temp dir
KAGGLE_ROOT_ENV = "TA_KAGGLE_ROOT"  # where /kaggle is; the Kaggle stand-ins point it elsewhere
COLAB_CONTENT_ENV = "TA_COLAB_CONTENT"  # Colab's VM disk (/content); tests point it elsewhere
DRIVE_ENV = "TA_DRIVE"  # "off": never mount Drive (no browser here to authorise it)
SESSION_HOURS_ENV = "TA_SESSION_HOURS"  # shortens the session limit (tests; a user's own cap)
SESSION_STARTED_ENV = "TA_SESSION_STARTED"  # the session's start (epoch s), for its children
KAGGLE_OUTPUT_GB = 20.0  # what a version keeps of /kaggle/working (kaggle.com/docs/notebooks)


@dataclass(frozen=True)
class Platform:
    """What a platform notebook targets: runtime, accelerator, defaults and badges."""

    name: str
    title: str
    runtime: str  # "colab" | "kaggle" | "local" | lib.runtime.clouds.RUNTIMES
    accelerator: str  # "cuda" | "xla" | "mps" | ANY (this machine: what it has, lib.runtime.device)
    gpu: str  # marketing name shown to users, e.g. "Tesla T4"
    session_hours: float | None  # hard session limit, for the ETA warning
    num_workers: int
    devices: int = 1
    # A workload's default batch (its config's BATCH_SIZES, per accelerator, sized for 16 GB:
    # a T4 or P100, a v5e chip's HBM) times this: 0.5 for the 8 GB GPUs of Paperspace's free tier.
    batch_scale: float = 1.0
    status: str = ""  # said beside the badge, e.g. that the hardware is retired


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in [
        Platform("colab_t4", "Colab T4", "colab", "cuda", "Tesla T4", 12.0, 2),
        # Colab's TPUs are single-chip since v2-8 retired (2025-09): v5e-1 (free, 16 GB HBM)
        # and v6e-1 (32 GB); both train at BATCH_SIZES["xla"] on one chip, bf16 autocast, no
        # scaler (colabtools#5566). Kaggle's TpuV5E8: 8 chips, that batch per chip, bf16.
        Platform("colab_tpu", "Colab TPU", "colab", "xla", "TPU v5e-1 / v6e-1", 12.0, 2),
        # Kaggle has retired its P100s: a notebook asking for one runs on a T4 (lib.runtime.device
        # says so); the notebook stays for the sm_60 preflight and for older pushes.
        Platform("kaggle_p100", "Kaggle P100", "kaggle", "cuda", "Tesla P100", 12.0, 2,
                 status="retired on Kaggle: runs on a T4"),
        Platform("local", "Local (this machine: CUDA, MPS or CPU)", "local", ANY,
                 "this machine's GPU or CPU", None, 0),
        # Multi-device: one process per device, BATCH_SIZE per device.
        Platform("kaggle_t4x2", "Kaggle T4 x2", "kaggle", "cuda", "2 x Tesla T4", 12.0, 2,
                 devices=2),
        Platform("kaggle_tpu", "Kaggle TPU v5e-8", "kaggle", "xla", "TPU v5e-8", 9.0, 2,
                 devices=8),
        # The other clouds (lib/runtime/clouds.py; facts and sources in its docstring). Studio Lab:
        # 4-hour GPU sessions (AWS docs, studio-lab-overview.md). SageMaker: billed, no limit
        # (an admin's idle shutdown only); ml.g4dn.xlarge (T4) is its default GPU type.
        # Paperspace: free machines shut down after 6 h (its docs; a 2026 price list says 12).
        Platform("studiolab_t4", "SageMaker Studio Lab", "studiolab", "cuda", "Tesla T4", 4.0,
                 2),
        Platform("sagemaker_gpu", "SageMaker Studio / notebook instance", "sagemaker", "cuda",
                 "Tesla T4", None, 2),
        Platform("paperspace_gpu", "Paperspace Notebooks", "paperspace", "cuda", "Quadro P4000",
                 6.0, 2, batch_scale=0.5,
                 status="free GPUs of 8 GB vary"),
        # Lightning AI Studios and Modal Notebooks (lib/runtime/clouds.py): any GPU from T4 up,
        # billed per second, no documented session cap; precision follows the GPU found
        # (lib.runtime.device).
        Platform("lightning_studio", "Lightning AI Studio", "lightning", "cuda", "Tesla T4",
                 None, 2, status="T4 to B200: precision follows the GPU"),
        Platform("modal", "Modal Notebooks", "modal", "cuda", "Tesla T4", None, 2,
                 status="T4 to H100; runs kept on a Volume"),
    ]
}


def get_platform(name: str) -> Platform:
    """The profile called `name`, or one clear error listing the valid names."""
    if name in RENAMED:
        raise ConfigError(
            f"PLATFORM {name!r} is now {RENAMED[name]!r} (the notebook for this machine: CUDA, "
            f"MPS or the CPU); set PLATFORM = {RENAMED[name]!r}, or open "
            f"notebooks/{RENAMED[name]}/.")
    if name not in PLATFORMS:
        raise ConfigError(
            f"unknown PLATFORM {name!r}; expected one of {sorted(PLATFORMS)}. "
            "Use the notebook rendered for your platform under notebooks/<platform>/, "
            "or set PLATFORM to one of these names."
        )
    return PLATFORMS[name]


def detect_runtime(environ: dict | None = None, modules: dict | None = None) -> str:
    """Which hosted runtime this process is in: "colab", "kaggle", one of
    `lib.runtime.clouds.RUNTIMES`
    ("vertex": Colab Enterprise / Workbench, asked before Colab; "jupyterhub" after every named
    service) or "local"."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    from lib.runtime import clouds  # the other clouds, Colab Enterprise and any JupyterHub

    if clouds.is_vertex(environ):  # sets COLAB_RELEASE_TAG too, but has no Drive to mount
        return "vertex"
    if "google.colab" in modules or "COLAB_RELEASE_TAG" in environ:
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in environ:
        return "kaggle"
    return clouds.detect(environ) or "local"


def kaggle_root() -> Path:
    return Path(os.environ.get(KAGGLE_ROOT_ENV, "/kaggle"))


def colab_content() -> Path:
    return Path(os.environ.get(COLAB_CONTENT_ENV, "/content"))


def drive_root() -> Path:
    """Where Google Drive is (to be) mounted on Colab."""
    return Path(os.environ.get(DRIVE_MOUNT_ENV, "/content/drive"))


def drive_mounted() -> bool:
    return (drive_root() / "MyDrive").is_dir()


@dataclass(frozen=True)
class Storage:
    """Where a runtime keeps each kind of file (module docstring), and what survives there."""

    scratch: Path  # downloads, unpacked data, caches, the bootstrap's clone
    durable: Path  # run folders
    inputs: tuple[Path, ...] = ()  # read-only folders the user attached
    output_cap_gb: float | None = None  # what the platform keeps of `durable`, if capped
    keeps: str = ""  # one phrase: what of `durable` survives the session
    carry_over: str = ""  # how a run gets from one session to the next
    session_bound: bool = False  # True: `durable` starts empty in a new session (Kaggle)
    # A mount whose writes are pushed in the background (Colab's Drive): checkpoints in a run
    # folder under it are written on scratch, then copied whole with a marker (lib.base.durable).
    synced: Path | None = None
    prepared: Path | None = None  # where prepared data (packs) is kept between sessions


def staging(roles: Storage, run_dir: Path) -> Path | None:
    """The scratch folder the checkpoints of `run_dir` are written in first when `run_dir`
    is on a synced mount (`Storage.synced`); None elsewhere."""
    run = Path(run_dir).absolute()
    if roles.synced is None or not run.is_relative_to(Path(roles.synced).absolute()):
        return None
    return roles.scratch / "staging" / hashlib.sha1(str(run).encode()).hexdigest()[:12]


def storage(runtime: str) -> Storage:
    """The storage roles of `runtime` ("colab", "kaggle", "local")."""
    if runtime == "colab" and not drive_mounted():
        # No Drive (a VM run by `colab exec`, papermill, TA_DRIVE=off): all on the VM's disk.
        local = colab_content() / "train-anywhere"
        return Storage(local, local / "runs", keeps="on this VM's disk only: lost with the VM "
                       "unless downloaded", carry_over="download the run folder before the VM "
                       "ends, or run the notebook in a browser session, which mounts Drive")
    if runtime == "colab":
        # Data on the VM's disk (Drive is a slow FUSE mount); run folders on Drive.
        base = drive_root() / "MyDrive" / "train-anywhere"
        # Inputs: what the user put in MyDrive/train-anywhere/data (the older default DATA_DIR).
        # Checkpoints: written on the VM's disk, copied to Drive whole with a marker; prepared
        # data kept on Drive too, copied back to the VM's disk in the next session.
        return Storage(colab_content() / "train-anywhere", base / "runs", (base / "data",),
                       keeps="on Drive once DriveFS has pushed it; each checkpoint copied "
                             "there whole with a completion marker",
                       carry_over="re-run the notebook: it resumes from the run folder on Drive",
                       synced=drive_root(),
                       prepared=base / "prepared")
    if runtime == "kaggle":
        # /kaggle/working is the version's output (20 GB): only run folders go there.
        root = kaggle_root()
        return Storage(root / "temp" / "train-anywhere", root / "working" / "runs",
                       (root / "input",), output_cap_gb=KAGGLE_OUTPUT_GB,
                       keeps="in /kaggle/working, kept as the version's output when a Save "
                             "Version finishes inside the limit",
                       carry_over="Save Version again with this version's output attached "
                                  "(Add Input -> Notebook Output -> this notebook); an "
                                  "interactive session keeps /kaggle/working only with "
                                  "Persistence set to Files", session_bound=True)
    from lib.runtime import clouds

    if runtime in clouds.RUNTIMES:  # the other clouds: run folders on what persists
        roles = clouds.storage(runtime)
        return Storage(roles.scratch, roles.durable, keeps=roles.keeps,
                       carry_over=roles.carry_over)
    return Storage(Path("data"), Path("runs"),
                   carry_over="re-run the notebook: it resumes from the run folder")


def input_roots(runtime: str, max_depth: int = 3) -> list[Path]:
    """Each folder the user attached, in both Kaggle layouts: the current one
    (`input/datasets/<owner>/<slug>`, `input/notebooks/<owner>/<slug>`,
    `input/competitions/<slug>`, and models deeper:
    `input/models/<owner>/<model>/<framework>/<variation>/<version>`) and the older
    `input/<slug>`. Data readers search these, a
    bounded number of levels, never the whole tree."""
    roots = []
    for base in storage(runtime).inputs:
        if not base.is_dir():
            continue
        for kind in sorted(p for p in base.iterdir() if p.is_dir()):
            if kind.name == "models" and max_depth >= 3:  # <owner>/<model>/<framework>/
                roots += sorted(q for q in kind.glob("*/*/*/*/*") if q.is_dir())  # <var>/<ver>
            elif kind.name in ("datasets", "notebooks") and max_depth >= 3:
                roots += sorted(q for owner in sorted(kind.iterdir()) if owner.is_dir()
                                for q in owner.iterdir() if q.is_dir())
            elif kind.name == "competitions":
                roots += sorted(q for q in kind.iterdir() if q.is_dir())
            else:
                roots.append(kind)
    return roots


def process_started_at() -> float:
    """Wall-clock time this process started (the notebook kernel's start is the session's,
    to within the bootstrap); TA_SESSION_STARTED, set by the first session, wins so that
    processes it launches share its clock."""
    if os.environ.get(SESSION_STARTED_ENV):
        return float(os.environ[SESSION_STARTED_ENV])
    try:  # /proc/self/stat field 22: start time in clock ticks after boot
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text()
                    .splitlines() if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


def session_limit_hours(platform: Platform, runtime: str, environ=None) -> float | None:
    """The hard limit of a session of `platform` on `runtime` (None: none), shortened by
    TA_SESSION_HOURS. Kaggle: 12 h, 9 h on TPU (kaggle.com/docs/notebooks); Colab: a VM
    lives at most about 12 h (research.google.com/colaboratory/faq); locally none."""
    environ = os.environ if environ is None else environ
    limit = None
    if runtime != "local":
        from lib.runtime import clouds

        limit = (platform.session_hours if platform.runtime == runtime
                 else clouds.SESSION_HOURS.get(runtime, 12.0))
    if environ.get(SESSION_HOURS_ENV):
        cap = float(environ[SESSION_HOURS_ENV])
        limit = cap if limit is None else min(limit, cap)
    return limit


def default_dirs(workload: str, runtime: str) -> tuple[Path, Path]:
    """(data_dir, out_dir) for `workload` on `runtime` when the notebook leaves them None:
    data on scratch, the run folder on durable storage (`storage`)."""
    roles = storage(runtime)
    data = roles.scratch if runtime == "local" else roles.scratch / "data"
    return data, roles.durable / workload


def session_clock(platform: Platform, runtime: str, main: bool = True) -> Clock:
    """This session's clock; processes it launches inherit its start (SESSION_STARTED_ENV)."""
    started, limit = process_started_at(), session_limit_hours(platform, runtime)
    if main and limit is not None:
        os.environ.setdefault(SESSION_STARTED_ENV, repr(started))
    return Clock(started, limit)
