"""Per-cell overhead of each sweep backend: seconds from submit to the cell's first step.

    python -m bench.bench_sweep [--repeats N]

Each backend runs a one-cell sweep of the Fashion-MNIST notebook (SMOKE, SAMPLE_DATA, one
epoch) from a fresh `train-anywhere sweep` process; `train-anywhere run` is the baseline
(one papermill run, no sweep). The first training step is dated from the run's TensorBoard
event of epoch 1 (its wall time, which survives the copy back from a remote backend) less
that epoch's `seconds`. Kaggle and Colab run against the tests' stand-ins (a loopback
server for the real `kaggle` client, a stand-in `colab` executable), so their numbers are
this machine's client and papermill overhead, not Kaggle's queue or a VM's boot.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, load_average, markdown_table

BACKENDS = ("run", "local", "slurm", "kaggle", "colab")
SMOKE = ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True", "-p", "EPOCHS", "1"]


def first_step(run_dir: Path) -> float:
    """Wall time of the run's first training step (epoch 1's TB event less its seconds)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    event = acc.Scalars("seconds")[0] if "seconds" in acc.Tags()["scalars"] else None
    record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    if event is None:
        raise RuntimeError(f"no TensorBoard scalars in {run_dir / 'tb'}")
    return event.wall_time - record["seconds"]


def command(backend: str, work: Path) -> tuple[list[str], dict, Path]:
    """(argv, extra env, run folder) of a one-cell sweep on `backend` (or a plain run)."""
    ta = [sys.executable, "-m", "lib"]
    out = work / "out"
    env = {"OMP_NUM_THREADS": "1"}
    if backend == "run":
        return ([*ta, "run", "fashion_mnist", *SMOKE, "-p", "DATA_DIR", str(work / "data"),
                 "--out", str(out)], env, out)
    data = {"kaggle": "/kaggle/working/data", "colab": "/content/data"}.get(backend,
                                                                          str(work / "data"))
    argv = [*ta, "sweep", "fashion_mnist", "--grid", "SEED=1", *SMOKE, "-p", "DATA_DIR", data,
            "--out", str(out), "--on", backend, "--poll", "0.5"]
    if backend == "slurm":
        argv += ["--cluster", "local"]
    if backend == "kaggle":
        config = work / "kaggle-config"
        config.mkdir()
        env.update(KAGGLE_API_ENVIRONMENT="TEST", KAGGLE_CONFIG_DIR=str(config),
                   KAGGLE_USERNAME="bench", KAGGLE_KEY="placeholder")
    if backend == "colab":
        from tests.test_sweep_remote import colab_env

        env.update(colab_env(work, COLAB_FAKE_ENV=json.dumps({"OMP_NUM_THREADS": "1"})))
    return argv, env, out / "cells" / "seed=1" / "run"


def measure(backend: str) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"ta-bench-{backend}-") as tmp:
        work = Path(tmp)
        argv, env, run_dir = command(backend, work)
        server = None
        if backend == "kaggle":
            from tests.fakes.kaggle_server import FakeKaggle

            server = FakeKaggle(work / "kaggle-side", {"OMP_NUM_THREADS": "1"}).__enter__()
        try:
            t0 = time.time()
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                                  env={**os.environ, **env}, timeout=900)
            total = time.time() - t0
        finally:
            if server is not None:
                server.__exit__(None, None, None)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            return {"backend": backend, "error": f"exit {proc.returncode}: {tail}"}
        return {"backend": backend, "to_first_step": first_step(run_dir) - t0, "total": total}


def run(repeats: int = 2, backends=BACKENDS) -> dict:
    """Each repeat measures every backend once, in a rotated order (the load here drifts)."""
    load_before = load_average()
    got: dict[str, list[dict]] = {b: [] for b in backends}
    for r in range(repeats):
        order = list(backends[r % len(backends):]) + list(backends[:r % len(backends)])
        for backend in order:
            got[backend].append(measure(backend))
            print(f"[bench_sweep] repeat {r + 1}: {got[backend][-1]}", file=sys.stderr,
                  flush=True)
    rows = []
    for backend in backends:
        ok = [g for g in got[backend] if "error" not in g]
        row = {"backend": backend, "repeats": len(ok)}
        if ok:
            row["to_first_step"] = statistics.median(g["to_first_step"] for g in ok)
            row["total"] = statistics.median(g["total"] for g in ok)
            row["each"] = " ".join(f"{g['to_first_step']:.1f}" for g in ok)
        errors = [g["error"] for g in got[backend] if "error" in g]
        row["note"] = errors[0] if errors else ""
        rows.append(row)
    base = next((r.get("to_first_step") for r in rows if r["backend"] == "run"), None)
    for r in rows:
        if base is not None and "to_first_step" in r:
            r["over_run"] = r["to_first_step"] - base
    return {"rows": rows, "repeats": repeats, "load": (load_before, load_average())}


def report(res: dict) -> str:
    rows = [{k: (f"{v:.1f}" if isinstance(v, float) else v) for k, v in r.items()}
            for r in res["rows"]]
    return ("One-cell sweep of the Fashion-MNIST notebook (SMOKE, SAMPLE_DATA, 1 epoch) per "
            f"backend, {res['repeats']} repeat(s) in rotated order, median; `run` is "
            "`train-anywhere run` of the "
            "same notebook (kernel start, imports, data) without a sweep. Seconds from starting "
            "the command to the cell's first training step (epoch 1's TensorBoard wall time "
            "less its duration). kaggle and colab: the tests' stand-ins, so no queue or VM "
            f"boot. Load average before / after: {res['load'][0]} / {res['load'][1]}.\n\n"
            + markdown_table(rows, [
                ("backend", "backend"), ("to_first_step", "s to first step"),
                ("over_run", "s more than `run`"), ("each", "each repeat"),
                ("total", "s whole command"), ("note", "note")]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=BACKENDS, default=list(BACKENDS))
    args = parser.parse_args(argv)
    print(report(run(args.repeats, args.only)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
