"""What a workload with parameters (`-p`, as `run` takes them) and a `--grid` (as `sweep`)
would train, read without torch.

A workload whose notebook fans out over list parameters (the optimizer study's OPTIMIZERS and
SEEDS, used when OPTIMIZER / SEED are None) is one run per combination, as its notebook trains
them; each `--grid` cell of it fans out the same way.
"""

from __future__ import annotations

import itertools

from lib.cli.params import UsageError, closest, collect_overrides, parameters
from lib.cli.plan.speeds import full_samples
from lib.cli.plan.work import Work
from lib.cli.sweep import cell_name, parse_grid


def _fan_out(values: dict) -> list[tuple[str, dict]]:
    """(name, values) of each run a workload's notebook trains for these parameter values."""
    axes = {k: v for k, v in values.items() if isinstance(v, list) and k.endswith("S")
            and k[:-1] in values and values[k[:-1]] is None}
    if not axes:
        return [("", {})]
    return [("-".join(f"{k[:-1].lower()}={v}" for k, v in zip(axes, combo, strict=True)),
             dict(zip([k[:-1] for k in axes], combo, strict=True)))
            for combo in itertools.product(*axes.values())]


def epochs_of(value) -> int:
    """EPOCHS as a count of epochs: a whole number above 0, else one line (UsageError)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"EPOCHS {value!r} is not a number of epochs; expected a whole number "
                         "above 0, e.g. -p EPOCHS 10.")
    return value


def from_workload(workload: str, pairs, grid_items) -> Work:
    """The runs `train-anywhere run WORKLOAD -p ...` (or `sweep --grid ...`) would train."""
    known = {p.name: p.default for p in parameters(workload)}
    overrides = collect_overrides(pairs)
    for name in overrides:
        if name not in known:
            raise UsageError(f"unknown parameter {name}{closest(name, known)} for {workload}; "
                             f"see `train-anywhere params {workload}`.")
    grid = parse_grid(grid_items, workload) if grid_items else {}
    base = {**known, **overrides}
    runs, cells = {}, {}
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        cell = cell_name(values) if values else ""
        for sub, _ in _fan_out({**base, **values}):
            name = "__".join(n for n in (cell, sub) if n) or workload
            runs[name] = epochs_of(values.get("EPOCHS", base.get("EPOCHS")))
            cells[name] = cell
    settings = {k.lower(): base.get(k.upper()) for k in ("dataset", "smoke", "sample_data")}
    said = " ".join(f"-p {k} {v}" for k, v in overrides.items())
    said += "".join(f" --grid {g}" for g in grid_items or [])
    return Work(workload, settings, runs, full_samples(workload, settings),
                f"{workload} {said.strip()}".strip(), cells,
                request={"params": [list(p) for p in pairs or []], "grid": grid_items or []},
                params={**{k.lower(): v for k, v in base.items()}, "workload": workload})


