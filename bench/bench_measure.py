"""`train-anywhere measure` against the epochs the real model then trains here (issue 59: the
printed seconds per epoch of a real-size measurement within 25% of a real epoch).

    python -m bench.bench_measure [--workload fashion_mnist] [--epochs 3] [--steps 5]

Both on the offline sample (the real model and input size; nothing downloaded): first
`train-anywhere measure WORKLOAD -p SAMPLE_DATA True`, then `train-anywhere run WORKLOAD
-p SAMPLE_DATA True -p EPOCHS N` with COMPILE as measure times it (off), each in a fresh
process. Printed: the measurement's seconds for the sample's epoch, each epoch's seconds as
metrics.jsonl records them (training and test pass), and the ratio of the measurement to the
mean of the epochs after the first (the first one pays the allocator's and loader's start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT, load_average, markdown_table


def ta(*args: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "lib", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="fashion_mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        common = ["-p", "SAMPLE_DATA", "True", "-p", "DATA_DIR", str(work / "data")]
        ta("measure", args.workload, *common, "--steps", str(args.steps),
           "--out", str(work / "speed"))
        measured = json.loads((work / "speed" / "sessions.jsonl").read_text().splitlines()[0])
        ta("run", args.workload, *common, "-p", "EPOCHS", str(args.epochs), "-p", "COMPILE",
           "False", "--out", str(work / "run"))
        epochs = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text()
                  .splitlines()]
    later = statistics.mean(e["seconds"] for e in epochs[1:]) if len(epochs) > 1 else \
        epochs[0]["seconds"]
    rows = [{"what": f"measure: {args.steps} steps after warm-up",
             "s": f"{measured['seconds_per_epoch']:.2f}",
             "sps": f"{measured['samples_per_s']:.1f}", "ratio": ""}]
    rows += [{"what": f"run: epoch {e['epoch']}", "s": f"{e['seconds']:.2f}",
              "sps": f"{e['samples_per_s']:.1f}",
              "ratio": f"{measured['seconds_per_epoch'] / e['seconds']:.2f}"} for e in epochs]
    print(f"{args.workload} on its sample, this machine (load average {load_average()}), "
          f"batch {measured['global_batch']}, {measured['epoch_samples']} samples an epoch:")
    print(markdown_table(rows, [("what", "what"), ("s", "s / epoch"), ("sps", "samples / s"),
                                ("ratio", "measure / this")]))
    print(f"measure / mean of epochs 2-{len(epochs)}: {measured['seconds_per_epoch'] / later:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
