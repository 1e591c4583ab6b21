"""What the fake-CUDA dry run finds, where, and the one list of what it accepts (`ALLOWED`).

A finding names its kind, what happened and the line of code that asked for it: the innermost
frame outside torch and the dry run's own modules (tests/fake_cuda.py records them).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

REPO = Path(__file__).resolve().parents[1]
TORCH_DIR = str(Path(torch.__file__).resolve().parent)
TESTS = Path(__file__).resolve().parent
# Frames in these files are "inside the library", not the code that asked for the op.
_SKIP = (TORCH_DIR, str(TESTS / "fake_cuda.py"), str(TESTS / "device_findings.py"),
         contextlib.__file__, mock.__file__)

SYNC, FLOAT64, CHECKPOINT = "host sync", "float64 on the device", "device tensor in a checkpoint"


@dataclass(frozen=True)
class Allow:
    """A finding the dry run accepts: its kind, the file and source text of the line that
    causes it, and why it is acceptable."""

    kind: str
    file: str  # repository-relative path (or torch-relative for torch's own code)
    code: str  # a piece of that line's source
    reason: str

    def matches(self, f: Finding) -> bool:
        return f.kind == self.kind and f.file == self.file and self.code in f.code


# The one list of findings that are accepted, each with its reason.
ALLOWED: tuple[Allow, ...] = (
    Allow(SYNC, "lib/training/backend.py", "self.scaler.step(optimizer)",
          "torch's GradScaler.step reads found_inf (.item()) to skip a step whose fp16 "
          "gradients overflowed: the price of fp16 AMP, once per step, on T4-class GPUs only "
          "(bf16 on sm_80+ and XLA have no scaler)"),
    Allow(FLOAT64, "lib/training/backend.py", "self.scaler.unscale_(optimizer)",
          "torch's GradScaler.unscale_ takes 1/scale of its one-element scale in float64 on "
          "CUDA (on MPS it stays float32 by itself): torch's code, one scalar"),
    Allow(SYNC, "lib/training/metrics_seg.py", "pred.cpu().numpy(), gt.cpu().numpy()",
          "PdFaMetric labels connected components with scipy.ndimage on the host: one copy "
          "per evaluation batch, never in training (its docstring says so)"),
)


@dataclass(frozen=True)
class Finding:
    """Something a real device would reject or stall on, and where the code asked for it."""

    kind: str
    what: str  # the op and the tensor, e.g. ".item() (aten._local_scalar_dense) of cuda:0"
    file: str
    line: int
    function: str
    code: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.what} at {self.file}:{self.line} in {self.function}: " \
               f"{self.code.strip()}"


class DryRunError(AssertionError):
    """The fake-CUDA dry run found device errors, float64 or host syncs."""


def _relative(path: str) -> str:
    p = os.path.abspath(path)
    if p.startswith(TORCH_DIR):
        return "torch/" + os.path.relpath(p, TORCH_DIR)
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(p, REPO)
        if not rel.startswith(".."):
            return rel
    return p


def caller() -> tuple[str, int, str, str]:
    """(file, line, function, source) of the innermost frame outside torch and this module:
    the code that asked for the op."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP):
        frame = frame.f_back
    if frame is None:
        return "?", 0, "?", ""
    name = frame.f_code.co_filename
    return (_relative(name), frame.f_lineno, frame.f_code.co_name,
            linecache.getline(name, frame.f_lineno))
