"""What a test run ran on: `python -m tests.environment` (the first lines of `make test`).

The Python, the versions of the packages that decide the numbers, and the CPU kernels torch
uses: when a learning curve differs between two machines, these say what else differed.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

NUMERICS = ("torch", "torchvision", "torch-xla", "numpy", "scipy", "pillow", "snntorch", "tonic",
            "h5py", "matplotlib")


def versions(names=NUMERICS) -> dict[str, str]:
    """name -> installed version, or "-" when it is not installed."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "-"
    return found


def describe() -> str:
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    lines = [
        f"python {platform.python_version()} ({sys.executable})",
        "packages: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
        f"cpu: {platform.machine()}, {os.cpu_count()} cores; torch kernels {capability}"
        + (f" (ATEN_CPU_CAPABILITY={forced})" if forced else "")
        + f", {torch.get_num_threads()} intra-op threads",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe(), flush=True)
