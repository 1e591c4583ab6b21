"""Seconds per epoch per platform, each with where it came from, measured before guessed:

1. "measured": the user's own sessions (sessions.jsonl) of runs of the same workload under a
   folder, weighted by the epochs each trained; a run on other settings (another DATASET, the
   sample, SMOKE) counts scaled by the training samples per epoch (its samples/s);
2. "shipped": the project's measured figure for the platform's accelerator (speeds.toml beside
   this module: device, date, command), scaled the same way;
3. "unmeasured": no figure, and the one command that measures it (a SMOKE session there).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from lib.cli.speed import timed_sessions
from lib.runs.identity import read_config
from lib.runs.records import read_jsonl

DATA = Path(__file__).with_name("speeds.toml")
SETTINGS = ("dataset", "smoke", "sample_data")  # what changes an epoch's size or cost


@dataclass(frozen=True)
class Speed:
    platform: str
    seconds: float | None  # per epoch; None: unmeasured
    kind: str  # "measured" | "shipped" | "unmeasured"
    source: str  # where the figure came from, or the command that measures it


def shipped() -> dict:
    return tomllib.loads(DATA.read_text())


def settings_of(folder: Path) -> tuple[str | None, dict]:
    """(workload, the settings in SETTINGS) a run folder's config.json records."""
    config = read_config(folder) or {}
    experiment = config.get("experiment", config)
    merged = {**config, **experiment}
    return experiment.get("workload"), {k: merged.get(k) for k in SETTINGS}


def full_samples(workload: str, settings: dict, data: dict | None = None) -> int | None:
    """Training samples per epoch of `workload` at `settings` on its full dataset; None for
    the sample or SMOKE (their size is measured, not known) or an unknown dataset."""
    if settings.get("smoke") or settings.get("sample_data"):
        return None
    table = (data or shipped()).get("train_samples", {}).get(workload, {})
    return table.get(settings.get("dataset") or "", table.get(""))


def run_samples(folder: Path) -> int | None:
    """Training samples per epoch a run folder's metrics.jsonl recorded (its last epoch)."""
    records = read_jsonl(Path(folder) / "metrics.jsonl")
    return next((r["train_samples"] for r in reversed(records) if r.get("train_samples")), None)


def measured(under: Path, workload: str, settings: dict, samples: int | None) -> dict:
    """platform -> Speed from the sessions of `workload` runs under `under` (module doc, 1)."""
    sums: dict[str, list] = {}
    for folder, rows in timed_sessions(Path(under)):
        name, theirs = settings_of(folder)
        if name != workload:
            continue
        same = theirs == settings
        for row in rows:
            epochs = row.get("epochs_trained") or 0
            if not epochs or row.get("seconds_per_epoch") is None:
                continue
            if same:
                seconds = row["seconds_per_epoch"]
            elif samples and row.get("samples_per_s"):
                seconds = samples / row["samples_per_s"]
            else:
                continue  # another size, and this one's unknown: no honest scale
            acc = sums.setdefault(row.get("platform", "?"), [0, 0.0, 0, False])
            acc[0] += epochs
            acc[1] += seconds * epochs
            acc[2] += 1
            acc[3] = acc[3] or not same
    return {p: Speed(p, total / epochs, "measured",
                     f"measured: {n} session(s), {epochs} epoch(s) under {under}"
                     + (" (scaled by training samples per epoch)" if scaled else ""))
            for p, (epochs, total, n, scaled) in sorted(sums.items())}


def from_shipped(workload: str, platform: str, accelerator: str | None,
                 samples: int | None, data: dict | None = None) -> Speed | None:
    """The project's figure for the platform's accelerator (module doc, 2), if it has one."""
    data = data or shipped()
    for fig in data.get("measured", []):
        if fig["workload"] == workload and accelerator and fig["accelerator"].lower() in \
                accelerator.lower() and samples:
            return Speed(platform, samples / fig["samples_per_s"], "shipped",
                         f"the project's {fig['accelerator']} figure ({fig['samples_per_s']:g} "
                         f"samples/s, {fig['device']}, {fig['date']}, {fig['command']}; "
                         f"{fig['note']})")
    return None


def measure_command(workload: str, platform: str, backend: str | None) -> str:
    """The one command that measures `platform`'s speed: a SMOKE session there."""
    smoke = "-p SMOKE True -p EPOCHS 1"
    if backend in ("kaggle", "colab"):
        return (f"train-anywhere sweep {workload} --on {backend} --platform {platform} "
                f"--grid SEED=0 {smoke} --out runs/speed-{platform}")
    if backend == "local" or platform == "local":
        return f"train-anywhere run {workload} {smoke} --out runs/speed-local"
    return (f"open notebooks/{platform}/{workload}.ipynb there with SMOKE = True, EPOCHS = 1, "
            f"then copy its run folder under runs/")


def speeds(workload: str, settings: dict, platforms: dict, under: Path | None,
           samples: int | None) -> dict:
    """platform -> Speed for each of `platforms` (name -> its quotas.toml table)."""
    found = measured(under, workload, settings, samples) if under and Path(under).is_dir() \
        else {}
    out = {}
    for name, table in platforms.items():
        like = table.get("like")  # your own machine measured as another platform
        speed = found.get(name) or (found.get(like) if like else None)
        speed = speed or from_shipped(workload, name, table.get("accelerator"), samples)
        out[name] = speed or Speed(name, None, "unmeasured", measure_command(
            workload, name, table.get("backend")))
    return out
