"""COMPILE: whether a run's model goes through torch.compile, decided in this one place.

`COMPILE = "auto"` compiles where the device supports it (`lib.device.compile_support`: CUDA
sm_70+ with Triton, the CPU with a C++ compiler; never sm_60, MPS or XLA) and where it pays
for its compile time (`AUTO`, from `python -m bench.bench_compile`, BENCHMARKS.md);
`True` / `False` force it. The model is compiled in place (`nn.Module.compile`), so its
state_dict keeps its names (no `_orig_mod.` prefix): checkpoints load into an uncompiled
model, on any device.
"""

from __future__ import annotations

from torch import nn

from lib.device import DeviceChoice
from lib.errors import ConfigError

# "auto" per (device type, workload). CPU: the measured eager vs compiled table
# (BENCHMARKS.md, "torch.compile vs eager"). CUDA (not measured here: no GPU): on for the
# long convnet runs, whose BN/ReLU/attention pointwise ops Triton fuses and whose hundreds of
# epochs repay a compile of a minute or two; off for Fashion-MNIST (an epoch takes seconds
# on a GPU, so the compile costs more than it can save in 14 epochs) and Mamba-Spike (its
# front-end's loop over T steps is unrolled into the graph: compile time grows with T, and
# DT_US's variable T recompiles).
AUTO: dict[str, dict[str, bool]] = {
    "cpu": {"fashion_mnist": False, "optimizer_study": False, "mshnet": False,
            "mamba_spike": False},
    "cuda": {"fashion_mnist": False, "optimizer_study": True, "mshnet": True,
             "mamba_spike": False},
}
SMOKE_REASON = "SMOKE runs a few batches: compiling would take longer than they do"


def decide(setting: bool | str, workload: str, choice: DeviceChoice,
           smoke: bool = False) -> tuple[bool, str]:
    """(compile?, why) for COMPILE = `setting` on `choice`'s device."""
    supported, support_reason = choice.compile_ok, choice.compile_note
    if setting is False:
        return False, "COMPILE = False"
    if setting is True:
        if not supported:
            raise ConfigError(f"COMPILE=True, but torch.compile cannot run here: "
                              f"{support_reason}. Set COMPILE = \"auto\" (compiles where it "
                              "can and helps) or COMPILE = False.")
        return True, "COMPILE = True"
    if not supported:
        return False, support_reason
    if smoke:
        return False, SMOKE_REASON
    if AUTO.get(choice.type, {}).get(workload, False):
        return True, f"it pays off for {workload} on {choice.type} (BENCHMARKS.md)"
    return False, (f"not faster for {workload} on {choice.type} once its compile time is "
                   "counted (BENCHMARKS.md); COMPILE = True forces it")


def apply(model: nn.Module, on: bool) -> nn.Module:
    """Compile `model` in place when `on` (its parameter names and state_dict unchanged).

    Random ops (dropout) then draw from torch's generator exactly as in eager mode
    (inductor's `fallback_random`), not from inductor's own: compiling changes how a run
    computes, never what, and a resumed run's restored generator state still applies."""
    if on:
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
        model.compile()
    return model


def is_compiled(model: nn.Module) -> bool:
    return getattr(model, "_compiled_call_impl", None) is not None
