"""What the run's compile cache saves a session on a fresh machine (`lib.runs.compile_cache`).

    python -m bench.bench_compile_cache [--workload fashion_mnist]

Three sessions of the workload's SMOKE run with COMPILE = True on the CPU, each in a new
process whose machine-local compile caches are new, empty folders (TORCHINDUCTOR_CACHE_DIR,
TRITON_CACHE_DIR, XDG_CACHE_HOME, TMPDIR: a fresh Colab or Kaggle machine): the first session
(epoch 1), then epoch 2 on a fresh machine with the run's compile cache, and epoch 2 on a
fresh machine from a copy of the run without it. Each row: `compile_seconds` from
metrics.jsonl, Inductor's FX-graph cache hits and misses, the C++ kernel libraries built, and
whether Inductor's precompiled header (150 MB; 26 MB in the cache) was built.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR")


def fresh_machine(scratch: Path) -> dict:
    """The environment of a new process whose compile caches are all new, empty folders."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_COMPILE_THREADS="1")
    for name in CACHE_ENV:
        (scratch / name).mkdir(parents=True, exist_ok=True)
        env[name] = str(scratch / name)
    return env


def session(out: Path, epochs: int, compiled: bool = True, workload: str = "fashion_mnist",
            data: Path | None = None) -> dict:
    """One session of the SMOKE run in `out` on a fresh machine (a new process): its
    history, Inductor's cache counters, the C++ libraries it built and what it printed."""
    with tempfile.TemporaryDirectory(prefix="fresh-machine-") as scratch:
        cmd = [sys.executable, "-m", "bench.bench_compile_cache", "--session", str(out),
               str(epochs), "1" if compiled else "0", workload, str(data or out.parent / "data")]
        done = subprocess.run(cmd, cwd=ROOT, env=fresh_machine(Path(scratch)),
                              capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"session failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["lines"] = done.stdout.splitlines()[:-1]
    return result


def _run_session(out: str, epochs: int, compiled: bool, workload: str, data: str) -> None:
    """The child: train, then print one JSON line (history, counters, C++ builds)."""
    import torch._inductor.cpp_builder as cpp_builder
    from torch._dynamo.utils import counters

    from lib import session as session_mod
    from lib import workloads

    builds = []
    build = cpp_builder.CppBuilder.build

    def counted(self, *args, **kwargs):
        builds.append(self.get_target_file_path())
        return build(self, *args, **kwargs)

    cpp_builder.CppBuilder.build = counted  # compile threads = 1: every build is here
    wl = workloads.get(workload)
    cfg = wl.config.from_params(dict(PLATFORM="local", DEVICE="cpu", SMOKE=True,
                                     SAMPLE_DATA=True, DATA_DIR=data, OUT_DIR=out,
                                     EPOCHS=epochs, COMPILE=compiled, TRACKERS=[]))
    history = wl.train(session_mod.start(cfg))
    # Inductor's precompiled header (.gch) apart from the kernels' libraries; the header's
    # preprocessing (.i, under a second: how Inductor finds which header it needs) runs in
    # every session and is neither
    header = [b for b in builds if b.endswith(".gch")]
    kernels = [b for b in builds if not b.endswith((".gch", ".i"))]
    print(json.dumps({"history": history, "cpp_builds": len(kernels),
                      "header_builds": len(header),
                      "inductor": dict(counters["inductor"]),
                      "aot_autograd": dict(counters["aot_autograd"])}))


def measure(workload: str = "fashion_mnist") -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as tmp:
        run, bare = Path(tmp) / "run", Path(tmp) / "bare"
        first = session(run, 1, workload=workload)
        shutil.copytree(run, bare)
        shutil.rmtree(bare / "compile-cache")
        carried = session(run, 2, workload=workload)
        without = session(bare, 2, workload=workload)
    rows = []
    for name, result in (("first session (epoch 1)", first),
                         ("next session, fresh machine, run's compile cache", carried),
                         ("next session, fresh machine, no compile cache", without)):
        record = result["history"][-1]
        rows.append({"session": name, "compile_s": record.get("compile_seconds", 0.0),
                     "hits": result["inductor"].get("fxgraph_cache_hit", 0),
                     "misses": result["inductor"].get("fxgraph_cache_miss", 0),
                     "cpp_builds": result["cpp_builds"], "header": result["header_builds"] > 0})
    return rows


def table(rows: list[dict]) -> str:
    first = rows[0]["compile_s"] or 1e-9
    lines = ["| session | compile_seconds | of the first | FX graphs hit / missed | C++ "
             "kernel libraries built | precompiled header built |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['session']} | {r['compile_s']:.1f} | {100 * r['compile_s'] / first:.0f}% "
              f"| {r['hits']} / {r['misses']} | {r['cpp_builds']} | {r['header']} |"
              for r in rows]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="fashion_mnist")
    p.add_argument("--session", nargs=5, metavar=("OUT", "EPOCHS", "COMPILE", "WORKLOAD",
                                                  "DATA"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.session:
        out, epochs, compiled, workload, data = args.session
        _run_session(out, int(epochs), compiled == "1", workload, data)
        return
    print(f"`python -m bench.bench_compile_cache --workload {args.workload}` "
          f"({os.cpu_count()} CPUs):\n")
    print(table(measure(args.workload)))


if __name__ == "__main__":
    main()
