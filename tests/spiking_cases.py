"""Cases and checks of the fused LIF op (lib/kernels), shared by tests/test_spiking_kernels.py
and the Triton-interpreter subprocess (`python -m tests.spiking_cases`, TRITON_INTERPRET=1 set
before triton is imported, so that setting never reaches another test in the worker).

A check runs one path and the reference loop on the same inputs and reports what differs:
spikes (equal or the share that flipped), the largest error of each gradient relative to the
reference's largest, and the firing rate (a case where nothing or everything fires would bite
nothing).
"""

from __future__ import annotations

import json
import os
import sys

import torch

from lib.kernels import lif_multistep, lif_reference
from lib.kernels.count import OpCount

# op-level cases: (T, N pixels, C channels, beta, threshold). N = 37, 70 are not multiples of
# the Triton block (64), C = 2, 3, 20 not powers of two (padded to 16 or 32 in the kernel).
OP_CASES = {
    "C32": (6, 40, 32, 0.97, 1.0), "C64": (5, 40, 64, 0.97, 1.0),
    "C128": (4, 24, 128, 0.97, 1.0), "beta0": (6, 30, 16, 0.0, 1.0),
    "beta1": (6, 30, 16, 1.0, 1.0), "beta0.5-thr0.5": (6, 30, 16, 0.5, 0.5),
    "thr2": (6, 30, 16, 0.97, 2.0), "T1": (1, 9, 8, 0.97, 1.0), "odd": (7, 37, 3, 0.9, 1.0),
    "C20-two-blocks": (5, 70, 20, 0.9, 1.0), "C2": (6, 11, 2, 0.97, 1.0),
}
# the three presets' spiking layers (in, out channels, pool): N-MNIST 2->32->32->64,
# DVS Gesture and CIFAR10-DVS 2->32->32->128
LAYER_CASES = {"2-32-pool": (2, 32, True), "32-32-pool": (32, 32, True),
               "32-64": (32, 64, False), "32-128": (32, 128, False)}
SLOPE = 25.0


def _rel(got: torch.Tensor | None, want: torch.Tensor | None) -> float:
    want = torch.zeros(()) if want is None else want.detach().double()
    got = torch.zeros(()) if got is None else got.detach().double()
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / scale if scale else (got - want).abs().max().item()


def op_inputs(case: str, dtype=torch.float64, seed: int = 0):
    """(cur, weight, bias, beta, thr, grad_out) of an op case: currents around the threshold
    and a recurrence strong enough that spikes change the next step."""
    t, n, c, beta, thr = OP_CASES[case]
    g = torch.Generator().manual_seed(seed)
    cur = (torch.randn(t, n, c, generator=g, dtype=torch.float64) + 0.4) * thr
    weight = torch.randn(c, c, generator=g, dtype=torch.float64) * thr / c ** 0.5
    bias = torch.randn(c, generator=g, dtype=torch.float64) * 0.1 * thr
    grad = torch.randn(t, n, c, generator=g, dtype=torch.float64)
    return cur.to(dtype), weight, bias, beta, thr, grad.to(dtype)


def check_op(case: str, path: str, dtype=torch.float64) -> dict:
    """`path` in `dtype` (weights float64 for float64, else float32) vs the reference in
    float64 on the same (rounded) inputs."""
    cur, weight, bias, beta, thr, grad = op_inputs(case, dtype)
    wdt = torch.float64 if dtype == torch.float64 else torch.float32
    ref_in = [cur.double().requires_grad_(), weight.requires_grad_(), bias.requires_grad_()]
    ref = lif_reference(*ref_in, beta, thr, SLOPE)
    want = torch.autograd.grad(ref, ref_in, grad.double(), allow_unused=True)
    got_in = [cur.clone().requires_grad_(), weight.detach().to(wdt).requires_grad_(),
              bias.detach().to(wdt).requires_grad_()]
    out = lif_multistep(*got_in, beta, thr, SLOPE, path=path)
    got = torch.autograd.grad(out, got_in, grad, allow_unused=True)
    return {"dtypes": [str(out.dtype)] + [str(x.dtype) for x in got],
            "spikes_equal": bool(torch.equal(out.double(), ref)),
            "flipped": (out.double() != ref).double().mean().item(), "rate": ref.mean().item(),
            **{k: _rel(a, b) for k, a, b in zip(("cur", "weight", "bias"), got, want,
                                                          strict=True)}}


def check_layer(case: str, path: str) -> dict:
    """A SpikingConv of the case's channels in float64 (B 2, T 5, 8x8 frames): `path` against
    the reference path, output, input gradient and every parameter's gradient."""
    from lib.models.mamba_spike import MambaSpikeConfig, SpikingConv

    c_in, c_out, pool = LAYER_CASES[case]
    torch.manual_seed(0)
    layer = SpikingConv(c_in, c_out, pool, MambaSpikeConfig()).double()
    with torch.no_grad():
        layer.rec.weight.mul_(3.0)
    x = (torch.rand(2, 5, c_in, 8, 8, dtype=torch.float64) * 2.5).requires_grad_()
    params = [x, *layer.parameters()]
    result = {}
    for which in ("reference", path):
        os.environ["TA_LIF_PATH"] = which
        try:
            out = layer(x)
        finally:
            del os.environ["TA_LIF_PATH"]
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                           dtype=out.dtype)
        result[which] = (out, torch.autograd.grad(out, params, grad))
    (ref, want), (out, got) = result["reference"], result[path]
    return {"spikes_equal": bool(torch.equal(out, ref)), "rate": ref.mean().item(),
            "grads": [_rel(a, b) for a, b in zip(got, want, strict=True)]}


def frontend_ops(frames: int) -> int:
    """Aten ops (lib/kernels.count.OpCount) of one front-end forward + backward (B 2, 12x12,
    16 spike channels) at `frames` steps, on the path TA_LIF_PATH or the device picks."""
    from lib.models.mamba_spike import MambaSpikeConfig, SpikingFrontEnd

    torch.manual_seed(0)
    frontend = SpikingFrontEnd(MambaSpikeConfig(input_hw=(12, 12), spike_channels=16))
    x = (torch.rand(2, frames, 2, 12, 12) < 0.3).float()
    with OpCount() as ops:
        frontend(x).sum().backward()
    return ops.n


def main() -> None:
    """Every check on the triton path under Triton's interpreter, as one JSON object."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    out = {"op": {c: check_op(c, "triton") for c in OP_CASES},
           "layer": {c: check_layer(c, "triton") for c in LAYER_CASES},
           "half": {str(d): check_op("C32", "triton", d) for d in (torch.bfloat16,
                                                                   torch.float16)}}
    os.environ["TA_LIF_PATH"] = "triton"
    out["ops"] = {t: frontend_ops(t) for t in (10, 20)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
