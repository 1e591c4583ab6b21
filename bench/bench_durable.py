"""What a durable checkpoint costs: one save and one resume, on local disk and on the Drive
stand-in, written directly (as before issue 24) or on scratch and copied with its marker.

    python -m bench.bench_durable           # ~1 minute

Checkpoints of the sizes the workloads write (the smoke runs' files: Fashion-MNIST's CNN with
Adadelta 14 MB, MSHNet with Adagrad 33 MB, ResNet-18 with SGD 89 MB), random bytes in a
state dict. "Drive" is tests/drive_fuse.py at its defaults (20 ms an operation, 32 MB/s).
- save, direct (before issue 24): `atomic_save` into the run folder on the mount, best.pt
  beside it, the oldest checkpoint removed;
- save, staged: `Checkpoints` with a scratch stage (lib/base/durable.py): written on local disk,
  copied to the mount, best.pt copied, markers last;
- resume: `Checkpoints.latest()`, which reads the file once and checks its marker's SHA-256.
The median of 3 saves each. Numbers vary with the machine's load (printed).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from bench.common import load_average, markdown_table, median
from lib.base import atomic
from lib.runs.checkpoints import Checkpoints, atomic_save
from tests.drive_fuse import mounted

SIZES_MB = {"fashion_mnist (CNN, Adadelta)": 14, "mshnet (Adagrad)": 33,
            "optimizer_study (ResNet-18, SGD)": 89}
COLUMNS = [("checkpoint", "checkpoint"), ("mb", "MB"), ("local_s", "save, local s"),
           ("direct_s", "save on Drive, direct s"), ("staged_s", "save on Drive, staged s"),
           ("resume_s", "resume from Drive s (read + SHA-256)")]


def _state(mb: int) -> dict:
    return {"model": {"w": torch.randint(0, 255, (mb * 2**20,), dtype=torch.uint8)},
            "history": []}


def _save_direct(folder: Path, state: dict, i: int) -> None:
    """The save before issue 24: the checkpoint and best.pt written in place, the oldest of
    three removed."""
    data = atomic_save(state, folder / f"ckpt-e{i:04d}-b000000.pt")
    atomic.write_bytes(folder / "best.pt", data, sync_dir=True)
    for old in sorted(folder.glob("ckpt-*.pt"), reverse=True)[2:]:
        old.unlink()


def _timed(fn, repeat: int = 3) -> float:
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        fn(i + 1)
        times.append(time.perf_counter() - start)
    return median(times)


def _row(name: str, mb: int, tmp: Path, drive: Path) -> dict:
    state, quiet = _state(mb), (lambda m: None)
    local = Checkpoints(tmp / f"local-{mb}", "w", {}, log=quiet)
    staged = Checkpoints(drive / f"staged-{mb}", "w", {}, stage=tmp / f"stage-{mb}", log=quiet)
    direct = drive / f"direct-{mb}"
    direct.mkdir()
    row = {"checkpoint": name, "mb": mb,
           "local_s": _timed(lambda i: local.save(state, i, 0, best=True)),
           "direct_s": _timed(lambda i: _save_direct(direct, state, i)),
           "staged_s": _timed(lambda i: staged.save(state, i, 0, best=True))}
    reader = Checkpoints(drive / f"staged-{mb}", "w", {}, log=quiet)
    row["resume_s"] = _timed(lambda i: reader.latest(), repeat=1)
    return row


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp, \
            mounted(Path(tmp) / "backing", Path(tmp) / "drive") as drive:
        return [_row(name, mb, Path(tmp), drive.path) for name, mb in SIZES_MB.items()]


def main() -> None:
    torch.set_num_threads(1)
    print(markdown_table(run(), COLUMNS))
    print(f"\nload average {load_average()}")


if __name__ == "__main__":
    main()
