"""One command that checks and measures every workload on a CUDA GPU: `python -m bench.gpu_check`.

    python -m bench.gpu_check --out gpu-results --part quick     # under 8 minutes on an H100
    python -m bench.gpu_check --out gpu-results --part train     # each part fits 10 minutes
    python -m bench.gpu_check --out gpu-results --part all       # everything (a Colab session)
    python -m bench.gpu_check --out dry-results --dry-run           # the CPU dry run CI runs

For fashion_mnist, optimizer_study, mamba_spike and mshnet, on the workload's real model and
the offline sample data (synthetic tensors of the real shapes where the loader is not the
point), through the calls the notebooks make (`lib.session`, the workload's `train`,
`lib.training.loop.fit`): the first steps at fp32 vs the GPU's own precision vs the T4's fp16 +
GradScaler (tolerances in `bench.gpu_check_parts`); a few hundred steps at both; a run
SIGKILLed mid-epoch and resumed vs one never killed; checkpoints written on the GPU resumed
on the CPU and the other way round; eager vs torch.compile; samples/s, peak memory, fraction
of peak FLOP/s; the real loader vs batches already on the GPU; Mamba-Spike's scans and its
spiking front-end's loop. Results accumulate in OUT/gpu_check.json (each part replaces its
own section) and OUT/gpu_check.md is rewritten from it after every part.

`--dry-run` runs every check at tiny sizes on the CPU (fp16 there: fp32 with the GradScaler;
torch.compile with backend="eager"): the kit's code paths, not figures. The output says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from bench import gpu_check_mamba as mamba
from bench import gpu_check_parts as parts
from bench.common import fmt

WORKLOADS = parts.work.WORKLOADS
DRY_NOTE = ("DRY RUN on the CPU: tiny models and batches, fp16 replaced by fp32 + GradScaler, "
            "torch.compile with backend='eager', the slow checks once, on one workload, both "
            "halves of the cross-device check on the CPU. It shows the kit runs; NO figure here "
            "is a measurement of anything.")
# The workloads the quick part does not resume.
RESUME_REST = ("mamba_spike", "mshnet", "optimizer_study")
# part -> [(check title, function, per workload?, the workloads it runs on by default)]
Check = tuple[str, Callable, bool, tuple[str, ...]]
PARTS: dict[str, list[Check]] = {
    "quick": [("precision: first steps vs fp32", parts.precision, True, WORKLOADS),
              ("step speed (synthetic batches)", parts.step_speed, True, WORKLOADS),
              ("kill mid-epoch and resume", parts.kill_resume, True, ("fashion_mnist",)),
              ("checkpoints across devices", parts.cross_device, True, ("fashion_mnist",))],
    "train": [("a few hundred steps", parts.train_long, True, WORKLOADS)],
    "resume": [("kill mid-epoch and resume", parts.kill_resume, True, RESUME_REST),
               ("checkpoints across devices", parts.cross_device, True, RESUME_REST)],
    "compile": [("eager vs torch.compile", parts.compiled, True, WORKLOADS)],
    "loader": [("real loader vs batches on the device", parts.loader_fed, True, WORKLOADS)],
    "mamba": [("Mamba-Spike scans", mamba.scans, False, ("mamba_spike",)),
              ("Mamba-Spike training step: round five vs now", mamba.steps, False,
               ("mamba_spike",))],
}
# BENCHMARKS.md's GPU section ends with this note (bench/__main__.py appends it).
BENCHMARKS_NOTE = (Path(__file__).parent / "gpu_check_note.md").read_text()
# The dry run's slow checks (a process start each, or Dynamo tracing) run on one workload, once:
# their code path is the same for every workload (the worker trains through the same
# `gpu_check_work.train_run` the in-process checks run on every workload), so the resume part,
# the quick part's two checks on the other workloads, runs none of them again (its rows say so).
DRY_ONE = (parts.kill_resume, parts.cross_device, parts.compiled)
ORDER = ("quick", "train", "resume", "compile", "loader", "mamba")


def environment(dry: bool) -> dict:
    cuda = torch.cuda.is_available()
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "cuda": torch.version.cuda, "python":
            platform.python_version(), "gpu": torch.cuda.get_device_name(0) if cuda else "none",
            "capability": "sm_{}{}".format(*torch.cuda.get_device_capability(0)) if cuda else "",
            "dry_run": dry, "command": "python -m bench.gpu_check " + " ".join(sys.argv[1:])}


def run_part(name: str, ctx, workloads: list[str] | None, ran: dict | None = None) -> dict:
    """Every check of part `name`; a check that raises is recorded (ok False), not fatal.
    `ran`: check -> the part that ran it, filled here; in a dry run a DRY_ONE check that an
    earlier part ran is not run again."""
    sections, ran = [], {} if ran is None else ran
    for title, fn, per_workload, default in PARTS[name]:
        chosen = list(workloads or default)
        if ctx.dry and fn in DRY_ONE:
            if fn in ran:
                sections.append({"title": title, "seconds": 0.0, "rows": [
                    {"workload": w, "dry_run": f"not run again: part {ran[fn]} ran this check"}
                    for w in chosen]})
                continue
            chosen = chosen[:1]
        ran.setdefault(fn, name)
        targets = chosen if per_workload else [None]
        rows, start = [], time.perf_counter()
        for w in targets:
            print(f"[gpu_check] {name}: {title}{f' ({w})' if w else ''}", flush=True)
            try:
                out = fn(w, ctx) if per_workload else fn(ctx)
            except Exception as exc:  # keep the other checks' figures
                out = {"workload": w, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()[-1500:]}
                print(out["traceback"], file=sys.stderr, flush=True)
            rows.extend(out if isinstance(out, list) else [out])
        sections.append({"title": title, "rows": rows, "seconds": time.perf_counter() - start})
    return {"sections": sections}


def failures(results: dict) -> list[str]:
    """'part / check / workload' of every row whose ok is False."""
    return [f"{p} / {s['title']} / {r.get('workload', '')}"
            for p, part in results.get("parts", {}).items() for s in part["sections"]
            for r in s["rows"] if r.get("ok") is False]


def _cell(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a" if math.isnan(value) else str(value)
    if isinstance(value, float) and value and abs(value) < 1e-3:
        return f"{value:.2e}"
    return fmt(value).replace("|", "/").replace("\n", " ")


def table(rows: list[dict]) -> str:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and k not in ("traceback", "ratios", "label")]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = ["# GPU check", ""]
    if env["dry_run"]:
        lines += [f"**{DRY_NOTE}**", ""]
    lines += [f"{env['gpu']} ({env['capability'] or 'no GPU'}), torch {env['torch']} (CUDA "
              f"{env['cuda']}), Python {env['python']}, {env['date']}.", "",
              f"Tolerances: first-step loss vs fp32 (TF32 off) relative {parts.TOL_FIRST}, "
              f"mean over the first {parts.FIRST_STEPS} steps {parts.TOL_MEAN}; kill-and-resume "
              f"identical weights under deterministic algorithms, else relative "
              f"{parts.TOL_RESUME}.", ""]
    bad = failures(results)
    lines += [f"Failed checks: {', '.join(bad)}." if bad else "Every check passed.", ""]
    for name in ORDER:
        part = results.get("parts", {}).get(name)
        if not part:
            continue
        lines += [f"## {name}", "", f"`{part['command']}`", ""]
        for s in part["sections"]:
            lines += [f"### {s['title']} ({s['seconds']:.0f} s)", "", table(s["rows"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the .md and .json")
    parser.add_argument("--part", default="quick", choices=(*ORDER, "all"))
    parser.add_argument("--workloads", nargs="*", choices=WORKLOADS, default=None,
                        help="only these workloads (default: each check's own list)")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU: every code path, no figures")
    parser.add_argument("--scratch", type=Path, default=None,
                        help="sample data and run folders (default: a temporary folder)")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("bench.gpu_check: torch sees no CUDA device here; run it on a GPU runtime "
              "(Colab/Kaggle GPU, the H100), or pass --dry-run for the CPU dry run.",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "gpu_check.json"
    results = json.loads(path.read_text()) if path.exists() else {"parts": {}}
    results["environment"] = environment(args.dry_run)
    names = ORDER if args.part == "all" else (args.part,)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = args.scratch or Path(tmp)
        ctx = parts.make_ctx("cpu" if args.dry_run else "cuda", scratch, args.dry_run)
        ran: dict = {}
        for name in names:
            start = time.perf_counter()
            before = set(scratch.glob("*"))
            part = run_part(name, ctx, args.workloads, ran)
            # The part's run folders (a ResNet-18 checkpoint is 90 MB) go once its rows are
            # written; the sample data (scratch/data) stays for the next part.
            for folder in set(scratch.glob("*")) - before:
                if folder.name != "data":
                    shutil.rmtree(folder, ignore_errors=True)
            part.update(command=results["environment"]["command"],
                        seconds=time.perf_counter() - start, dry_run=args.dry_run)
            results["parts"][name] = part
            path.write_text(json.dumps(results, indent=1, default=str))
            (args.out / "gpu_check.md").write_text(markdown(results))
            print(f"[gpu_check] {name}: {part['seconds']:.0f} s", flush=True)
    print(markdown(results))
    return 1 if failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
