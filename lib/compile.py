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

# "auto" per (device type, workload).
# CPU: measured, `python -m bench.bench_compile` (BENCHMARKS.md, "torch.compile vs eager"): on
# only where the speed-up repays the compile within a default run. Fashion CNN 0.66x and
# ResNet-18 0.94x: never repaid. MSHNet 1.05x (rounds 0.90-1.18: no clear gain); even at face
# value it saves 0.19 s of a 3.9 s step, so its 358 s compile takes ~1,900 steps (~10
# IRSTD-1k epochs) to repay: off. Mamba-Spike 1.56x / 1.50x / 1.53x at T = 20 / 60 / 300,
# compiling in 186 s / 451 s / 2,346 s: at the default T = 300, batch 8,
# 2,346 / (1/0.202 - 1/0.312 s per step) = ~1,350 steps, a fifth of one N-MNIST epoch of 7,500
# steps (100 epochs by default): on.
# CUDA: a JUDGEMENT, not measured (no GPU here; `python -m bench.bench_compile --device cuda`
# on a GPU runtime replaces it). PyTorch's own benchmark of torch.compile (163 TIMM,
# HuggingFace and TorchBench models, A100, https://pytorch.org/get-started/pytorch-2.0/)
# reports 1.38x-1.76x faster training (geometric means per suite); so on for the long convnet
# runs (the study's ResNet-18, MSHNet: hundreds of epochs repay minutes of compiling); off for
# Fashion-MNIST (14 epochs of seconds each) and Mamba-Spike (compile time grows with T, see
# above, and is paid again in every session).
AUTO: dict[str, dict[str, bool]] = {
    "cpu": {"fashion_mnist": False, "optimizer_study": False, "mshnet": False,
            "mamba_spike": True},
    "cuda": {"fashion_mnist": False, "optimizer_study": True, "mshnet": True,
             "mamba_spike": False},
}
SMOKE_REASON = "SMOKE runs a few batches: compiling would take longer than they do"


def decide(setting: bool | str, workload: str, choice: DeviceChoice,
           smoke: bool = False, varying: str = "") -> tuple[bool, str]:
    """(compile?, why) for COMPILE = `setting` on `choice`'s device; `varying` says why the
    input shape changes between batches ("" when it does not)."""
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
    if AUTO.get(choice.type, {}).get(workload, False):
        return True, (f"it pays off for {workload} on {choice.type} (BENCHMARKS.md); the first "
                      "step compiles the model, which takes minutes (longer with more time "
                      "bins); COMPILE = False starts at once")
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
