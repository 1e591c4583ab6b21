"""The one place that asks which hardware exists, and what follows from it.

`probe()` reads the machine; `choose_device()` turns a request ("auto", "cuda", ...) plus a
platform profile into a `DeviceChoice`: the device, why it was chosen, the precision and
the DataLoader settings. Everything downstream takes the choice, never asks torch itself.
Tests build a `Probe` by hand to fake any machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass, field

import torch

from lib.base.errors import ConfigError, DeviceError
from lib.runtime.cpu import cpu_model
from lib.runtime.platforms import ANY, DEVICE_CHOICES, Platform

__all__ = ["DEVICE_CHOICES", "DeviceError", "choose_device"]

DEVICE_ENV = "TA_DEVICE"  # overrides the notebook's DEVICE, e.g. TA_DEVICE=cpu
NO_CUDA_ENV, NO_MPS_ENV = "NO_CUDA", "NO_MPS"  # the familiar switches, as env vars
SHM = "/dev/shm"
# DataLoader workers hand batches over through /dev/shm (prefetch_factor 2 per worker); the
# largest here, Mamba-Spike's T4 batch (16 x 300 frames x 2 x 34 x 34 fp32), is 44 MB, so
# 256 MB per worker is about 3x margin. A container's 64 MB default ends in "DataLoader
# worker ... killed by signal: Bus error" (pytorch/pytorch#5040, sagemaker-python-sdk#937).
SHM_PER_WORKER = 256 * 2**20
# A torch build with Maxwell (sm_52), Pascal (sm_6x) and Volta (sm_70) kernels: the cu126
# wheels keep them (cu128+ dropped Volta in torch 2.11, Pascal earlier; platforms.md).
OLD_GPU_TORCH = ('`pip install "torch==2.14.1" "torchvision==0.29.1" --index-url '
                 'https://download.pytorch.org/whl/cu126`')
# What else a user of each runtime can do when torch has no kernels for its GPU.
OTHER_GPU = {
    "kaggle": 'switch the accelerator to "GPU T4 x2"',
    "sagemaker": "move to an ml.g4dn (T4) or ml.g5 (A10G) instance",
    "paperspace": "start the notebook on an RTX or Ampere machine (e.g. A4000)",
    "lightning": "switch the Studio to another GPU (T4 or newer)",
    "modal": "pick another GPU for the notebook (T4 or newer)",
}


@dataclass(frozen=True)
class Probe:
    """What the machine offers. Built by `probe()`; hand-built in tests."""

    cuda: bool = False
    cuda_name: str = ""
    capability: tuple[int, int] = (0, 0)
    arch_list: tuple[str, ...] = ()
    cuda_count: int = 0
    mps: bool = False
    xla_installed: bool = False
    xla_device_type: str = ""  # "TPU", "CPU", ... or "" when not asked / unavailable
    torch_version: str = torch.__version__
    shm_free: int | None = None  # bytes free in /dev/shm; None: unknown (not Linux)


def probe(ask_xla: bool = False, environ=os.environ) -> Probe:
    """Read the machine. torch_xla is imported only when `ask_xla` (it costs seconds); else
    the XLA device type is the one PJRT_DEVICE names (TPU images set it; CI sets CPU)."""
    cuda = torch.cuda.is_available()
    # The seam for torch_tpu (the native `tpu` device Colab's TPU image moves to with torch
    # >= 2.11): detect it here as a fourth kind and give it lib/runtime/xla.py's role; everything
    # downstream already takes a DeviceChoice, never torch_xla directly.
    xla_installed = importlib.util.find_spec("torch_xla") is not None
    xla_type = environ.get("PJRT_DEVICE", "").strip().upper()
    if xla_installed and ask_xla:
        from lib.runtime import xla

        xla_type = xla.device_type()
    return Probe(
        cuda=cuda,
        cuda_name=torch.cuda.get_device_name(0) if cuda else "",
        capability=torch.cuda.get_device_capability(0) if cuda else (0, 0),
        arch_list=tuple(torch.cuda.get_arch_list()) if cuda else (),
        cuda_count=torch.cuda.device_count() if cuda else 0,
        mps=bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
        xla_installed=xla_installed,
        xla_device_type=xla_type,
        shm_free=shm_free_bytes(),
    )


def accelerator(kind: str) -> tuple[str, float | None]:
    """(model, memory in GB) of what runs a `kind` device here, for sessions.jsonl: the GPU's
    name and memory, Apple's shared memory MPS may use, the XLA device type (and the TPU type
    the VM names), or the CPU's model and the machine's memory; None where unknown."""
    if kind == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return props.name, round(props.total_memory / 1e9, 1)
    if kind == "mps":
        limit = getattr(torch.mps, "recommended_max_memory", None)
        return "Apple GPU (MPS)", round(limit() / 1e9, 1) if limit else None
    if kind == "xla":
        from lib.runtime import xla

        tpu = os.environ.get("TPU_ACCELERATOR_TYPE")  # set on TPU VMs, e.g. v5litepod-8
        return " ".join(filter(None, [xla.device_type() or "XLA", tpu])), None
    model = cpu_model()
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):  # no sysconf names (Windows)
        memory = None
    return model, round(memory, 1) if memory else None


def shm_free_bytes(path: str = SHM) -> int | None:
    """Free bytes in `path` (/dev/shm), or None where there is none (macOS)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def shm_workers(wanted: int, free: int | None) -> tuple[int, str]:
    """(DataLoader workers that free /dev/shm holds, one line when it cut them, else "")."""
    if not wanted or free is None or free >= wanted * SHM_PER_WORKER:
        return wanted, ""
    workers = int(free // SHM_PER_WORKER)
    return workers, (f"{SHM} has {free / 2**20:.0f} MB free: DataLoader workers {wanted} -> "
                     f"{workers} (each needs about {SHM_PER_WORKER // 2**20} MB there; fewer "
                     "would die with 'Bus error')")


@dataclass(frozen=True)
class Precision:
    """Autocast settings: dtype None means plain fp32."""

    dtype: torch.dtype | None
    scaler: bool

    @property
    def name(self) -> str:
        return {None: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[self.dtype]


@dataclass(frozen=True)
class DeviceChoice:
    """The device to run on and everything that follows from it."""

    type: str  # "cuda" | "xla" | "mps" | "cpu"
    reason: str
    precision: Precision
    pin_memory: bool
    num_workers: int
    notes: tuple[str, ...] = field(default_factory=tuple)  # more lines for the device line
    # How DataLoader workers start (`lib.data.common.worker_context`); None: the OS's default
    worker_start: str | None = None
    where: str = ""  # what really runs it, e.g. "Tesla T4 (sm_75)", "the CPU"
    tf32: bool = False  # TF32 matmuls and convolutions (CUDA on Ampere and newer)
    compile_ok: bool = False  # torch.compile can run here (`compile_support`)
    compile_note: str = ""  # why not, when it cannot

    @property
    def torch_device(self) -> torch.device:
        if self.type == "xla":
            from lib.runtime import xla

            return xla.device()
        return torch.device(self.type)

    def describe(self) -> str:
        """One line: the device, its precision, what really runs it, why, and any caveat."""
        precision = self.precision.name + (", TF32 matmuls" if self.tf32 else "")
        where = f" on {self.where}" if self.where else ""
        return "; ".join([f"device {self.type} ({precision}){where}: {self.reason}",
                          *self.notes])


def _version_at_least(version: str, major: int, minor: int) -> bool:
    parts = version.split("+")[0].split(".")
    return (int(parts[0]), int(parts[1])) >= (major, minor)


def cuda_preflight(p: Probe, platform: Platform | None = None) -> None:
    """Fail before the first kernel when torch has no kernels for this GPU's architecture.

    Kaggle's P100 (sm_60) under a CUDA 12.8+ torch build is the common case: CUDA reports
    available, and the first kernel dies with "no kernel image is available". So are
    SageMaker's V100 (ml.p3, sm_70) and Paperspace's M4000 / P4000 (sm_52 / sm_61).
    """
    if not p.cuda or not p.arch_list:
        return
    major, minor = p.capability
    sm = f"sm_{major}{minor}"
    # compute_XY (PTX) entries can JIT for a GPU of capability >= XY.
    sms = {a for a in p.arch_list if a.startswith("sm_")}
    ptx = [a.split("_")[1] for a in p.arch_list if a.startswith("compute_")]
    if sm in sms or any(int(c) <= major * 10 + minor for c in ptx):
        return
    runtime = platform.runtime if platform else "kaggle"
    other = OTHER_GPU.get(runtime, "use a GPU of sm_75 or newer")
    raise DeviceError(
        f"{p.cuda_name} is {sm}, but this torch {p.torch_version} was built for "
        f"{', '.join(sorted(sms))} only, so every CUDA kernel would fail with 'no kernel image "
        f"is available'. Fix: install a torch build with {sm} kernels, e.g. {OLD_GPU_TORCH} "
        f"and restart the kernel, or {other}, or set DEVICE = \"cpu\"."
    )


def choose_precision(kind: str, p: Probe) -> Precision:
    """fp16+scaler on pre-Ampere CUDA, bf16 on Ampere+ and XLA, fp16 on new-enough MPS."""
    if kind == "cuda":
        # bf16 is emulated (slow) below sm_80 even though is_bf16_supported() says True.
        if p.capability >= (8, 0):
            return Precision(torch.bfloat16, scaler=False)
        return Precision(torch.float16, scaler=True)
    if kind == "xla":
        return Precision(torch.bfloat16, scaler=False)
    if kind == "mps" and _version_at_least(p.torch_version, 2, 8):
        return Precision(torch.float16, scaler=True)  # GradScaler("mps") exists from 2.8
    return Precision(None, scaler=False)


def compile_support(kind: str, p: Probe) -> tuple[bool, str]:
    """(torch.compile can run on `kind` here?, why not). Inductor needs Triton and sm_70+ on
    CUDA (a P100 is sm_60) and a C++ compiler on the CPU; MPS and XLA are not its targets
    (XLA compiles whole graphs itself)."""
    if kind == "cuda":
        if p.capability < (7, 0):
            sm = f"sm_{p.capability[0]}{p.capability[1]}"
            return False, (f"{p.cuda_name or 'this GPU'} is {sm}, and torch.compile's Triton "
                           "kernels need sm_70 or newer")
        if importlib.util.find_spec("triton") is None:
            return False, "Triton is not installed (torch.compile's CUDA code generator)"
        return True, ""
    if kind == "cpu":
        if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
            return False, "no C++ compiler on this machine (torch.compile's CPU code generator)"
        return True, ""
    return False, f"torch.compile does not target {kind} here"


def _requested(device: str, environ) -> tuple[str, str]:
    """The effective request and where it came from (the env var wins over the notebook)."""
    env = environ.get(DEVICE_ENV, "").strip().lower()
    if env:
        if env not in DEVICE_CHOICES:
            raise ConfigError(
                f"{DEVICE_ENV}={env!r} is not a device; expected one of {list(DEVICE_CHOICES)}. "
                f"Fix or unset the environment variable {DEVICE_ENV}."
            )
        return env, f"{DEVICE_ENV}={env}"
    return device, f'DEVICE="{device}"'


def _available(kind: str, p: Probe, platform: Platform) -> bool:
    if kind == "cuda":
        return p.cuda
    if kind == "mps":
        return p.mps
    if kind == "xla":
        # torch_xla on a CPU is a real XLA device, but only worth it where the platform is
        # an XLA one (the TPU notebook run in CI); elsewhere XLA must mean a real TPU.
        return p.xla_installed and (platform.accelerator == "xla" or p.xla_device_type == "TPU")
    return kind == "cpu"


def _this_machine(p: Probe, skip: set[str]) -> tuple[str, str]:
    """The local notebook (accelerator ANY): CUDA, else a TPU, else MPS, else the CPU, saying
    which it found."""
    for kind in ("cuda", "xla", "mps"):
        if kind not in skip and (p.xla_device_type == "TPU" if kind == "xla"
                                 else getattr(p, kind)):
            return kind, f"this machine's best device: {_where(kind, p)}"
    off = f" ({', '.join(sorted(skip))} switched off)" if skip else ""
    return "cpu", f"no CUDA GPU or Apple MPS found{off}: this machine's CPU"


def _auto(p: Probe, platform: Platform, skip: set[str]) -> tuple[str, str]:
    if platform.accelerator == ANY:
        return _this_machine(p, skip)
    first = platform.accelerator
    order = [first] + [k for k in ("cuda", "xla", "mps") if k != first]
    for kind in order:
        if kind not in skip and _available(kind, p, platform):
            if kind == platform.accelerator:
                return kind, _on_its_accelerator(kind, p, platform)
            return kind, f"no {platform.accelerator} here ({platform.title} notebook); using {kind}"
    why = f"no {platform.accelerator} here and no other accelerator"
    if skip:
        why += f" ({', '.join(sorted(skip))} switched off)"
    return "cpu", f"{why}: the {platform.title} notebook falls back to the CPU"


def _gpu_model(platform: Platform) -> str:
    return platform.gpu.split()[-1]  # "Tesla P100" -> "P100", "2 x Tesla T4" -> "T4"


def _on_its_accelerator(kind: str, p: Probe, platform: Platform) -> str:
    """Why `kind` (the platform's own accelerator) was chosen, saying what really runs."""
    if kind == "xla" and p.xla_device_type == "CPU":
        return (f"the {platform.title} notebook's XLA runs on the CPU here (PJRT_DEVICE=CPU), "
                "not on a TPU: right for tests, slow for training")
    if kind == "cuda" and p.cuda_name and _gpu_model(platform) not in p.cuda_name:
        if platform.name == "kaggle_p100":
            return (f"the {platform.title} notebook runs on a {p.cuda_name}: Kaggle has retired "
                    "its P100s, and a notebook asking for one gets a T4")
        return (f"the {platform.title} notebook runs on a {p.cuda_name}, not a "
                f"{_gpu_model(platform)}: precision follows the GPU found")
    return f"the {platform.title} notebook's accelerator is available"


def _where(kind: str, p: Probe) -> str:
    if kind == "cuda":
        count = f"{p.cuda_count} x " if p.cuda_count > 1 else ""
        return f"{count}{p.cuda_name or 'a CUDA GPU'} (sm_{p.capability[0]}{p.capability[1]})"
    if kind == "xla":
        return {"TPU": "a TPU", "CPU": "the CPU (XLA)"}.get(p.xla_device_type, "XLA")
    return {"mps": "Apple MPS", "cpu": "the CPU"}[kind]


def _device_notes(kind: str, p: Probe, platform: Platform) -> tuple[str, ...]:
    """What a multi-device platform will not use here, said before it silently does not."""
    if platform.devices == 1:
        return ()
    if kind == platform.accelerator == "cuda" and p.cuda_count >= platform.devices:
        return ()
    if kind == platform.accelerator == "xla" and p.xla_device_type != "CPU":
        return ()  # a TPU, or not asked: session.start counts the devices XLA reports
    if kind == "cuda":
        found = f"{p.cuda_count} GPU{'s' if p.cuda_count != 1 else ''} here"
    elif kind == "xla":
        found = "XLA on the CPU here"
    else:
        found = f"no {platform.accelerator} here"
    processes = "DDP is" if platform.accelerator == "cuda" else "torch_xla.launch is"
    if kind == "cuda" and p.cuda_count > 1:
        return (f"{found}, not {platform.devices}",)
    return (f"{found}: one process on one device, {processes} not in use",)


def choose_device(
    device: str,
    platform: Platform,
    p: Probe | None = None,
    environ: dict | None = None,
) -> DeviceChoice:
    """Resolve `device` ("auto" or a kind) on this machine for a `platform` notebook."""
    environ = os.environ if environ is None else environ
    kind, source = _requested(device, environ)
    skip = {k for k, env in (("cuda", NO_CUDA_ENV), ("mps", NO_MPS_ENV)) if environ.get(env)}
    real = p is None
    if real:
        p = probe(ask_xla=(kind in ("auto", "xla")) and platform.accelerator != "xla",
                  environ=environ)
    if kind == "auto":
        kind, reason = _auto(p, platform, skip)
    else:
        if not _available(kind, p, platform) and not (kind == "xla" and p.xla_installed):
            raise DeviceError(
                f"{source} was requested but no {kind} device is available on this machine; "
                f'set DEVICE = "auto" to use the best available device, or DEVICE = "cpu".'
            )
        reason = f"requested by {source}"
    if kind == "cuda":
        cuda_preflight(p, platform)
    tf32 = kind == "cuda" and p.capability >= (8, 0)
    if real and tf32:  # Ampere+: fp32 matmuls/convolutions outside autocast use TF32 cores
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    compiles, compile_note = compile_support(kind, p)
    # A CPU fallback run is a smoke/CI run: worker processes only add start-up time there.
    workers, shm_note = shm_workers(platform.num_workers if kind != "cpu" else 0, p.shm_free)
    return DeviceChoice(
        type=kind,
        reason=reason,
        precision=choose_precision(kind, p),
        pin_memory=kind == "cuda",  # pinning warns on MPS and does nothing for XLA/CPU
        num_workers=workers,
        notes=_device_notes(kind, p, platform) + ((shm_note,) if shm_note else ()),
        # torch_xla's threads may hold a C-library lock when a worker forks: that worker hangs
        worker_start="forkserver" if kind == "xla" and workers else None,
        where=_where(kind, p),
        tf32=tf32,
        compile_ok=compiles,
        compile_note=compile_note,
    )
