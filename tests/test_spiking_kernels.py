"""The spiking front-end's recurrence as one op (lib/kernels): the reference loop equals
snntorch's Leaky as SpikingConv stepped it; the portable path and the Triton kernels (run by
Triton's interpreter on the CPU, in a subprocess of their own) equal the reference in float64 at
1e-10 relative, outputs and every gradient; 16-bit inputs within stated tolerances; one op for
torch.compile; aten ops per training step that do not grow with T beyond a constant per step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.bench_spiking import snntorch_forward  # SpikingConv's loop before issue 50
from lib.base.errors import ConfigError
from lib.kernels import LIF_PATH_ENV, choose_path, lif_multistep
from lib.kernels import lif as lif_module
from lib.models.mamba_spike import MambaSpikeConfig, SpikingConv
from tests.spiking_cases import (
    LAYER_CASES,
    OP_CASES,
    check_layer,
    check_op,
    frontend_ops,
    op_inputs,
)

ROOT = Path(__file__).resolve().parent.parent
EXACT = 1e-10  # float64: every path sums in its own order; ~1e-14 is what they reach
# 16-bit currents (the membrane is float32 inside every path): the input gradient comes back
# rounded to the input's dtype (2 ulp: 2^-7 bf16, 2^-10 fp16), the weight's and bias's are
# float32 sums of float32 terms (rounding amplified by the surrogate through BPTT, ~1e-5);
# spikes may flip where a membrane lands within float32 rounding of the threshold (none do here).
HALF = {"torch.bfloat16": 2 ** -7, "torch.float16": 2 ** -10}


@pytest.fixture(autouse=True)
def _no_forced_path(monkeypatch):
    monkeypatch.delenv(LIF_PATH_ENV, raising=False)


@pytest.mark.parametrize("case", ["2-32-pool", "32-64"])
def test_the_reference_is_snntorchs_leaky_loop_in_float32(monkeypatch, case):
    c_in, c_out, pool = LAYER_CASES[case]
    torch.manual_seed(0)
    layer = SpikingConv(c_in, c_out, pool, MambaSpikeConfig())
    with torch.no_grad():
        layer.rec.weight.mul_(3.0)
    x = (torch.rand(2, 20, c_in, 8, 8) * 2.5).requires_grad_()
    monkeypatch.setenv(LIF_PATH_ENV, "reference")
    out, want = layer(x), snntorch_forward(layer, x)
    assert torch.equal(out, want) and 0.1 < want.mean() < 0.9
    grad, params = torch.randn_like(want), [x, *layer.parameters()]
    for got, ref in zip(torch.autograd.grad(out, params, grad),
                        torch.autograd.grad(want, params, grad), strict=True):
        assert ref.abs().max() > 0
        # the reference's linear and snntorch's 1x1 conv sum in their own orders
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-6 * ref.abs().max().item())


@pytest.mark.parametrize("case", OP_CASES)
def test_the_portable_op_equals_the_reference_in_float64(case):
    r = check_op(case, "portable")
    assert r["spikes_equal"] and 0.05 < r["rate"] < 0.9, r
    assert max(r["cur"], r["weight"], r["bias"]) < EXACT, r


@pytest.mark.parametrize("case", LAYER_CASES)
def test_the_portable_layer_equals_the_reference_in_float64(case):
    r = check_layer(case, "portable")
    assert r["spikes_equal"] and 0.05 < r["rate"] < 0.9, r
    assert len(r["grads"]) == 5 and max(r["grads"]) < EXACT, r  # input, conv w/b, rec w/b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_portable_op_in_16_bits_is_within_the_stated_tolerance(dtype):
    _assert_half(check_op("C32", "portable", dtype), str(dtype))


def _assert_half(r: dict, dtype: str) -> None:
    assert r["dtypes"] == [dtype, dtype, "torch.float32", "torch.float32"], r
    assert r["flipped"] <= 1e-3, r
    assert r["cur"] <= 2 * HALF[dtype] and max(r["weight"], r["bias"]) < 1e-4, r


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """Every Triton check, run once in a subprocess that sets TRITON_INTERPRET=1 first."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    env.pop(LIF_PATH_ENV, None)
    done = subprocess.run([sys.executable, "-m", "tests.spiking_cases"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow  # the interpreter's subprocess: about 10 s, once per module
@pytest.mark.parametrize("case", OP_CASES)
def test_the_triton_op_equals_the_reference_in_float64(interpreted, case):
    r = interpreted["op"][case]
    assert r["spikes_equal"] and 0.05 < r["rate"] < 0.9, r
    assert max(r["cur"], r["weight"], r["bias"]) < EXACT, r


@pytest.mark.slow  # the interpreter's subprocess: about 10 s, once per module
@pytest.mark.parametrize("case", LAYER_CASES)
def test_the_triton_layer_equals_the_reference_in_float64(interpreted, case):
    r = interpreted["layer"][case]
    assert r["spikes_equal"] and len(r["grads"]) == 5 and max(r["grads"]) < EXACT, r


@pytest.mark.slow  # the interpreter's subprocess: about 10 s, once per module
@pytest.mark.parametrize("dtype", HALF)
def test_the_triton_op_in_16_bits_is_within_the_stated_tolerance(interpreted, dtype):
    _assert_half(interpreted["half"][dtype], dtype)


@pytest.mark.slow  # the interpreter's subprocess: about 10 s, once per module
def test_the_triton_front_end_runs_the_same_ops_whatever_t(interpreted):
    """One forward and one backward launch per layer: nothing per step (counted on the CPU
    through the interpreter, the launches standing for their kernels)."""
    ops = interpreted["ops"]
    assert ops["10"] == ops["20"] < 200, ops


def test_the_portable_front_end_runs_six_ops_per_layer_and_step():
    """Three aten ops per step forward and three backward in each of three layers; a step
    recorded by autograd (the reference: about 32 per layer and step) would fail this."""
    short, long = frontend_ops(10), frontend_ops(20)
    assert long - short == 3 * 6 * 10, (short, long)
    assert short < 500, short


def test_torch_compile_sees_one_op_each_way():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, _):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return make_boxed_func(gm)

    cur, weight, bias, beta, thr, grad = op_inputs("C20-two-blocks", torch.float32)
    inputs = [x.float().requires_grad_() for x in (cur, weight, bias)]
    eager = torch.autograd.grad(lif_multistep(*inputs, beta, thr, 25.0), inputs, grad)
    torch._dynamo.reset()
    fn = torch.compile(lambda c, w, b: lif_multistep(c, w, b, beta, thr, 25.0),
                       backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
    compiled = torch.autograd.grad(fn(*inputs), inputs, grad)
    forward, backward = graphs
    assert forward.count("train_anywhere.lif_forward.default") == 1 and len(forward) <= 8
    assert backward.count("train_anywhere.lif_backward.default") == 1 and len(backward) <= 8
    for got, want in zip(compiled, eager, strict=True):  # the same op on the same inputs
        assert want.abs().sum() > 0 and torch.equal(got, want)


@pytest.mark.slow  # Inductor compiles C++ for the CPU: about 7 s each
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inductor_compiles_a_module_that_transposes_the_spikes(dtype):
    """torch.compile's default backend on a leaf of currents (float32, or bf16: the 16-bit
    leaf) whose spikes the module transposes: Inductor checks each op's outputs against its
    fake (dtype and strides: in float32 the gradient reaches lif_backward transposed), and
    the gradients equal eager ones."""
    cur, weight, bias, beta, thr, _ = op_inputs("C20-two-blocks", torch.float32)
    inputs = [cur.to(dtype).requires_grad_(), weight.float().requires_grad_(),
              bias.float().requires_grad_()]
    # the gradient of the (C, N, T) output: reaching the spikes (T, N, C), it is transposed
    grad = torch.randn(cur.shape[::-1], generator=torch.Generator().manual_seed(2)).to(dtype)

    def module(c, w, b):
        spikes = lif_multistep(c, w, b, beta, thr, 25.0, path="portable")
        return spikes.transpose(0, 2).contiguous().mul(2)

    eager = torch.autograd.grad(module(*inputs), inputs, grad)
    torch._dynamo.reset()
    # No cache: Inductor's graph cache keys on torch's code, not on our op's fake, so a graph
    # compiled on this machine against an older fake would load and test that fake instead
    # (seen here; lib/runs/compile_cache.py tags the run's carried cache with lib/kernels).
    with torch._inductor.config.patch(force_disable_caches=True):
        compiled = torch.autograd.grad(torch.compile(module, fullgraph=True)(*inputs), inputs,
                                       grad)
    assert [g.dtype for g in compiled] == [dtype, torch.float32, torch.float32]
    for got, want in zip(compiled, eager, strict=True):
        assert want.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_dispatch_rule(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert choose_path(cpu) == "portable" and choose_path(torch.device("xla")) == "scan"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (7, 5))  # a T4
    monkeypatch.setattr(lif_module, "triton_available", lambda: True)
    assert choose_path(cuda) == "triton" and choose_path(cuda, dtype=torch.bfloat16) == "triton"
    assert choose_path(cuda, dtype=torch.float64) == "portable"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (6, 0))  # a P100
    assert choose_path(cuda) == "portable"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (8, 0))
    monkeypatch.setattr(lif_module, "triton_available", lambda: False)
    assert choose_path(cuda) == "portable"
    monkeypatch.setenv(LIF_PATH_ENV, "reference")
    assert choose_path(cuda) == choose_path(cpu) == "reference"
    assert choose_path(cpu, "portable") == "portable"


def test_bad_paths_and_inputs_name_the_fix(monkeypatch):
    monkeypatch.setenv(LIF_PATH_ENV, "cuda")
    with pytest.raises(ConfigError, match=r"TA_LIF_PATH='cuda' is not one of .*'auto'"):
        choose_path(torch.device("cpu"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
        choose_path(torch.device("cpu"), "triton")
    with pytest.raises(ConfigError, match="scan path runs on XLA tensors only.*not cpu"):
        choose_path(torch.device("cpu"), "scan")
    cur, w, b = torch.zeros(3, 4, 5), torch.zeros(5, 5), torch.zeros(5)
    with pytest.raises(ConfigError, match=r"weight \(4, 4\).*expected \(T, N, C\), \(C, C\)"):
        lif_multistep(cur, torch.zeros(4, 4), b, 0.9, 1.0, 25.0)
    with pytest.raises(ConfigError, match="threshold=0.0 must be > 0"):
        lif_multistep(cur, w, b, 0.9, 0.0, 25.0)
    with pytest.raises(ConfigError, match="threshold=-1.0 must be > 0"):
        MambaSpikeConfig(threshold=-1.0)


def test_under_autocast_the_op_keeps_its_own_precision():
    """bf16 autocast (the project's half precision): bf16 currents in, bf16 spikes out, float32
    membranes inside and float32 gradients for the float32 weights."""
    torch.manual_seed(0)
    layer = SpikingConv(2, 16, True, MambaSpikeConfig())
    x = (torch.rand(2, 6, 2, 8, 8) < 0.3).float() * 3
    grads = []
    for backward_in_autocast in (False, True):  # a backward inside autocast changes nothing
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(x)
            if backward_in_autocast:
                out.float().sum().backward()
        if not backward_in_autocast:
            out.float().sum().backward()
        grads.append(layer.rec.weight.grad)
        layer.zero_grad(set_to_none=True)
    assert out.dtype == torch.bfloat16 and 0.05 < out.float().mean() < 0.9
    assert grads[0].dtype == torch.float32 and grads[0].abs().sum() > 0
    assert torch.equal(grads[0], grads[1])


def _strided(x: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout (a transposed copy, transposed back)."""
    return x.transpose(0, -1).contiguous().transpose(0, -1)


@pytest.mark.slow  # torch's four registration checks trace the op several times: a few seconds
@pytest.mark.parametrize("dtype, wdtype", [(torch.float32, torch.float32),
                                           (torch.bfloat16, torch.float32),  # bf16 autocast
                                           (torch.float16, torch.float16)])
def test_the_ops_pass_torchs_custom_op_checks(dtype, wdtype):
    """Schema, fake (meta) outputs of the right shapes, dtypes and strides, the autograd
    registration and AOT dispatch with dynamic shapes: what torch.compile relies on; in
    16 bits, on non-contiguous currents, weights and gradients."""
    from lib.kernels.lif import lif_backward, lif_forward

    cur, w, b, beta, thr, grad = op_inputs("odd", torch.float32)
    cur, w, grad = _strided(cur.to(dtype)), _strided(w.to(wdtype)), _strided(grad.to(dtype))
    assert not (cur.is_contiguous() or w.is_contiguous() or grad.is_contiguous())
    cur, w, b = (x.requires_grad_() for x in (cur, w, b.to(wdtype)))
    ok = {k: "SUCCESS" for k in ("test_schema", "test_autograd_registration",
                                 "test_faketensor", "test_aot_dispatch_dynamic")}
    assert torch.library.opcheck(lif_forward, (cur, w, b, beta, thr, 25.0, "portable")) == ok
    mem = lif_forward(cur, w, b, beta, thr, 25.0, "portable")[1].detach()
    assert torch.library.opcheck(lif_backward, (grad, mem, w.detach(), beta, thr, 25.0,
                                                "portable")) == ok
