"""`python -m bench` (`make bench`): run every benchmark and write BENCHMARKS.md.

    python -m bench               # the default suite: about 25 minutes on 2 CPU cores
    python -m bench --notebooks   # also execute every notebook in smoke mode (~40 min more)
    python -m bench --notebooks fashion_mnist   # ... only that workload's notebooks
    python -m bench --quick       # tiny sizes: proves the suite runs; the numbers mean little
    python -m bench --only loop pipeline --out B.md

Each section is a module of this package returning rows of numbers (medians of repeated
runs, ratios against a baseline measured in the same process). Modules written by others
(`bench_scan`, `bench_seg`) run as subprocesses, their printed tables quoted as they are;
a module that is not there yet is reported as such.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench import bench_gpu, bench_loop, bench_pipeline, bench_suite, bench_sweep, bench_xla
from bench.common import FIGURES, ROOT, machine, markdown_table, run_python, set_threads

SECTIONS = ("loop", "pipeline", "device_data", "mamba_spike", "compile", "scan", "seg", "xla",
            "suite", "sweep", "gpu", "opens", "durable", "accumulation", "plan", "report",
            "workers")
EXTERNAL = {"scan": ("bench_scan", "Mamba selective scan: parallel vs sequential"),
            "seg": ("bench_seg", "MSHNet SLS loss and metrics: vectorised vs per-sample"),
            "device_data": ("bench_device_data", "Input pipeline on the device: host work per "
                            "batch, host capacity / GPU demand"),
            "mamba_spike": ("bench_mamba_spike", "Mamba-Spike training step: round five vs "
                            "now (aten ops, CPU time, memory)"),
            "compile": ("bench_compile", "torch.compile vs eager, each workload on the CPU"),
            "opens": ("bench_opens", "Data where it is fast: files opened per epoch, and epoch "
                      "time on the Drive stand-in / local disk"),
            "accumulation": ("bench_accumulation", "Gradient accumulation: what a global batch "
                             "in micro-batches costs per sample"),
            "report": ("bench_report", "`report` on a real run folder: seconds, without torch"),
            "durable": ("bench_durable", "What a durable checkpoint costs on Drive: save and "
                        "resume, direct vs staged with its marker"),
            "plan": ("bench_plan", "Planning: `train-anywhere plan` for a 100-cell grid, and its "
                     "plans against an exhaustive search"),
            "workers": ("bench_workers", "DataLoader workers: fork vs a forkserver (XLA), "
                        "seconds to the first batch")}
# (default, --quick) keyword arguments of each section's run().
SIZES = {
    "loop": (dict(steps=bench_loop.STEPS, repeats=bench_loop.REPEATS), dict(steps=2, repeats=1)),
    "pipeline": (dict(n_batches=4, steps=2), dict(workloads=["fashion_mnist"], n_batches=1,
                                                  steps=1, framing_repeats=1)),
    "xla": (dict(steps=10, batch=32, epochs=3), dict(steps=2, batch=16, epochs=2)),
    "suite": (dict(repeats=3), dict(repeats=1)),
    "gpu": (dict(steps=10), dict(steps=2)),
    "sweep": (dict(repeats=2), dict(repeats=1, backends=("run", "local"))),
}


def external(module: str) -> str:
    """The printed output of `python -m bench.<module>` as a code block, or why there is none."""
    if not (ROOT / "bench" / f"{module}.py").exists():
        return f"not measured: bench/{module}.py is not there yet."
    out = run_python(["-m", f"bench.{module}"])
    if out["returncode"] != 0:
        tail = " / ".join((out["stderr"] or out["stdout"]).strip().splitlines()[-2:])
        return f"`python -m bench.{module}` failed (exit {out['returncode']}): {tail}"
    printed = out["stdout"].strip()
    return f"`python -m bench.{module}` ({out['seconds']:.0f} s):\n\n```\n{printed}\n```"


def _rel(path: Path, out: Path) -> str:
    try:
        return path.resolve().relative_to(out.resolve().parent).as_posix()
    except ValueError:
        return path.as_posix()


def section(name: str, quick: bool, notebooks: list[str] | None, figures: Path,
            out: Path) -> tuple[str, dict]:
    """(markdown, raw result) of one section."""
    kwargs = SIZES.get(name, ({}, {}))[quick]
    if name in EXTERNAL:
        return external(EXTERNAL[name][0]), {}
    if name == "xla":  # the eager baseline there uses as many threads as this process
        res = bench_xla.measure_in_subprocess(threads=torch.get_num_threads(), **kwargs)
        fig = bench_xla.plot(res, figures) if res.get("status") == "measured" else None
        return bench_xla.report(res, fig and _rel(fig, out)), res
    if name == "suite":
        res = bench_suite.run(with_notebooks=notebooks is not None, workloads=notebooks,
                              **kwargs)
        return bench_suite.report(res), res
    if name == "sweep":
        res = bench_sweep.run(**kwargs)
        return bench_sweep.report(res), res
    if name == "gpu":
        from bench.gpu_check import BENCHMARKS_NOTE

        res = bench_gpu.run(**kwargs)
        return bench_gpu.report(res) + "\n\n" + BENCHMARKS_NOTE.rstrip("\n"), res
    module = {"loop": bench_loop, "pipeline": bench_pipeline}[name]
    res = module.run(**kwargs)
    return module.report(res, _rel(module.plot(res, figures), out)), res


TITLES = {"loop": "Loop overhead: `fit` vs a bare PyTorch loop",
          "pipeline": "Input pipeline: data loading vs training step",
          "scan": EXTERNAL["scan"][1], "seg": EXTERNAL["seg"][1],
          **{k: EXTERNAL[k][1] for k in ("device_data", "mamba_spike", "compile", "opens",
                                                 "durable", "accumulation", "plan",
                                                 "report", "workers")},
          "xla": "XLA on the CPU vs eager CPU", "suite": "The suite: rendering and notebooks",
          "sweep": "Sweep: overhead per grid cell of each backend",
          "gpu": "GPU: samples/s, peak memory, fraction of peak FLOP/s"}


def summary(results: dict) -> list[str]:
    """One line per target of issue 8, from the measured results."""
    lines = []
    for row in results.get("loop", {}).get("rows", []):
        if row["variant"] != "bare":
            ok = "meets" if row["ratio"] >= 0.97 else "BELOW"
            spread = f"{min(row['pair_ratios']):.2f}-{max(row['pair_ratios']):.2f}"
            lines.append(f"- {row['device']}, {row['variant']}: {row['ratio']:.3f} of the bare "
                         f"loop's samples/s ({ok} the 0.97 target; median of "
                         f"{len(row['pair_ratios'])} repeats, {spread}; by CPU time "
                         f"{row['cpu_ratio']:.2f})")
    frames = results.get("pipeline", {}).get("framing")
    for row in frames["rows"] if frames else []:
        ok = "meets" if row["speedup"] >= frames["target"] else "BELOW"
        lines.append(f"- event framing from the disk cache, {row['events']:,} events per "
                     f"recording: {row['speedup']:.1f}x faster than cold ({ok} the 10x target)")
    for row in results.get("xla", {}).get("rows", []):
        if "compiles_later" in row:
            lines.append(f"- {row['variant']}: {row['ratio']:.2f}x eager CPU steps/s; "
                         f"{row['compiles_later']} compilations after epoch 1")
    runs = (results.get("suite") or {}).get("executions") or []
    if runs:
        ok = [r for r in runs if r.get("target") == "meets"]
        worst = max((r for r in runs if r["status"] == "ok"), default=None,
                    key=lambda r: r["cell_seconds"])
        slowest = (f"; slowest {worst['platform']}/{worst['workload']} "
                   f"{worst['cell_seconds']:.0f} s, {worst['peak_mb']:.0f} MB") if worst else ""
        lines.append(f"- smoke notebooks: {len(ok)} of {len(runs)} within "
                     f"{bench_suite.SMOKE_TARGET_S:.0f} s of cells and "
                     f"{bench_suite.SMOKE_TARGET_MB:.0f} MB{slowest}")
    for row in results.get("sweep", {}).get("rows", []):
        if "to_first_step" in row and row["backend"] != "run":
            lines.append(f"- sweep --on {row['backend']}: {row['to_first_step']:.1f} s from "
                         f"submit to a cell's first training step ({row.get('over_run', 0):+.1f}"
                         " s against `train-anywhere run`)")
    if results.get("gpu", {}).get("status") == bench_gpu.NO_GPU:
        lines.append(f"- GPU: {bench_gpu.NO_GPU}")
    return lines


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def header(info: dict, command: str, seconds: float) -> list[str]:
    rows = [{"what": k, "value": v} for k, v in info.items()]
    return ["# Benchmarks", "",
            f"Written by `{command}` on {datetime.date.today().isoformat()} at commit "
            f"{_commit()} in {seconds / 60:.1f} min. Timings are medians of repeated runs; "
            "every ratio is against a baseline measured in the same process. Regenerate with "
            "`make bench`.", "", "## Machine", "",
            markdown_table(rows, [("what", "what"), ("value", "value")])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the benchmarks, write BENCHMARKS.md")
    parser.add_argument("--notebooks", nargs="*", default=None, metavar="WORKLOAD",
                        help="also execute every notebook in smoke mode, or only these "
                             "workloads' notebooks (takes minutes)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (0: torch's default); see bench/common.py")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--figures", type=Path, default=FIGURES)
    args = parser.parse_args(argv)
    start, previous = time.perf_counter(), torch.get_num_threads()
    info = machine() | {"threads": set_threads(args.threads)}
    body, results = [], {}
    try:
        for name in args.only:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            text, results[name] = section(name, args.quick, args.notebooks, args.figures,
                                          args.out)
            body += ["", f"## {TITLES[name]}", "", text]
            print(f"[bench] {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    finally:
        torch.set_num_threads(previous)
    info["load_average_after"] = machine()["load_average"]
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = header(info, command.strip(), time.perf_counter() - start)
    lines += ["", "## Summary", "", *summary(results), *body, *kept_sections(args.out), ""]
    args.out.write_text("\n".join(lines))
    print(f"[bench] wrote {args.out}", file=sys.stderr)
    return 0


# Sections no benchmark here writes (measured by other commands, each saying which): carried
# over from the file being replaced.
KEPT = ("The suite, before and after",)


def kept_sections(old: Path) -> list[str]:
    """The KEPT sections of `old` (BENCHMARKS.md before this run), each as its lines."""
    if not old.exists():
        return []
    kept = []
    for part in ("\n" + old.read_text()).split("\n## ")[1:]:
        title = part.split("\n", 1)[0]
        if title in KEPT:
            kept += ["", "## " + part.rstrip("\n")]
    return kept


if __name__ == "__main__":
    sys.exit(main())
