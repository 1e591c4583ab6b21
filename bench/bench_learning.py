"""The spread of every learning test over seeds and CPU settings (issue 28).

    python -m bench.bench_learning                  # every learning test, 5 seeds, 3 settings
    python -m bench.bench_learning -k mshnet --seeds 8 --jobs 2

Each learning test (tests/learning.py) is run through pytest once per seed and setting, with
TA_LEARN_SEED set; it records the values it asserts on. The table gives, per recorded value,
the smallest and largest seen and how many runs failed: a test's thresholds must clear that
spread by a margin, and its docstring quotes it. Counts and curves, not timings: the load of
the machine changes nothing here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import ROOT, machine, markdown_table

# Every test that asserts a model learned (tests/learning.py's record() names).
TESTS = {
    "train_loop": "tests/test_train.py::test_it_learns_and_writes_history_checkpoints_and_"
                  "tensorboard",
    "cifar_nearest_mean": "tests/test_cifar_data.py::test_sample_beats_chance_but_no_class_"
                          "template_solves_it",
    "cifar_cnn": "tests/test_cifar_data.py::test_cifar10_sample_is_learnt_gradually_by_a_small_cnn",
    "fashion_smoke": "tests/test_notebooks_fashion.py::test_notebook_trains_on_the_cpu",
    "fashion_gradual": "tests/test_notebooks_fashion.py::test_the_synthetic_sample_is_learned_"
                       "gradually",
    "mamba_spike": "tests/test_notebooks_mamba_spike.py::test_the_sample_is_learned_and_a_"
                   "rerun_only_reads",
    "mshnet": "tests/test_notebooks_mshnet.py::test_the_sample_is_learned_far_beyond_chance",
}
# What can differ between two CPU machines that this one can imitate: the intra-op thread
# count (summation order of parallel reductions) and the instruction set of torch's own kernels
# and of oneDNN's (convolutions), which pick the widest the CPU has unless told otherwise.
SETTINGS = {
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "2 threads": {"OMP_NUM_THREADS": "2"},
    "avx2, 1 thread": {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "avx2",
                       "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def run_one(test: str, seed: int, setting: str, log: Path) -> bool:
    """One pytest run of `test` at `seed` under `setting`; True when it passed."""
    env = dict(os.environ, TA_LEARN_SEED=str(seed), TA_LEARN_LOG=str(log), **SETTINGS[setting])
    env["TA_LEARN_SETTING"] = setting
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", TESTS[test]], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    return out.returncode == 0


def spread(rows: list[dict]) -> list[dict]:
    """Per recorded value: min and max over every run (a list counts by its min and max)."""
    table: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if key in ("test", "seed", "setting"):
                continue
            values = value if isinstance(value, list) else [value]
            table.setdefault((row["test"], key), []).extend(values)
    return [{"test": t, "value": k, "min": round(min(v), 4), "max": round(max(v), 4)}
            for (t, k), v in table.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="only tests whose name contains this")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    ap.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    tests = [t for t in TESTS if args.k in t]
    if not tests:
        ap.error(f"-k {args.k!r} matches no learning test; known: {', '.join(TESTS)}")
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(t, s, st, Path(tmp) / f"{t}-{s}-{i}.jsonl") for t in tests
                for s in range(args.seeds) for i, st in enumerate(args.settings)]
        with ThreadPoolExecutor(args.jobs) as pool:
            passed = list(pool.map(lambda j: run_one(*j), jobs))
        rows = []
        for (test, seed, setting, log), ok in zip(jobs, passed, strict=True):
            recorded = [json.loads(line) for line in log.read_text().splitlines()] \
                if log.exists() else []
            rows += [dict(r, setting=setting) for r in recorded]
            if not ok:
                print(f"FAILED {test} seed {seed} ({setting}): {recorded}")
    failures = {t: sum(1 for (tt, *_), ok in zip(jobs, passed, strict=True)
                       if tt == t and not ok) for t in tests}
    m = machine()
    print(f"{m['cpu']}, torch {m['torch']}; seeds 0-{args.seeds - 1}; settings: "
          f"{'; '.join(args.settings)}")
    columns = [("test", "test"), ("value", "value asserted on"), ("min", "min"),
               ("max", "max"), ("runs", "runs"), ("failed", "failed")]
    print(markdown_table([dict(r, runs=args.seeds * len(args.settings),
                               failed=failures[r["test"]]) for r in spread(rows)], columns))
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
