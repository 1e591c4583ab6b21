"""The `local` backend: `--jobs` worker processes on this machine, one cell each at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from lib.cli.params import ROOT


def _one(cell) -> tuple[object, int, float]:
    t0 = time.perf_counter()
    with open(cell.dir / "log.txt", "ab") as log:
        proc = subprocess.run([sys.executable, "-m", "lib.cli.sweep.cell", str(cell.dir)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return cell, proc.returncode, time.perf_counter() - t0


def run(cells: list, args, out: Path) -> None:
    jobs = max(1, int(args.jobs))
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(_one, c) for c in cells]
        for n, fut in enumerate(as_completed(futures), 1):
            cell, rc, seconds = fut.result()
            if cell.done:
                done = json.loads((cell.dir / "DONE.json").read_text())
                value = done.get("value")
                shown = f"{done['metric']} {value:.4f}" if isinstance(value, float) else "done"
                print(f"[{n}/{len(cells)}] {cell.name}: {shown} ({seconds:.0f}s)", flush=True)
            else:
                print(f"[{n}/{len(cells)}] {cell.name}: failed (exit {rc}; log "
                      f"{cell.dir / 'log.txt'})", flush=True)
