"""Checks shared by the XLA lane's notebook tests (imported only where torch_xla is)."""

from __future__ import annotations

from pathlib import Path

import torch

from lib.runs.checkpoints import to_cpu
from lib.runs.records import read_jsonl
from lib.runtime import xla


def compiles_per_epoch(metrics: Path) -> list[int]:
    """`xla_compiles` of each epoch record, asserted flat after the first epoch (static
    shapes: the step, the evaluation and the metrics compile once)."""
    compiles = [r["xla_compiles"] for r in read_jsonl(metrics)]
    assert compiles[0] > 0 and all(c == compiles[0] for c in compiles[1:]), compiles
    return compiles


def cpu_and_xla_outputs(build, checkpoint: Path, inputs: torch.Tensor):
    """(output on a plain CPU, output on XLA moved back) of `build(model_config)` with the
    checkpoint's weights, in eval mode."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    outputs = []
    for device in (torch.device("cpu"), xla.device()):
        model = build(state["model_config"])
        model.load_state_dict(state["model"])
        model.eval().to(device)
        with torch.no_grad():
            outputs.append(to_cpu(model(inputs.to(device))))
    return outputs
