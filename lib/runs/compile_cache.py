"""Compiled graphs that travel with the run: `<run folder>/compile-cache/`.

A Colab or Kaggle session starts on a fresh machine, whose compile caches (Inductor's in
/tmp, torch_xla's nowhere) are empty, so every session compiled every graph again. The run
folder travels (Drive, a Kaggle version's output, `train-anywhere carry`); its compile cache
now travels in it:

    compile-cache/inductor.zip   torch.compile's graphs: `torch.compiler.save_cache_artifacts()`
                                 (FX graphs, AOTAutograd entries) and, on the CPU, the C++
                                 libraries they load, the vector-ISA probes and Inductor's
                                 precompiled header (building those is most of a cache hit's
                                 time: measured, BENCHMARKS.md)
    compile-cache/inductor.json  its tag (below), written after it
    compile-cache/xla/           torch_xla's persistent cache (serialized executables), and
    compile-cache/xla.json       its tag, listing each file's size and SHA-256
                                 (`lib.runs.compile_cache_xla`)

A tag names what makes the cache unusable elsewhere (`identity`: torch / torch_xla version,
Python, C library, device kind: the CPU's vector ISA, the GPU and its CUDA, the XLA device)
and the bytes it covers (size, SHA-256). A cache is an optimisation, never a source of truth:
one from another version or device, or whose bytes do not match its tag (cut, corrupt,
half-written), is ignored with ONE line and the session compiles afresh; never an error,
never a graph compiled for something else. Saved when a checkpoint is (`RunFolder.save`),
by the main process, written whole (`lib.base.atomic`), tag last; loaded at session start.
Each kind's size is bounded by `CAP_BYTES`. Reading tags (`entries`, `describe`, `problem`)
imports no torch: `train-anywhere carry` and `report` use them.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import platform
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from lib.base import atomic

FOLDER = "compile-cache"
KINDS = ("inductor", "xla")
# Per kind. The Fashion-MNIST CNN's Inductor cache is 26.3 MB on the CPU: 0.6 MB of graphs,
# the rest C++ libraries and the precompiled header (the same for every model); a TPU
# executable of a few-million-parameter model is tens of MB. 256 MiB holds several such
# runs' graphs and stays under 2% of what a run folder may hold (Drive's free 15 GB, Kaggle's
# 20 GB of output): a bigger cache is not saved (one line), and the next session compiles.
CAP_BYTES = 256 * 2**20
IDENTITY = ("torch", "torch_xla", "python", "libc", "device", "ops")  # a mismatch: not usable
# The project's custom ops (lib/kernels): Inductor's graph cache keys on torch's code, not on an
# op's fake or kernel, so a graph compiled against an older one loads and then fails its stride
# checks (seen here: "expected ... stride 1400==1" in lif_backward after its fake changed).
KERNELS = Path(__file__).resolve().parent.parent / "kernels"
_ARTIFACTS = "artifacts"  # torch's own bytes, inside inductor.zip
_LIBS = "cpp/"  # C++ libraries and ISA probes, by their path under Inductor's cache dir
# Inductor's precompiled C++ header: 150 MB (about 25 zipped), built on each new machine before
# the first C++ kernel loads, even one that exists (13 s of a 19 s cache hit here, measured)
_PCH = "pch/"


def folder(run_dir: Path) -> Path:
    return Path(run_dir) / FOLDER


def blob_path(run_dir: Path, kind: str) -> Path:
    return folder(run_dir) / ("inductor.zip" if kind == "inductor" else "xla")


def tag_path(run_dir: Path, kind: str) -> Path:
    return folder(run_dir) / f"{kind}.json"


def read_tag(run_dir: Path, kind: str) -> dict | None:
    """The tag of `kind`'s cache in `run_dir`; None when there is none or it is unreadable."""
    try:
        tag = json.loads(tag_path(run_dir, kind).read_text())
    except (OSError, ValueError):
        return None
    return tag if isinstance(tag, dict) else None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def problem(run_dir: Path, kind: str) -> str | None:
    """Why `kind`'s cache in `run_dir` cannot be trusted (None: its bytes match its tag, or
    there is no cache at all). Torch-free."""
    blob, tag_file = blob_path(run_dir, kind), tag_path(run_dir, kind)
    if not blob.exists() and not tag_file.exists():
        return None
    tag = read_tag(run_dir, kind)
    if tag is None:
        return "its tag is missing or unreadable (a save that did not finish)"
    try:
        if kind == "inductor":
            data = blob.read_bytes()
            if len(data) != tag.get("size") or _sha(data) != tag.get("sha256"):
                return (f"{len(data)} bytes that do not match its tag's {tag.get('size')} "
                        "(cut or corrupt)")
            return None
        for name, (size, digest) in (tag.get("files") or {}).items():
            data = (blob / name).read_bytes()
            if len(data) != size or _sha(data) != digest:
                return f"{name} does not match its tag (cut or corrupt)"
    except FileNotFoundError as exc:
        return f"{Path(exc.filename).name} is missing (a save that did not finish)"
    except (OSError, TypeError, ValueError) as exc:
        return f"unreadable ({type(exc).__name__})"
    return None


def entries(run_dir: Path) -> list[tuple[str, dict | None, str | None]]:
    """(kind, tag, problem) for each kind of cache `run_dir` holds. Torch-free."""
    return [(kind, read_tag(run_dir, kind), problem(run_dir, kind)) for kind in KINDS
            if blob_path(run_dir, kind).exists() or tag_path(run_dir, kind).exists()]


def _mb(size) -> str:
    return f"{(size or 0) / 2**20:.1f} MB"


def tag_line(kind: str, tag: dict) -> str:
    """`inductor 1.9 MB (5 graphs; torch 2.14.1, cpu x86_64 AVX512, saved ...)`."""
    versions = ", ".join(f"{k.replace('_', ' ')} {tag[k]}" for k in ("torch", "torch_xla")
                         if tag.get(k))
    graphs = f"{tag['graphs']} graphs; " if tag.get("graphs") is not None else ""
    return (f"{kind} {_mb(tag.get('size'))} ({graphs}{versions}, {tag.get('device')}, saved "
            f"{tag.get('saved_at', '?')})")


def describe(run_dir: Path) -> list[str]:
    """One line per cache in `run_dir`: its size and tag, or why it will be ignored."""
    return [tag_line(kind, tag) if tag and not why else f"{kind}: ignored ({why})"
            for kind, tag, why in entries(run_dir)]


def foreign(tag: dict, here: dict) -> str | None:
    """What of `tag`'s identity differs from this session's (`here`); None: it fits."""
    diff = [f"{k} {tag.get(k) or 'none'} (here {here.get(k) or 'none'})" for k in IDENTITY
            if tag.get(k) != here.get(k)]
    return "; ".join(diff) or None


def _usable(run_dir: Path, kind: str, here: dict, log) -> dict | None:
    """The tag of a cache this session can load, or None (saying why in one line)."""
    if not blob_path(run_dir, kind).exists() and not tag_path(run_dir, kind).exists():
        return None  # the run's first compiled session
    where = folder(run_dir)
    if why := problem(run_dir, kind):
        log(f"compile cache ({kind}) in {where} ignored: {why}; compiling afresh (the next "
            "checkpoint saves a new one)")
        return None
    tag = read_tag(run_dir, kind)
    if why := foreign(tag, here):
        log(f"compile cache ({kind}) in {where} ignored: made for another setup ({why}); "
            "compiling afresh (the next checkpoint saves one for this setup)")
        return None
    return tag


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _base_identity() -> dict:
    import torch

    libc = " ".join(platform.libc_ver()).strip() or platform.system()
    return {"torch": torch.__version__, "torch_xla": None, "libc": libc,
            "python": ".".join(platform.python_version_tuple()[:2]), "ops": ops_version()}


def ops_version(kernels: Path = KERNELS) -> str:
    """The first 12 hex digits of the SHA-256 of lib/kernels' sources (the ops a compiled
    graph calls): a cache compiled against other sources is foreign."""
    digest = hashlib.sha256()
    for path in sorted(kernels.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


# Inductor (torch.compile on CUDA and the CPU) -------------------------------------------------
def inductor_identity(device_type: str) -> dict:
    """This session's tag for Inductor's cache on `device_type` ("cpu" or "cuda")."""
    import torch

    if device_type == "cuda":
        major, minor = torch.cuda.get_device_capability()
        device = (f"cuda {torch.cuda.get_device_name()} sm_{major}{minor}, CUDA "
                  f"{torch.version.cuda}")
    else:  # the C++ kernels are built for this vector ISA (AVX2, AVX512, NEON ...)
        device = f"cpu {platform.machine()} {torch.backends.cpu.get_cpu_capability()}"
    return dict(_base_identity(), device=device)


def _inductor_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def _loaded_libraries(root: Path) -> list[Path]:
    """The C++ libraries under Inductor's cache dir `root` that this process has loaded
    (Linux's /proc/self/maps), and the vector-ISA probes beside them: what a cache hit
    would otherwise compile again. Elsewhere none: the graphs alone travel."""
    found: set[Path] = set()
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    prefix = str(root) + os.sep
    for line in maps:
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if path.startswith(prefix) and path.endswith(".so") and os.path.isfile(path):
            found.add(Path(path))
    for probe in root.glob("*/*.so.load_ok"):  # compiled and dlopened in a subprocess
        found |= {probe, probe.with_suffix("")} if probe.with_suffix("").is_file() else set()
    return sorted(found)


def _header_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(default_cache_dir()) / "precompiled_headers"


def _members(root: Path) -> list[tuple[str, Path]]:
    """(name in inductor.zip, file) of what travels beside torch's artifacts: the loaded C++
    libraries and ISA probes, and the newest precompiled header (this torch's; gcc checks
    it and ignores one that does not fit)."""
    out = [(_LIBS + p.relative_to(root).as_posix(), p) for p in _loaded_libraries(root)]
    headers = sorted(_header_dir().glob("*.h.gch"), key=lambda p: p.stat().st_mtime)
    if headers and headers[-1].with_suffix("").is_file():
        out += [(_PCH + p.name, p) for p in (headers[-1].with_suffix(""), headers[-1])]
    return out


def _fingerprint(artifacts: bytes, members: list[tuple[str, Path]]) -> str:
    """What inductor.zip would hold, cheaply: unchanged means no new zip to write."""
    stats = [(name, p.stat().st_size, p.stat().st_mtime_ns) for name, p in members]
    return _sha(artifacts + json.dumps(stats).encode())


def pack_inductor(artifacts: bytes, members: list[tuple[str, Path]]) -> bytes:
    """inductor.zip's bytes: torch's artifacts and `members` (`_members`)."""
    out = io.BytesIO()
    # level 1: the header zips to 26 MB in 2 s; higher levels gain little for seconds more
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr(_ARTIFACTS, artifacts)
        for name, path in members:
            z.write(path, name)
    return out.getvalue()


def _unpack_inductor(data: bytes, root: Path) -> bytes:
    """Put the C++ libraries in Inductor's cache dir `root` (each written whole, existing
    ones kept); return torch's artifacts."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in z.namelist():
            base, prefix = ((root, _LIBS) if name.startswith(_LIBS) else
                            (_header_dir(), _PCH) if name.startswith(_PCH) else (None, ""))
            rel = name[len(prefix):]
            if base is None or rel.startswith("/") or ".." in rel.split("/"):
                continue
            if not (target := base / rel).exists():
                atomic.write_bytes(target, z.read(name))
        return z.read(_ARTIFACTS)


class InductorCache:
    """Inductor's cache of one run: `load()` at session start, `save()` with each checkpoint."""

    def __init__(self, run_dir: Path, device_type: str, log=print, main: bool = True) -> None:
        self.run_dir, self.device_type, self.log, self.main = Path(run_dir), device_type, log, main
        self.loaded: dict | None = None  # what load() put in place: {"graphs", "size"}
        self.cap_said = False

    def load(self) -> bool:
        """Load the run's cache into torch's; True when it did (one line either way, none
        when the run has no cache yet)."""
        import torch

        if (tag := _usable(self.run_dir, "inductor", inductor_identity(self.device_type),
                           self.log)) is None:
            return False
        quiet = logging.getLogger("torch.compiler._cache")  # its traceback: our one line
        level, quiet.level = quiet.level, logging.CRITICAL
        try:
            artifacts = _unpack_inductor(blob_path(self.run_dir, "inductor").read_bytes(),
                                         _inductor_dir())
            info = torch.compiler.load_cache_artifacts(artifacts)
        except Exception as exc:  # a cache never stops a run
            info, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "torch could not read it"
        finally:
            quiet.setLevel(level)
        if info is None:
            self.log(f"compile cache (inductor) in {folder(self.run_dir)} ignored: {why}; "
                     "compiling afresh")
            return False
        graphs = sum(len(v) for v in info.artifacts.values())
        self.loaded = {"graphs": graphs, "size": tag["size"]}
        self.log(f"compile cache: loaded {graphs} compiled graphs ({_mb(tag['size'])}, saved "
                 f"{tag.get('saved_at')}) from {folder(self.run_dir)}")
        return True

    def save(self) -> None:
        """Write what this process compiled or loaded, when it changed (main process)."""
        import torch

        if not self.main or (saved := torch.compiler.save_cache_artifacts()) is None:
            return
        artifacts, info = saved
        members = _members(_inductor_dir())
        old = read_tag(self.run_dir, "inductor") or {}
        fingerprint = _fingerprint(artifacts, members)
        if old.get("fingerprint") == fingerprint and problem(self.run_dir, "inductor") is None:
            return
        data = pack_inductor(artifacts, members)
        if len(data) > CAP_BYTES:
            if not self.cap_said:
                self.cap_said = True
                self.log(f"compile cache not saved: {_mb(len(data))} is over its "
                         f"{_mb(CAP_BYTES)} cap (lib.runs.compile_cache.CAP_BYTES); the next "
                         "session compiles again")
            return
        atomic.write_bytes(blob_path(self.run_dir, "inductor"), data, sync_dir=True,
                           failpoint="compile_cache.write")
        graphs = sum(len(v) for v in info.artifacts.values())
        tag = dict(inductor_identity(self.device_type), kind="inductor", size=len(data),
                   sha256=_sha(data), graphs=graphs, fingerprint=fingerprint, saved_at=_now())
        atomic.write_text(tag_path(self.run_dir, "inductor"), json.dumps(tag, indent=1))
