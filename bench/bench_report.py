"""`train-anywhere report` on folders real runs left: seconds, and whether torch was imported.

    python -m bench.bench_report [--repeats N] [--study] [--folder DIR ...]

Trains what it reads first (unless given --folder): a SMOKE run of Fashion-MNIST on its
sample (2 epochs) with `train-anywhere run`, and with --study a SMOKE optimizer study (its
default grid's first two runs). Then, per folder, `python -m lib report DIR` in a fresh process,
N times, median: the whole command as a user waits for it (interpreter, imports, the table, a
figure where one is out of date). The baseline, measured in the same process as its ratio's
other half: the same command with the folder's workload module imported first, as `report` did
before it read a workload's card (lib.workloads.card) instead of importing it (issue 52).
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

SMOKE = ["-p", "SMOKE", "True", "-p", "SAMPLE_DATA", "True"]
TARGET_S = 0.5  # issue 52: report at most half a second on this kind of machine
# The report, then which of torch and matplotlib were imported, as the last line.
PROBE = ("import sys\nfrom lib.cli.main import main\n{before}rc = main(['report', {out!r}])\n"
         "print('loaded:', *[m for m in ('torch', 'matplotlib') if m in sys.modules])\n"
         "raise SystemExit(rc)")


def train(work: Path, study: bool) -> list[tuple[str, Path]]:
    """Real run folders to read: (label, folder)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [("fashion_mnist run, 2 epochs", "fashion_mnist", ["-p", "EPOCHS", "2"])]
    if study:
        runs.append(("optimizer_study grid, 2 runs", "optimizer_study", ["-p", "EPOCHS", "1"]))
    folders = []
    for label, workload, extra in runs:
        out = work / workload
        subprocess.run([sys.executable, "-m", "lib", "run", workload, *SMOKE, *extra,
                        "-p", "DATA_DIR", str(work / "data"), "--out", str(out)],
                       cwd=ROOT, env=env, check=True, capture_output=True, timeout=1800)
        folders.append((label, out))
    return folders


def workload_of(out: Path) -> str:
    from lib.cli.sweep.report import workload_of as read

    return read(out) or "fashion_mnist"


def once(out: Path, baseline: bool) -> tuple[float, set[str]]:
    """(seconds of one `report` process, which of torch and matplotlib it imported)."""
    before = f"import lib.workloads.{workload_of(out)}\n" if baseline else ""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROBE.format(before=before, out=str(out))],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"report {out} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return seconds, set(proc.stdout.strip().splitlines()[-1].split()[1:])


def run(repeats: int = 5, study: bool = False, folders: list[Path] | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        found = ([(str(f), Path(f)) for f in folders] if folders
                 else train(Path(tmp), study))
        load = load_average()
        rows = []
        for label, out in found:
            once(out, False)  # the first report may draw an out-of-date figure: not timed
            now, then, loaded = [], [], set()
            for _ in range(repeats):  # interleaved: both halves see the same machine
                s, modules = once(out, False)
                now.append(s)
                loaded |= modules
                then.append(once(out, True)[0])
            median, base = statistics.median(now), statistics.median(then)
            rows.append({"folder": label, "report_s": median, "baseline_s": base,
                         "ratio": median / base, "spread": f"{min(now):.2f}-{max(now):.2f}",
                         "torch": "yes" if "torch" in loaded else "no",
                         "matplotlib": "yes" if "matplotlib" in loaded else "no",
                         "target": "meets" if median <= TARGET_S else "ABOVE"})
    return {"rows": rows, "repeats": repeats, "load": (load, load_average())}


def report(res: dict) -> str:
    table = markdown_table(res["rows"], [
        ("folder", "folder"), ("report_s", "s per `report`"), ("spread", "min-max"),
        ("torch", "torch imported"), ("matplotlib", "matplotlib imported"),
        ("baseline_s", "s with the workload imported (before)"),
        ("ratio", "ratio"), ("target", f"<= {TARGET_S} s")])
    return (f"`python -m lib report DIR` in a fresh process, median of {res['repeats']}, "
            f"interleaved with the baseline. Load average before / after: {res['load'][0]} / "
            f"{res['load'][1]}.\n\n{table}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--study", action="store_true", help="also a SMOKE optimizer study")
    parser.add_argument("--folder", action="append", type=Path,
                        help="read this run folder instead of training one (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the raw result as JSON")
    args = parser.parse_args(argv)
    res = run(args.repeats, args.study, args.folder)
    print(json.dumps(res, indent=1, default=str) if args.json else report(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
