"""Shared pieces of the benchmarks: timing, the machine description, tables, figures.

Every benchmark returns plain dicts (rows of numbers) from a `run(...)` function; this module
turns them into markdown and PNGs. Timings are wall-clock (`time.perf_counter`) with the
process CPU time beside them: on a shared machine other jobs stretch wall time, not CPU time.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
FIGURES = Path(__file__).resolve().parent / "figures"


def workload_batch(workload: str, platform: str) -> int:
    """`workload`'s default batch per device on `platform`, as its notebook would take it."""
    from lib.workloads import get

    return get(workload).config.default_batch(platform)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def set_threads(n: int) -> int:
    """Use `n` intra-op threads (0 keeps torch's default); returns the number in use.

    On a small machine shared with other jobs, a preempted thread stalls every parallel
    region of the others: one thread gives steadier ratios than two.
    """
    if n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def timed(fn: Callable, *args, **kwargs) -> tuple[object, float, float]:
    """(fn's result, wall seconds, process CPU seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


@contextlib.contextmanager
def captured():
    """Swallow stdout and stderr (progress bars, logs) but keep the work of writing them."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        yield out


def cpu_model() -> str:
    from lib.runtime.cpu import cpu_model as model  # the name sessions record

    return model()


def load_average() -> str:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def machine() -> dict:
    """What the numbers were measured on (CPU, cores, torch, threads, accelerators, load)."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "cuda_gpu": gpu, "mps": mps,
            "load_average": load_average()}


def fmt(value, digits: int = 3) -> str:
    """A number for a table: 3 significant digits, thousands separated; text as is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value != value:  # NaN
        return "n/a"
    if isinstance(value, int) or abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def markdown_table(rows: list[dict], columns: Sequence[tuple[str, str]]) -> str:
    """rows -> a markdown table; `columns` are (key, header) pairs in order."""
    lines = ["| " + " | ".join(h for _, h in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(k, "")) for k, _ in columns) + " |")
    return "\n".join(lines)


def save_figure(fig, name: str, folder: Path = FIGURES) -> Path:
    """Save a small PNG (BENCHMARKS.md links it) and close the figure."""
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def run_python(args: Sequence[str], python: str | Path = sys.executable, env: dict | None = None,
               timeout: float = 900) -> dict:
    """Run `python args...` from the repository root; returncode, stdout, stderr, seconds."""
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                           full_env.get("PYTHONPATH")]))
    start = time.perf_counter()
    try:
        proc = subprocess.run([str(python), *args], cwd=ROOT, env=full_env, capture_output=True,
                              text=True, timeout=timeout)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = -1, exc.stdout or "", f"timed out after {timeout:.0f} s"
    out = out.decode() if isinstance(out, bytes) else out
    return {"returncode": code, "stdout": out, "stderr": err,
            "seconds": time.perf_counter() - start}
