"""COMPILE: whether a run's model goes through torch.compile, decided in this one place.

`COMPILE = "auto"` compiles where the device supports it (`lib.runtime.device.compile_support`: CUDA
sm_70+ with Triton, the CPU with a C++ compiler; never sm_60, MPS or XLA) and where it pays
for its compile time (each workload's `COMPILE_AUTO`, from `python -m bench.bench_compile`,
BENCHMARKS.md);
`True` / `False` force it. The model is compiled in place (`nn.Module.compile`), so its
state_dict keeps its names (no `_orig_mod.` prefix): checkpoints load into an uncompiled
model, on any device.
"""

from __future__ import annotations

from torch import nn

from lib.base.errors import ConfigError
from lib.runtime.device import DeviceChoice

# Each workload's COMPILE_AUTO says, per device type, whether "auto" compiles; its comment
# gives the numbers. CPU: measured, `python -m bench.bench_compile` (BENCHMARKS.md,
# "torch.compile vs eager"): on only where the speed-up repays the compile within a default
# run. CUDA: a JUDGEMENT, not measured (no GPU here; `python -m bench.bench_compile --device
# cuda` on a GPU runtime replaces it), resting on PyTorch's own benchmark of torch.compile (163
# TIMM, HuggingFace and TorchBench models, A100, https://pytorch.org/get-started/pytorch-2.0/):
# 1.38x-1.76x faster training (geometric means per suite), so on for long convnet runs whose
# hundreds of epochs repay minutes of compiling.
SMOKE_REASON = "SMOKE runs a few batches: compiling would take longer than they do"


def decide(setting: bool | str, config, choice: DeviceChoice,
           smoke: bool = False, varying: str = "") -> tuple[bool, str]:
    """(compile?, why) for COMPILE = `setting` on `choice`'s device, for the workload whose
    RunConfig (class or instance) is `config`; `varying` says why the input shape changes
    between batches ("" when it does not)."""
    workload = config.WORKLOAD
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
    if varying:
        return False, f"{varying}: each new shape would compile again"
    if config.COMPILE_AUTO.get(choice.type, False):
        return True, (f"it pays off for {workload} on {choice.type} (BENCHMARKS.md); the first "
                      "step compiles the model, which takes minutes (longer with more time "
                      "bins); COMPILE = False starts at once")
    return False, (f"not faster for {workload} on {choice.type} once its compile time is "
                   "counted (BENCHMARKS.md); COMPILE = True forces it")


def apply(model: nn.Module, on: bool) -> nn.Module:
    """Compile `model` in place when `on` (its parameter names and state_dict unchanged).

    Random ops (dropout) then draw from torch's generator exactly as in eager mode
    (inductor's `fallback_random`), not from inductor's own: compiling changes how a run
    computes, never what, and a resumed run's restored generator state still applies.

    The option travels with this compile (`options=`), not as inductor's global config: Dynamo
    does not guard on that config, so a model of the same class compiled earlier in the process
    without it would otherwise hand this one its graph, with inductor's own random masks."""
    if on:
        model.compile(options={"fallback_random": True})
    return model


def is_compiled(model: nn.Module) -> bool:
    return getattr(model, "_compiled_call_impl", None) is not None
