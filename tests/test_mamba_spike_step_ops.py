"""Aten ops of one Mamba-Spike training step (issue 50), counted on the CPU: the N-MNIST
model at its T = 300, AdamW with clipping, through `bench.bench_mamba_spike.step_ops` (a
dispatch counter that also counts inside the fused LIF op). On a GPU each op is at least one
kernel launch, so the count bounds the step however fast the GPU: it was 29,248 per step with
the front-end's loop recorded step by step.

The count depends on T alone, not on the batch (from 2: a batch of 1 makes some copies
no-ops) or the frame size, so batch 2 at 8 x 8 frames stands for N-MNIST's batch 16 at 34 x 34
(`python -m bench.bench_mamba_spike --count-only` prints the full size's count: the same).
Each test counts a model's first step, which also creates AdamW's state: an upper bound of
every later step's (one step instead of two through Triton's interpreter).
"""

import pytest

from bench import bench_mamba_spike as bms
from lib.kernels import LIF_PATH_ENV

T = 300  # N-MNIST's frames per recording


def test_the_portable_step_runs_at_most_10000_ops_whatever_the_batch_and_frame(monkeypatch):
    monkeypatch.setenv(LIF_PATH_ENV, "portable")
    ops = bms.step_ops(2, T, hw=8, warm=False)
    assert ops <= 10_000, ops
    assert bms.step_ops(3, T, hw=16, warm=False) == ops


@pytest.mark.slow  # Triton's interpreter runs the kernels' 300 steps in NumPy: ~10 s
def test_the_cuda_path_step_runs_at_most_2500_ops():
    """The Triton kernels interpreted on the CPU (each launch one op) and AdamW and clipping
    with foreach, as torch runs them on CUDA."""
    ops = bms.cuda_path_ops(2, T, hw=8, warm=False)
    assert ops <= 2_500, ops
