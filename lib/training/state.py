"""What a checkpoint holds of a training task, and how it is put back on any device: weights,
optimizer, schedule, GradScaler, RNG states, and the optimizer steps and samples it counts."""

from __future__ import annotations

from lib.runtime.device_state import rng_state, set_rng_state
from lib.runtime.distributed import unwrap
from lib.training.backend import Backend


def state_of(task, backend: Backend, history: list, best: float | None, count: dict,
             partial=None) -> dict:
    """The checkpoint of `task` (a `lib.training.loop.Task`) at this point."""
    return {
        "steps": count["steps"],  # optimizer steps, whatever the micro-batches of each
        "samples": count["samples"],  # training samples those steps took, all devices
        "model": unwrap(task.model).state_dict(),
        "optimizer": task.optimizer.state_dict(),
        "scheduler": task.scheduler.state_dict() if task.scheduler is not None else None,
        "scaler": backend.scaler.state_dict() if backend.scaler is not None else None,
        "rng": rng_state(),
        "history": history,
        "best": best,
        "partial": partial,
        "extra": task.extra_state,
    }


def restore(task, backend: Backend, state: dict, log=print) -> None:
    """Load `state` (read to the CPU) into the task on this backend's device, whichever kind
    of device wrote it: weights and optimizer state move to the parameters' device, the
    GradScaler's state is used where this precision scales (fp16) and dropped where it does
    not, RNG states of device kinds this machine lacks are skipped; each said in one line."""
    unwrap(task.model).load_state_dict(state["model"])
    task.optimizer.load_state_dict(state["optimizer"])  # moved to the parameters' device
    if task.scheduler is not None and state["scheduler"] is not None:
        task.scheduler.load_state_dict(state["scheduler"])
    notes = []
    if backend.scaler is not None and state.get("scaler"):
        backend.scaler.load_state_dict(state["scaler"])
    elif state.get("scaler"):
        notes.append(f"its GradScaler state dropped ({backend.choice.precision.name} on "
                     f"{backend.choice.type} needs none)")
    elif backend.scaler is not None:
        notes.append("a new GradScaler started (the checkpoint was written without one)")
    task.extra_state.update(state.get("extra") or {})
    skipped = set_rng_state(state["rng"])
    if skipped:
        notes.append(f"its {' and '.join(skipped)} RNG state skipped (no such device here; "
                     "dropout goes on from this device's generator, the data order is the "
                     "seeded one)")
    if notes:
        log(f"checkpoint from another kind of device, resumed on {backend.choice.type}: "
            + "; ".join(notes))


def counters(state: dict | None, n_train: int) -> dict:
    """Optimizer steps and samples a checkpoint counts; derived for one written before it
    counted them (a step per batch of its position, the samples of its epoch records)."""
    if state is None:
        return {"steps": 0, "samples": 0}
    if "steps" in state:
        return {"steps": state["steps"], "samples": state["samples"]}
    epoch, batch = state["position"]
    samples = sum(r.get("train_samples", 0) for r in state["history"][:epoch])
    return {"steps": epoch * n_train + batch,
            "samples": samples + (state.get("partial") or {}).get("seen", 0)}
