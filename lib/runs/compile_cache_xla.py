"""torch_xla's persistent cache in the run folder (`compile-cache/xla/`, tagged in
`compile-cache/xla.json`: `lib.runs.compile_cache` says what a tag holds and when a cache is
ignored). Executables are only valid for the torch / torch_xla / libtpu versions and the
device kind that compiled them (`lib.runtime.xla.cache_identity`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from lib.base import atomic
from lib.runs.compile_cache import (
    CAP_BYTES,
    _mb,
    _now,
    _usable,
    blob_path,
    folder,
    foreign,
    problem,
    read_tag,
    tag_path,
)


class XlaCache:
    """torch_xla's persistent cache of one run. `setup()` before the first XLA computation:
    the run's verified executables are copied to a folder on this machine, which torch_xla
    reads and writes (`lib.runtime.xla.init_cache`); `save()` copies new ones back."""

    def __init__(self, run_dir: Path, log=print, main: bool = True,
                 feed: bool | None = None) -> None:
        self.run_dir, self.log, self.main = Path(run_dir), log, main
        # hand the carried executables to torch_xla; None: unless its client is the CPU's,
        # which cannot load one (it logs a warning for each, then compiles it)
        self.feed = feed
        self.local: Path | None = None
        self.loaded = 0
        self.failures_said = False
        self.cap_said = False

    def setup(self) -> bool:
        """Point torch_xla's cache at a local folder seeded from the run's; False (one line)
        when torch_xla has compiled already in this process."""
        from lib.runtime import xla

        here = xla.cache_identity()
        tag = _usable(self.run_dir, "xla", here, self.log)
        local = xla.cache_dir()
        if local is None:
            local = Path(tempfile.mkdtemp(prefix="ta-xla-cache-"))
            if not xla.init_cache(local, readonly=not self.main):
                self.log("compile cache (xla) not used: torch_xla compiled before the run "
                         "started (the cache must be set first)")
                return False
        elif not self.main:  # a per-chip worker forked from the notebook: the main one writes
            xla.init_cache(local, readonly=True)
        self.local = local
        kept = (tag or {}).get("files", {})
        if kept and not (self.feed if self.feed is not None else xla.device_type() != "CPU"):
            self.log(f"compile cache: torch_xla's CPU client cannot load the {len(kept)} "
                     "XLA executables kept in the run (\"Deserializing serialized executable "
                     "not supported\"): compiling afresh; a TPU session loads its own")
            kept = {}
        for name in kept:
            if not (local / name).exists():
                shutil.copyfile(blob_path(self.run_dir, "xla") / name, local / name)
                self.loaded += 1
        if self.loaded:
            self.log(f"compile cache: {self.loaded} XLA executables ({_mb(tag['size'])}, saved "
                     f"{tag.get('saved_at')}) from {folder(self.run_dir)}")
        return True

    def check(self) -> None:
        """Once: say when torch_xla could not load the carried executables (its CPU client
        cannot: "Deserializing serialized executable not supported"); it compiled them."""
        from lib.runtime import xla

        failed = xla.cache_failures()
        if failed and not self.failures_said:
            self.failures_said = True
            self.log(f"compile cache: {failed} carried XLA executables could not be loaded "
                     f"on this {xla.device_type() or 'XLA'} client (torch_xla's CPU client "
                     "cannot deserialize executables; a TPU can): they were compiled again")

    def save(self) -> None:
        """Copy executables torch_xla wrote since the last save into the run folder (each
        checked as it is copied), then the tag (main process)."""
        try:
            self._save()
        finally:  # the checkpoint just saved ran the step's pending graph: counted now
            self.check()

    def _save(self) -> None:
        if not self.main or self.local is None:
            return
        from lib.base import durable
        from lib.runtime import xla

        old = read_tag(self.run_dir, "xla") or {}
        files = dict(old.get("files") or {}) if not foreign(old, xla.cache_identity()) else {}
        if problem(self.run_dir, "xla"):
            files = {}
        target = blob_path(self.run_dir, "xla")
        new = sorted(p for p in self.local.iterdir() if p.is_file() and p.name not in files
                     and not p.name.startswith("."))
        if not new and files == old.get("files"):
            return
        size = sum(s for s, _ in files.values()) + sum(p.stat().st_size for p in new)
        if size > CAP_BYTES:
            if not self.cap_said:
                self.cap_said = True
                self.log(f"compile cache not saved: {_mb(size)} is over its {_mb(CAP_BYTES)} "
                         "cap (lib.runs.compile_cache.CAP_BYTES)")
            return
        for path in new:
            files[path.name] = list(durable.copy_checked(path, target / path.name))
        for stale in (p for p in target.iterdir() if p.name not in files) if target.is_dir() \
                else ():
            stale.unlink(missing_ok=True)
        tag = dict(xla.cache_identity(), kind="xla", size=size, files=files,
                   graphs=len(files), saved_at=_now())
        atomic.write_text(tag_path(self.run_dir, "xla"), json.dumps(tag, indent=1))
