"""The spiking front-end's recurrence on XLA as one loop (lib/kernels/lif_scan.py), for real:
torch_xla on the CPU (PJRT_DEVICE=CPU), `make test-xla`.

The N-MNIST preset's front-end (2 -> 32 -> 32 -> 64 channels, 34x34 frames, batch 2) on the
path lif_multistep picks on XLA, against the reference loop (tests/xla_lif_cases.py): in
float64 at T = 50 against the plain CPU (spikes equal, gradients at the 1e-10 the other paths
are held to); in bf16 autocast, as the TPU notebook runs it, against the reference loop on the
same XLA device (XLA's bf16 arithmetic is not eager's: the reference loop itself flips a
quarter percent of spikes between the two, and BPTT carries each flip into the gradients).
And the graph: its size does not change with T, where the unrolled loop's doubles.
"""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla", reason="the XLA lane's environment has torch_xla")

from tests.xla_checks import run_on_xla  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXACT = 1e-10  # float64, as tests/test_spiking_kernels.py holds every path (~1e-14 here)
# bf16: the input gradient is bf16 (2^-7 relative steps) and the two loops sum the weights'
# gradient over steps in their own order; measured at most 0.02 of the largest.
BF16 = 0.05


@pytest.fixture(scope="module")
def cases():
    """tests/xla_lif_cases.py's report, from two torch_xla children: the cases that mostly run
    at XLA's default LLVM level, those that mostly compile at the lane's level 0 (why: PARTS)."""
    got = {}
    for part, optimized in (("running", True), ("compiling", False)):
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                f"from tests.xla_lif_cases import report; import json\n"
                f"print('RESULT', json.dumps(report({part!r})))\n")
        out = run_on_xla(code, 500, optimized=optimized)
        assert out.returncode == 0, out.stderr[-3000:]
        got.update(json.loads(out.stdout.split("RESULT", 1)[1]))
    return got


def test_xla_runs_the_recurrence_as_the_scan_loop(cases):
    assert cases["path"] == "scan"


def test_float64_at_t50_equals_the_cpu_reference(cases):
    """Every layer's spikes equal, the input's and every parameter's gradient (conv and
    recurrent weights and biases: BPTT through all 50 steps) to 1e-10 relative."""
    got = cases["f64_T50"]
    assert got["spikes_equal"] == [True] * 3
    assert all(0.05 < rate < 0.95 for rate in got["rates"]), got["rates"]  # spikes that bite
    assert got["grads_nonzero"] and len(got["grads"]) == 13
    assert max(got["grads"]) <= EXACT, got["grads"]


def test_bf16_autocast_equals_the_reference_loop_on_xla(cases):
    got = cases["bf16_T8"]
    assert got["dtypes"] == ["torch.bfloat16"]
    assert got["spikes_equal"] == [True] * 3
    assert all(0.05 < rate < 0.95 for rate in got["rates"]), got["rates"]
    assert got["grads_nonzero"] and max(got["grads"]) <= BF16, got["grads"]


def test_the_graph_does_not_grow_with_t(cases):
    """The lowered forward and backward (HLO instructions, not compiled) at T = 50 and 100:
    the same size, with one While loop forward and one backward per layer. The unrolled
    reference loop, lowered the same way, grows with T (the measure sees an unrolled loop)."""
    at50, at100 = cases["graph_T50"], cases["graph_T100"]
    assert at50 == at100 and at50["whiles"] == 6, (at50, at100)
    ref4, ref8 = cases["reference_T4"], cases["reference_T8"]
    assert ref8["instructions"] > ref4["instructions"] + 500 and ref8["whiles"] == 0


def test_mambas_scan_on_xla_equals_the_sequential_loop_and_its_graph_does_not_grow(cases):
    """The Mamba blocks' linear recurrence on XLA (one While loop) against the step-by-step
    loop on the CPU in float64 at L = 50 (h and both gradients to 1e-10), and its lowered
    forward and backward the same size at L = 50 and 300 (the parallel scan's levels and
    sequential tail, unrolled, grew from 4,946 to 8,930 instructions between T = 20 and 300)."""
    assert max(cases["mamba_f64_L50"]["rel"]) <= EXACT, cases["mamba_f64_L50"]
    at50, at300 = cases["mamba_graph_L50"], cases["mamba_graph_L300"]
    assert at50 == at300 and at50["whiles"] >= 2, (at50, at300)
