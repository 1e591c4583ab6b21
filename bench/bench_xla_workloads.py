"""Each workload's TPU-platform smoke run on torch_xla's CPU device: what XLA compiles, when,
for how long, how often a step reads back to the host, what falls back to the CPU, and how
large the compiled graphs are (issue 58: one compilation per distinct graph).

    python -m bench.bench_xla_workloads [--epochs 2] [--workloads fashion_mnist mshnet]

Each workload runs in a fresh process of the XLA environment (`.venv-xla`, PJRT_DEVICE=CPU and
the XLA lane's `--xla_backend_optimization_level=0`), as its colab_tpu notebook's training
cell does: `session.start(cfg)` then the workload's training function, with the parameters
the XLA lane's notebook test of that workload uses (tests/test_xla_*.py) and EPOCHS epochs.
The process counts with torch_xla's metrics (lib.training.loop's `train_one_epoch` and
`Backend.epoch_stats` wrapped to take them at each epoch's training and at its end) and has
XLA dump every module it compiles (`--xla_dump_to`), whose instructions are counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT, load_average, markdown_table, run_python

XLA_PYTHON = ROOT / ".venv-xla" / "bin" / "python"
XLA_FLAGS = "--xla_backend_optimization_level=0"  # tests/notebook_run.py's XLA_ON_CPU

# The XLA lane's parameters of each workload's notebook test (its SMOKE run).
WORKLOADS = {
    "fashion_mnist": ("lib.workloads.fashion_mnist:FashionConfig", "train",
                      dict(SMOKE=True, SAMPLE_DATA=True)),
    "optimizer_study": ("lib.workloads.optimizer_study:OptimizerStudyConfig", "train_grid",
                        dict(SMOKE=True, SAMPLE_DATA=True, SMOKE_BATCHES=2, BATCH_SIZE=16,
                             OPTIMIZER="adamw", SEED=0)),
    "mamba_spike": ("lib.workloads.mamba_spike:MambaSpikeRunConfig", "train",
                    dict(SMOKE=True, SAMPLE_DATA=True, SMOKE_BATCHES=2, BATCH_SIZE=4, LR=2e-3,
                         DATASET="nmnist", N_TIME_BINS=4, DOWNSAMPLE=2, D_MODEL=16, N_LAYERS=1,
                         SPIKE_CHANNELS=8)),
    "mshnet": ("lib.workloads.mshnet:MSHNetRunConfig", "train",
               dict(SMOKE=True, SAMPLE_DATA=True, WARM_EPOCHS=0, WARMUP_RULE="paper",
                    SMOKE_BATCHES=2, BATCH_SIZE=8)),
}


def _counts() -> dict:
    """torch_xla's cumulative compilations, compile seconds and device-to-host transfers
    (lib.runtime.xla.metric_counts; the loop's `compile_seconds` is torch.compile's only)."""
    from lib.runtime import xla

    return xla.metric_counts()


def _instructions(dump: Path) -> list[int]:
    """HLO instructions (lines defining a value) of each module XLA compiled, as dumped before
    its optimisation passes."""
    sizes = []
    for path in sorted(dump.glob("*.before_optimizations.txt")):
        sizes.append(sum(" = " in line for line in path.read_text().splitlines()))
    return sizes


def run_one(workload: str, epochs: int, folder: Path) -> dict:
    """Train `workload`'s smoke run for `epochs` here (an XLA process); its counts."""
    import importlib

    from lib import session
    from lib.runs.records import read_jsonl
    from lib.training import backend as backend_mod
    from lib.training import loop

    config_name, train_name, params = WORKLOADS[workload]
    module_name, cls_name = config_name.split(":")
    module = importlib.import_module(module_name)
    epoch_ends, training = [], []  # counts at each epoch's end; (steps, counts) per training
    plain_stats, plain_epoch = backend_mod.Backend.epoch_stats, loop.train_one_epoch
    plain_step = backend_mod.Backend.train_step
    steps = [0]

    def epoch_stats(self):
        epoch_ends.append(_counts())
        return plain_stats(self)

    def train_step(self, task, batch):
        steps[0] += 1
        return plain_step(self, task, batch)

    def train_one_epoch(*args, **kwargs):
        before, steps[0] = _counts(), 0
        out = plain_epoch(*args, **kwargs)
        training.append((steps[0], before, _counts()))
        return out

    backend_mod.Backend.epoch_stats = epoch_stats
    backend_mod.Backend.train_step = train_step
    loop.train_one_epoch = train_one_epoch
    cfg = getattr(module, cls_name).from_params(dict(
        params, PLATFORM="colab_tpu", EPOCHS=epochs, DATA_DIR=str(folder / "data"),
        OUT_DIR=str(folder / "out")))
    s = session.start(cfg)
    start = _counts()
    getattr(module, train_name)(s)
    (metrics,) = list((folder / "out").rglob("metrics.jsonl"))
    records = read_jsonl(metrics)
    ends = [start] + epoch_ends
    return {
        "workload": workload, "epochs": len(records), "device": records[0]["device"],
        "compiles_epoch1": ends[1]["compiles"] - ends[0]["compiles"],
        "compiles_later": ends[-1]["compiles"] - ends[1]["compiles"],
        "repeat_compiles": sum(r["xla_repeat_compiles"] for r in records),
        "compile_s": ends[-1]["compile_s"] - ends[0]["compile_s"],
        "steps_per_epoch": [n for n, _, _ in training],
        "training_transfers": [b["transfers"] - a["transfers"] for _, a, b in training],
        "transfers_per_later_epoch": [b["transfers"] - a["transfers"]
                                      for a, b in zip(ends[1:], ends[2:], strict=False)],
        "fallback_ops": records[-1]["xla_fallback_ops"],
        "hlo_instructions": _instructions(Path(os.environ["XLA_DUMP"])),
    }


def measure(workload: str, epochs: int, timeout: float) -> dict:
    """`run_one` in a fresh process of the XLA environment; {"workload", "status"} on failure."""
    with tempfile.TemporaryDirectory(prefix=f"bench-xw-{workload}-") as tmp:
        dump = Path(tmp) / "dump"
        env = {"PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "1", "XLA_DUMP": str(dump),
               "XLA_FLAGS": f"{XLA_FLAGS} --xla_dump_to={dump} --xla_dump_hlo_as_text"}
        out = run_python(["-m", "bench.bench_xla_workloads", "--one", workload, "--epochs",
                          str(epochs), "--folder", tmp, "--json"], XLA_PYTHON, env=env,
                         timeout=timeout)
    lines = out["stdout"].strip().splitlines()
    if out["returncode"] != 0 or not lines or not lines[-1].startswith("{"):
        tail = (out["stderr"] or out["stdout"]).strip().splitlines()[-3:]
        return {"workload": workload, "status": f"failed (exit {out['returncode']}): "
                                                + " / ".join(tail)}
    return dict(json.loads(lines[-1]), status="measured", seconds=out["seconds"])


def _cells(row: dict) -> dict:
    if row["status"] != "measured":
        return {"workload": row["workload"], "compiles_epoch1": row["status"]}
    sizes = row["hlo_instructions"]
    return dict(
        row, compile_s=f"{row['compile_s']:.1f}",
        compiles_epoch1=f"{row['compiles_epoch1']} ({row['repeat_compiles']})",
        training_transfers=", ".join(f"{t} in {n} steps" for t, n in
                                     zip(row["training_transfers"], row["steps_per_epoch"],
                                         strict=True)),
        transfers_per_later_epoch=" / ".join(map(str, row["transfers_per_later_epoch"])),
        fallback_ops=", ".join(row["fallback_ops"]) or "0",
        largest_graph=f"{max(sizes, default=0):,} ({len(sizes)} modules, {sum(sizes):,} in all)",
        seconds=f"{row['seconds']:.0f}")


def report(rows: list[dict]) -> str:
    return markdown_table([_cells(r) for r in rows], [
        ("workload", "workload"),
        ("compiles_epoch1", "compilations, epoch 1 (repeats)"),
        ("compiles_later", "compilations after epoch 1"),
        ("compile_s", "s compiling (XLA's CompileTime)"),
        ("training_transfers", "device-to-host transfers while training, each epoch"),
        ("transfers_per_later_epoch", "transfers in each later epoch, all told"),
        ("fallback_ops", "CPU fallback ops"),
        ("largest_graph", "largest graph: HLO instructions"),
        ("seconds", "process wall s")])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="XLA compilations, transfers, fallbacks and "
                                                 "graph sizes per workload (torch_xla's CPU)")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per workload")
    parser.add_argument("--one", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON last")
    args = parser.parse_args(argv)
    if args.one:  # the child: one workload, one JSON line last
        print(json.dumps(run_one(args.one, args.epochs, Path(args.folder))))
        return
    if not XLA_PYTHON.exists():
        sys.exit("not measured: no XLA environment (create it with `make install-xla`)")
    load = load_average()
    rows = []
    for workload in args.workloads:
        rows.append(measure(workload, args.epochs, args.timeout))
        print(f"{workload}: {rows[-1]['status']}", file=sys.stderr, flush=True)
    print(f"{args.epochs} epochs each; load average {load} at the start, {load_average()} at "
          "the end")
    print()
    print(report(rows))
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
