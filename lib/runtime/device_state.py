"""What a device holds besides the model, for a checkpoint or a redone step: the random
generators of every device kind this machine has (`rng_state`, `set_rng_state`), and the
memory a failed step left cached (`free_memory`). Used by the checkpoints
(`lib.training.state`) and by a step redone after an out-of-memory error
(`lib.training.backend`), so both save and restore the same generators.
"""

from __future__ import annotations

import gc
import random

import torch


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if torch.backends.mps.is_available():  # dropout on MPS draws from its own generator
        state["mps"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state: dict) -> list[str]:
    """Restore the generators this machine has; return the device kinds whose saved state
    was skipped (a checkpoint from a machine with a GPU or a Mac, resumed elsewhere)."""
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    skipped = []
    if "cuda" in state:
        if torch.cuda.is_available():
            # one state per GPU it had; a machine with fewer GPUs takes the first ones
            saved = list(state["cuda"])[:torch.cuda.device_count()]
            for i, rng in enumerate(saved):
                torch.cuda.set_rng_state(rng, i)
        else:
            skipped.append("cuda")
    if "mps" in state:
        if torch.backends.mps.is_available():
            torch.mps.set_rng_state(state["mps"])
        else:
            skipped.append("mps")
    return skipped


def free_memory(device: torch.device) -> None:
    """Give back what a failed step left allocated (after its exception is gone)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()
