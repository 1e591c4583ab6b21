"""What tests/test_xla_lif_scan.py checks of the spiking front-end on XLA, run in a torch_xla
child (`tests.xla_checks.run_on_xla`), printed as one JSON object after "RESULT".

The front-end is the N-MNIST preset's (2 -> 32 -> 32 -> 64 channels, 34x34 frames, batch 2).
On XLA `lif_multistep` picks its path itself (the scan loop); the oracle is the reference loop
(lib/kernels/lif_reference.py, no code shared with lib/kernels/lif_scan.py) on the plain CPU,
or, in bf16, on the same XLA device (its bf16 arithmetic is not eager's, for either path).
"""

from __future__ import annotations

import json
import os

import torch

from lib.kernels import LIF_PATH_ENV, choose_path
from lib.models.mamba_spike import MambaSpikeConfig, SpikingFrontEnd
from lib.runtime import xla

BATCH = 2


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    return ((got - want).abs().max() / want.abs().max()).item()


def _frontend(dtype: torch.dtype) -> SpikingFrontEnd:
    torch.manual_seed(0)
    frontend = SpikingFrontEnd(MambaSpikeConfig.preset("nmnist")).to(dtype)
    with torch.no_grad():  # recurrent weights strong enough that spikes change the next step
        for layer in frontend.layers:
            layer.rec.weight.mul_(3.0)
    return frontend


def _frames(steps: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return (torch.rand(BATCH, steps, 2, 34, 34, generator=g) * 2.5).to(dtype)


def _run(frontend, x, device, path: str | None = None, bf16: bool = False):
    """(spikes of every layer, gradients of the input and every parameter) on `device`, on
    `path` (None: the one lif_multistep picks there), under bf16 autocast if `bf16`."""
    frontend = frontend.to(device)
    x = x.to(device).requires_grad_()
    if path:
        os.environ[LIF_PATH_ENV] = path
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            outs = frontend(x, return_all=True)
        g = torch.Generator().manual_seed(2)
        grad = torch.randn(outs[-1].shape, generator=g).to(outs[-1].dtype).to(device)
        grads = torch.autograd.grad(outs[-1], [x, *frontend.parameters()], grad)
    finally:
        os.environ.pop(LIF_PATH_ENV, None)
    if device.type == "xla":
        xla.sync()  # one graph for all of them (each .cpu() alone would compile its own)
    return [o.cpu() for o in outs], [g.cpu() for g in grads]


def compare(dtype: torch.dtype, steps: int, bf16: bool = False) -> dict:
    """The front-end on XLA's own path against the reference loop, same weights and frames."""
    dev = xla.device()
    frontend, x = _frontend(dtype), _frames(steps, dtype)
    oracle = (dev, "reference") if bf16 else (torch.device("cpu"), "reference")
    want_spikes, want_grads = _run(_frontend(dtype), x, *oracle, bf16=bf16)
    spikes, grads = _run(frontend, x, dev, bf16=bf16)
    return {"spikes_equal": [torch.equal(a, b) for a, b in zip(spikes, want_spikes, strict=True)],
            "rates": [s.float().mean().item() for s in want_spikes],
            "dtypes": sorted({str(s.dtype) for s in spikes}),
            "grads": [_rel(a, b) for a, b in zip(grads, want_grads, strict=True)],
            "grads_nonzero": all(g.abs().max() > 0 for g in want_grads)}


def graph(steps: int, path: str | None = None) -> dict:
    """The lowered HLO of the front-end's forward and backward at `steps` frames (lowered,
    not compiled): its instruction lines and While loops."""
    import torch_xla

    dev = xla.device()
    frontend = _frontend(torch.float32).to(dev)
    x = _frames(steps, torch.float32).to(dev).requires_grad_()
    if path:
        os.environ[LIF_PATH_ENV] = path
    try:
        out = frontend(x)
        grads = torch.autograd.grad(out.sum(), [x, *frontend.parameters()])
    finally:
        os.environ.pop(LIF_PATH_ENV, None)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out, *grads])
    lines = [line for line in hlo.splitlines() if " = " in line]
    return {"instructions": len(lines), "whiles": sum(" while(" in line for line in lines)}


def mamba_scan(length: int) -> dict:
    """Mamba's linear scan (lib/models/mamba.py `linear_scan`, on XLA its While loop) at
    length L against `linear_scan_sequential` on the plain CPU, float64, the N-MNIST preset's
    state shape (batch 2, d_inner 128, d_state 16): h and both gradients."""
    from lib.models.mamba import linear_scan, linear_scan_sequential

    g = torch.Generator().manual_seed(3)
    shape = (BATCH, length, 128, 16)
    a = torch.rand(shape, generator=g, dtype=torch.float64) * 0.2 + 0.8  # decays as exp(dA)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    grad = torch.randn(shape, generator=g, dtype=torch.float64)

    def run(fn, device):
        a_d, x_d = (t.to(device).requires_grad_() for t in (a, x))
        h = fn(a_d, x_d)
        grads = torch.autograd.grad(h, [a_d, x_d], grad.to(device))
        if device.type == "xla":
            xla.sync()
        return [t.cpu() for t in (h, *grads)]

    got = run(linear_scan, xla.device())
    want = run(linear_scan_sequential, torch.device("cpu"))
    return {"rel": [_rel(a, b) for a, b in zip(got, want, strict=True)]}


def mamba_graph(length: int) -> dict:
    """The lowered HLO of `linear_scan`'s forward and backward at length L on XLA."""
    import torch_xla

    from lib.models.mamba import linear_scan

    dev = xla.device()
    a = torch.full((BATCH, length, 8, 4), 0.9, device=dev, requires_grad=True)
    x = torch.ones((BATCH, length, 8, 4), device=dev, requires_grad=True)
    h = linear_scan(a, x)
    grads = torch.autograd.grad(h.sum(), [a, x])
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([h, *grads])
    lines = [line for line in hlo.splitlines() if " = " in line]
    return {"instructions": len(lines), "whiles": sum(" while(" in line for line in lines)}


# Which cases run in which child (tests/test_xla_lif_scan.py): float64 at T = 50 mostly runs, so
# at XLA's default LLVM level (21 s of CPU there, 49 s at level 0); the bf16 case compiles the
# unrolled reference loop, so at level 0 (21 s there, 59 s at the default); lowering compiles
# nothing. Measured with torch_xla 2.9 on this machine's CPU client.
PARTS = {"running": ("f64_T50", "mamba_f64_L50"),
         "compiling": ("path", "bf16_T8", "graph_T50", "graph_T100", "reference_T4",
                       "reference_T8", "mamba_graph_L50", "mamba_graph_L300")}


def report(part: str) -> dict:
    """The cases of PARTS[part]."""
    cases = {"path": lambda: choose_path(xla.device()),
             "f64_T50": lambda: compare(torch.float64, 50),
             "bf16_T8": lambda: compare(torch.float32, 8, bf16=True),
             "graph_T50": lambda: graph(50), "graph_T100": lambda: graph(100),
             "reference_T4": lambda: graph(4, "reference"),
             "reference_T8": lambda: graph(8, "reference"),
             "mamba_f64_L50": lambda: mamba_scan(50), "mamba_graph_L50": lambda: mamba_graph(50),
             "mamba_graph_L300": lambda: mamba_graph(300)}
    return {name: cases[name]() for name in PARTS[part]}


if __name__ == "__main__":
    import sys

    print("RESULT", json.dumps(report(sys.argv[1])))
