"""The spiking layer's recurrence as one multi-step op, and the rule choosing its kernel.

`lif_multistep(cur, weight, bias, beta, threshold, slope)` -> spikes: currents I (T, N, C) of
N = B*H*W pixels, the 1x1 recurrent conv's `weight` (C, C) and `bias` (C,), the LIF neuron's
decay, threshold and surrogate slope; the math is lib/kernels/lif_reference.py's, and every
path is tested equal to it (tests/test_spiking_kernels.py). Registered with torch.library, so
torch.compile sees one op forward and one backward, not T unrolled steps.

Paths, chosen in `choose_path` only: "triton" (CUDA sm_70+ with triton importable: one kernel
looping over T forward, one backward), "portable" (everywhere else: CPU, MPS, a P100), and
"scan" on XLA (torch_xla runs no custom op of ours; lib/kernels/lif_scan.py runs the step as
one XLA While loop, so the graph does not grow with T). "reference" is the plain loop (on XLA:
unrolled, T steps of graph). `LIF_PATH_ENV` or the `path` argument forces one ("triton" on CPU
tensors needs TRITON_INTERPRET=1 set before triton is imported: the tests count and check the
CUDA path so; "scan" runs on XLA tensors only); a value it cannot run here is refused in one
line (`lib.runtime.lif_path.check_path_env` at a run's start).

The fused paths have a first derivative only (hand-written backward kernels): a second
backward through them (create_graph=True, then backward again) is refused in one line that
names the reference path, whose autograd loop has one.
"""

from __future__ import annotations

import functools
import os

import torch

import lib.kernels.lif_portable as lif_portable
from lib.base.errors import ConfigError
from lib.kernels.lif_reference import lif_reference
from lib.runtime.lif_path import LIF_PATH_ENV, PATHS, check_path_env


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def choose_path(device: torch.device, path: str | None = None,
                dtype: torch.dtype = torch.float32) -> str:
    """The kernel for `dtype` tensors on `device`: `path` or LIF_PATH_ENV if set (not "auto"),
    else triton on CUDA with compute capability >= 7.0 (float64 aside: few GPUs have fast
    float64 dots), scan on XLA, portable elsewhere. A forced path this device cannot run
    is a ConfigError naming what to use instead."""
    if path is None:
        check_path_env()
    path = path or os.environ.get(LIF_PATH_ENV) or "auto"
    if path not in PATHS:
        raise ConfigError(f"path={path!r} is not one of {PATHS}; pass one of them or None.")
    if path == "triton":
        _check_triton(device)
    if path == "scan" and device.type != "xla":
        raise ConfigError(f"the scan path runs on XLA tensors only (torch_xla's While loop), "
                          f"not {device.type}; use 'auto' or 'portable'.")
    if path != "auto":
        return path
    if device.type == "xla":
        return "scan"
    if (device.type == "cuda" and dtype != torch.float64
            and torch.cuda.get_device_capability(device) >= (7, 0) and triton_available()):
        return "triton"
    return "portable"


def _check_triton(device: torch.device) -> None:
    forced = f"the triton LIF path ({LIF_PATH_ENV} or path='triton')"
    if device.type not in ("cuda", "cpu"):
        other = "scan" if device.type == "xla" else "portable"
        raise ConfigError(f"{forced} runs on CUDA GPUs only, not on {device.type}; use "
                          f"'{other}' or 'auto' there.")
    if not triton_available():
        raise ConfigError(f"{forced} needs the triton package, which is not installed here; "
                          "`pip install triton` on a CUDA machine, or use 'portable' or 'auto'.")
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError("the triton path on CPU tensors runs only under Triton's interpreter; "
                          "set TRITON_INTERPRET=1 before Python starts, or use 'portable'.")


def describe_path(device: torch.device) -> str:
    """Which path the run's LIF layers take on `device`, and why, for its device line."""
    forced = os.environ.get(LIF_PATH_ENV)
    why = f"{LIF_PATH_ENV}={forced}" if forced and forced != "auto" else "auto"
    return f"LIF path {choose_path(device)} ({why})"


def lif_notes(device_type: str) -> tuple[str, ...]:
    """`RunConfig.device_notes` of a workload with LIF layers: the path they take on
    `device_type`; a ConfigError where a forced path cannot run there."""
    return (describe_path(torch.device(device_type)),)


def _kernels(path: str):
    if path == "triton":
        import lib.kernels.lif_triton as lif_triton  # imports triton: only when asked for

        return lif_triton
    return lif_portable


def _forward(cur: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, beta: float,
             threshold: float, slope: float, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(spikes in cur's dtype, membranes in float32 for 16-bit cur, else cur's dtype)."""
    with torch.autocast(cur.device.type, enabled=False):  # the op picks its own precision
        return _kernels(path).forward(cur, weight, bias, beta, threshold)


lif_forward = torch.library.custom_op("train_anywhere::lif_forward", _forward, mutates_args=())


@lif_forward.register_fake
def _(cur, weight, bias, beta, threshold, slope, path):
    # contiguous, as every path returns them (empty_like would keep a transposed cur's strides)
    return cur.new_empty(cur.shape), cur.new_empty(
        cur.shape, dtype=lif_portable.compute_dtype(cur.dtype))


def _backward_op(grad: torch.Tensor, mem: torch.Tensor, weight: torch.Tensor, beta: float,
                 threshold: float, slope: float,
                 path: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d cur, d weight, d bias) given the spikes' gradient and the membranes lif_forward
    returned (the only tensor saved: spikes are [U > thr], recomputed)."""
    with torch.autocast(mem.device.type, enabled=False):
        return _kernels(path).backward(grad, mem, weight, beta, threshold, slope)


lif_backward = torch.library.custom_op("train_anywhere::lif_backward", _backward_op,
                                       mutates_args=())
# The Python bodies of this package's ops, for lib/kernels/count.py to count inside them.
IMPLEMENTATIONS = {"lif_forward": _forward, "lif_backward": _backward_op}


@lif_backward.register_fake
def _(grad, mem, weight, beta, threshold, slope, path):
    # d cur contiguous in grad's dtype (the input's), whatever the strides grad arrives in
    return grad.new_empty(grad.shape), weight.new_empty(weight.shape), weight.new_empty(
        weight.shape[0])


def _no_second_derivative(ctx, *grads):
    raise NotImplementedError(
        f"lif_multistep's {ctx.path} path has a first derivative only (its backward is a "
        f"hand-written kernel); for a second backward (create_graph=True) set {LIF_PATH_ENV}="
        "reference (or path='reference'): autograd through the plain loop.")


def _setup_backward_context(ctx, inputs, output) -> None:
    ctx.path = inputs[-1]


lif_backward.register_autograd(_no_second_derivative, setup_context=_setup_backward_context)


def _setup_context(ctx, inputs, output) -> None:
    _, weight, _, ctx.beta, ctx.threshold, ctx.slope, ctx.path = inputs
    ctx.save_for_backward(output[1], weight)
    ctx.dtype = inputs[0].dtype


def _backward(ctx, grad_spk, _grad_mem):
    mem, weight = ctx.saved_tensors
    if grad_spk is None:
        grad_spk = torch.zeros_like(mem, dtype=ctx.dtype)
    dcur, dw, db = lif_backward(grad_spk, mem, weight, ctx.beta, ctx.threshold, ctx.slope,
                                ctx.path)
    return dcur, dw, db, None, None, None, None


lif_forward.register_autograd(_backward, setup_context=_setup_context)


def lif_multistep(cur: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  beta: float, threshold: float, slope: float,
                  path: str | None = None) -> torch.Tensor:
    """Spikes (T, N, C) in cur's dtype of the LIF recurrence (module docstring), T >= 1;
    `bias` None: zeros; beta clamped to [0, 1] as snntorch's Leaky clamps it; threshold > 0;
    `path` forces a kernel (PATHS), None lets `choose_path` pick by device and dtype."""
    if bias is None:
        bias = weight.new_zeros(weight.shape[:1])
    if cur.dim() != 3 or weight.shape != (cur.shape[2], cur.shape[2]) or bias.shape != (
            cur.shape[2],):
        raise ConfigError(f"lif_multistep got currents {tuple(cur.shape)}, weight "
                          f"{tuple(weight.shape)}, bias {tuple(bias.shape)}; expected (T, N, C), "
                          "(C, C) and (C,): flatten pixels into N and the 1x1 conv's weight.")
    if cur.shape[0] == 0:  # the Triton kernel would read and write out of bounds
        raise ConfigError(f"lif_multistep got currents {tuple(cur.shape)}: T = 0 time steps; "
                          "expected T >= 1 (give the input at least one frame).")
    beta = min(max(float(beta), 0.0), 1.0)  # snntorch's Leaky: beta.clamp(0, 1) each step
    if threshold <= 0:
        raise ConfigError(f"threshold={threshold} must be > 0 (the reset at t = 0 assumes "
                          "U_-1 = 0 is below it); use a positive threshold such as 1.0.")
    kind = choose_path(cur.device, path, cur.dtype)
    if kind == "reference":
        return lif_reference(cur, weight, bias, beta, threshold, slope)
    if kind == "scan":
        from lib.kernels.lif_scan import lif_scan  # reaches torch_xla: only on XLA tensors

        return lif_scan(cur, weight, bias, beta, threshold, slope)
    return lif_forward(cur, weight, bias, float(beta), float(threshold), float(slope), kind)[0]
