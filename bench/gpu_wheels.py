"""Wheels a GPU machine without network needs for bench.gpu_check: `python -m bench.gpu_wheels`.

The GPU machine (the H100 image: Python 3.12, torch 2.11, manylinux x86_64) has torch and
most of the scientific stack but not this project's own needs (snntorch, tonic, mambapy,
papermill, ...). This module walks the requirements of the packages the workloads and the
kit import, as installed in this environment (so the versions are the lock's), drops what
the image already has (`IMAGE_HAS`) and torch, and `pip download`s one wheel of each, for
the target's Python and platform, into a folder that travels with the working tree:

    python -m bench.gpu_wheels --dest .whl          # then, on the GPU machine:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD python3 -m bench.gpu_check --out gpu-results --part quick
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

# What the kit, the workloads and their notebooks import (papermill runs the notebooks).
ROOTS = ("snntorch", "tonic", "h5py", "einops", "lion-pytorch", "aedat", "ipywidgets", "tqdm",
         "matplotlib", "scipy", "pillow", "numpy", "tensorboard", "mambapy", "papermill",
         "nbformat", "ipykernel", "jupytext")
# The H100/H200 image's Python packages (the device machine's package list, read on
# 2026-11-17); torch is never downloaded (the image's build is the one under test).
_IMAGE = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf
psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz
torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug
wheel wrapt xarray xxhash yarl zipp
"""
IMAGE_HAS = frozenset(_IMAGE.split())  # noqa: SIM905
# Declared by tonic but imported by none of its modules (a reader of Prophesee files, which
# no workload reads); it has no wheel for every Python, and is fetched only where one exists.
OPTIONAL = frozenset({"expelliarmus"})
# pip matches a manylinux tag exactly: every tag a wheel of these packages may carry.
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
             "manylinux_2_5_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64",
             "manylinux_2_35_x86_64"]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needed(python: str = "3.12", roots=ROOTS, image=IMAGE_HAS) -> dict[str, str]:
    """name -> version (as installed here) of every package the roots need, transitively,
    that the image lacks; markers evaluated for CPython `python` on Linux x86_64."""
    env = {"extra": "", "python_version": python, "python_full_version": f"{python}.0",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython"}
    out: dict[str, str] = {}
    seen: set[str] = set()
    stack = [_norm(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in image or name == "torch":
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(f"bench.gpu_wheels: {name} is not installed here; install the "
                             "project's dev environment first (`make install`).") from None
        out[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                stack.append(_norm(req.name))
    return dict(sorted(out.items()))


def download(pins: dict[str, str], dest: Path, python: str = "3.12") -> list[str]:
    """`pip download` each pin (no deps: the walk above chose them); the names that failed."""
    dest.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "-d", str(dest)] + [a for p in PLATFORMS for a in ("--platform", p)]
    failed = []
    for name, version in pins.items():
        if subprocess.run(base + [f"{name}=={version}"]).returncode:
            failed.append(f"{name}=={version}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path(".whl"))
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python (X.Y)")
    parser.add_argument("--list", action="store_true", help="print the pins, download nothing")
    args = parser.parse_args(argv)
    pins = needed(args.python)
    if args.list:
        print("\n".join(f"{k}=={v}" for k, v in pins.items()))
        return 0
    failed = download(pins, args.dest, args.python)
    size = sum(f.stat().st_size for f in args.dest.glob("*.whl")) / 2**20
    print(f"{len(pins) - len(failed)} wheels, {size:.1f} MiB in {args.dest}")
    missing = [f for f in failed if f.split("==")[0] not in OPTIONAL]
    for f in failed:
        kind = "needed" if f in missing else "optional, not imported by the workloads"
        print(f"no wheel of {f} for Python {args.python} manylinux x86_64 ({kind})",
              file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
