"""Seconds per epoch per platform, each with where it came from, measured before guessed.

A speed is a measurement of something (DESIGN.md, round seven): of the device that ran (its
accelerator's name and count, the precision) and of what sets a step's cost (the workload,
its model's sizes, the input's size and T: the experiment's parameters, the model config the
session recorded). So:

1. "measured": the user's own sessions (sessions.jsonl) of runs under a folder, weighted by
   the epochs each trained. A session counts only for a platform whose accelerator is the
   device it really ran on (`runs_on`): a session continued on this CPU under the name
   `colab_t4` is a speed of this CPU, named so ("this CPU (AMD EPYC ...)"), usable wherever
   that device is (`local` when it is this machine's CPU), never Colab's T4's. It counts only
   for the same model and input (`comparable`): a SMOKE session (another, smaller model) never
   stands in for the real model, nor another DATASET (another input size and T) for this
   one; only the sample (the same model, fewer samples) is scaled, by the samples of an epoch.
2. "shipped": the project's figure for the platform's accelerator (speeds.toml beside this
   module: what it measured, on what device, when, with what command), for the same dataset
   and the real model only.
3. "unmeasured": no figure, and the one command that measures it (`measure_command`): here
   `train-anywhere measure`, elsewhere a session of the real model on the sample there.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lib.runs.identity import read_config, timed_sessions
from lib.runs.records import read_jsonl
from lib.runtime.cpu import cpu_model

DATA = Path(__file__).with_name("speeds.toml")
SETTINGS = ("dataset", "smoke", "sample_data")  # what changes an epoch's size or model
# Parameters that change neither a step's model nor its input: a run differing only in these
# measures the same thing. Everything else the experiment records must agree where both say.
COST_FREE = frozenset({"seed", "seeds", "epochs", "sample_data", "lr", "weight_decay", "gamma",
                       "momentum", "clip_grad", "label_smoothing", "warmup_epochs",
                       "global_batch_size", "optimizer", "optimizers", "note", "workload",
                       # a session's own settings (lib.training.config.RUN_SETTINGS)
                       "platform", "device", "data_dir", "out_dir", "checkpoint_minutes",
                       "resume", "batch_size", "micro_batch", "compile", "trackers"})
COUNT = re.compile(r"^\s*(\d+)\s*x\s*(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Speed:
    platform: str
    seconds: float | None  # per epoch; None: unmeasured
    kind: str  # "measured" | "shipped" | "unmeasured"
    source: str  # where the figure came from, or the command that measures it


@dataclass(frozen=True)
class Target:
    """What is planned, as far as its cost goes: the workload, its experiment's parameters
    (lower-case names, as config.json records them), its model config where a session
    recorded one, and the training samples of its epoch (None: unknown)."""

    workload: str
    params: dict
    samples: int | None = None
    model: dict | None = None


def shipped() -> dict:
    return tomllib.loads(DATA.read_text())


def settings_of(folder: Path) -> tuple[str | None, dict]:
    """(workload, the settings in SETTINGS) a run folder's config.json records."""
    _, params = params_of(folder)
    return params.get("workload"), {k: params.get(k) for k in SETTINGS}


def params_of(folder: Path) -> tuple[dict, dict]:
    """(config.json, the experiment's parameters with the workload) of a run folder (a folder
    from before experiments were recorded: the parameters its config.json kept)."""
    config = read_config(folder) or {}
    return config, dict(config.get("experiment", config))


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


def comparable(target: Target, params: dict, row: dict) -> str | None:
    """"same" when a session (`row`, of a run with experiment `params`) timed what `target`
    trains, "scaled" when it timed the same model and input on the sample (its samples/s
    then scale), None otherwise (another workload, model, input, or SMOKE against not)."""
    if params.get("workload") != target.workload:
        return None
    mine = target.params
    if bool(params.get("smoke")) != bool(mine.get("smoke")) or \
            (params.get("dataset") or "") != (mine.get("dataset") or ""):
        return None
    timed = (row.get("timed") or {}).get("model")
    if timed is not None and target.model is not None and timed != target.model:
        return None
    for key, value in mine.items():
        if key in COST_FREE or value is None or isinstance(value, list) or key not in params:
            continue
        if params[key] != value:
            return None
    if bool(params.get("sample_data")) == bool(mine.get("sample_data")):
        return "same"
    return "scaled"


def cpu_here() -> str:
    """This machine's CPU model, as a session row names it (lib.runtime.cpu)."""
    return cpu_model()


def device_label(row: dict) -> str:
    """The device a session ran on, in words: "this CPU (AMD EPYC 7B13)", "2 x Tesla T4"."""
    kind, name = row.get("device") or "?", row.get("accelerator")
    n = row.get("devices") or row.get("world_size") or 1
    if kind == "cpu":
        return f"this CPU ({name})" if name == cpu_here() else f"a CPU ({name or 'unnamed'})"
    name = name or {"cuda": "an unnamed GPU", "xla": "an XLA device", "mps": "Apple GPU"}.get(
        kind, kind)
    return f"{n} x {name}" if n > 1 else name


def runs_on(accelerator: str | None, platform: str, row: dict) -> bool:
    """Whether a session (`row`) ran on a platform's `accelerator` (quotas.toml's words:
    "2 x Tesla T4", "TPU v5e-8", "this machine"): the same kind of device, its name where
    the row records one, and as many of them."""
    kind, name = row.get("device"), (row.get("accelerator") or "").lower()
    want = (accelerator or "").strip()
    if want == "this machine":  # your own: a session recorded here, or on this CPU
        return (kind == "cpu" and row.get("accelerator") == cpu_here()) or (
            kind != "cpu" and row.get("platform") == platform)
    m = COUNT.match(want)
    count, want = (int(m[1]), m[2]) if m else (1, want)
    want = want.split("(")[0].strip().lower()
    n = row.get("devices") or 1
    if want.startswith("tpu"):
        size = re.search(r"-(\d+)$", want)
        return kind == "xla" and "cpu" not in name and (not size or n == int(size[1]))
    if kind != "cuda" or n != count or not want:
        return False
    return not name or want in name or name in want


def measured(under: Path, target: Target, platforms: dict) -> tuple[dict, list[dict]]:
    """({platform: Speed} from the sessions under `under` that ran on each platform's
    accelerator and timed `target` (module doc, 1); [each device measured that is none of
    `platforms`' accelerators: {"device", "seconds_per_epoch", "source"}])."""
    rows = []  # (row, seconds, scaled, its run folder's platform name)
    for folder, found in timed_sessions(Path(under)):
        _, params = params_of(folder)
        for row in found:
            how = comparable(target, params, row) if weight(row) else None
            if how == "same" and row.get("seconds_per_epoch") is not None:
                rows.append((row, row["seconds_per_epoch"], False))
            elif how == "scaled" and target.samples and row.get("samples_per_s"):
                rows.append((row, target.samples / row["samples_per_s"], True))
    out, used = {}, set()
    for name, table in platforms.items():
        like = table.get("like")  # your own machine, measured under another platform's name
        mine = [(i, r) for i, r in enumerate(rows)
                if runs_on(table.get("accelerator"), name, r[0])
                or (like and r[0].get("platform") == like)]
        if mine:
            used.update(i for i, _ in mine)
            out[name] = _speed(name, [r for _, r in mine], under)
    elsewhere: dict[str, list] = {}
    for i, r in enumerate(rows):
        if i not in used:
            elsewhere.setdefault(device_label(r[0]), []).append(r)
    return out, [{"device": d, "seconds_per_epoch": s.seconds, "source": s.source}
                 for d, s in ((d, _speed(d, rs, under)) for d, rs in sorted(elsewhere.items()))]


def weight(row: dict) -> int:
    """What a session's speed weighs: the epochs it trained; a measurement (`train-anywhere
    measure`: steps, no epoch) one; 0 for a session that timed nothing."""
    return row.get("epochs_trained") or (1 if row.get("measured_steps") else 0)


def _speed(name: str, rows: list, under: Path) -> Speed:
    epochs = sum(r.get("epochs_trained") or 0 for r, _, _ in rows)
    steps = sum(r.get("measured_steps") or 0 for r, _, _ in rows)
    seconds = sum(s * weight(r) for r, s, _ in rows) / sum(weight(r) for r, _, _ in rows)
    devices = sorted({device_label(r) for r, _, _ in rows})
    named = sorted({r.get("platform", "?") for r, _, _ in rows})
    scaled = any(x for _, _, x in rows)
    return Speed(name, seconds, "measured",
                 f"measured: {len(rows)} session(s), "
                 + (f"{epochs} epoch(s)" if epochs else "")
                 + (" and " if epochs and steps else "")
                 + (f"{steps} real-size step(s) after warm-up (train-anywhere measure)"
                    if steps else "")
                 + f" on {', '.join(devices)} "
                 f"(run as {', '.join(named)}) under {under}"
                 + (" (from the sample: the same model and input, scaled by training samples "
                    "per epoch)" if scaled else ""))


def from_shipped(target: Target, platform: str, accelerator: str | None,
                 data: dict | None = None) -> Speed | None:
    """The project's figure for the platform's accelerator (module doc, 2), if it has one for
    the real model on the target's dataset."""
    data = data or shipped()
    if not accelerator or not target.samples or target.params.get("smoke"):
        return None
    for fig in data.get("measured", []):
        if fig["workload"] == target.workload and fig["accelerator"].lower() in \
                accelerator.lower() and fig.get("dataset", "") == (
                    target.params.get("dataset") or ""):
            stale = f"; {fig['stale']}" if fig.get("stale") else ""
            return Speed(platform, target.samples / fig["samples_per_s"], "shipped",
                         f"the project's {fig['accelerator']} figure ({fig['samples_per_s']:g} "
                         f"samples/s: {fig['measured']}; {fig['device']}, {fig['date']}, "
                         f"{fig['command']}{stale})")
    return None


def unused_figures(target: Target, platforms: dict) -> list[str]:
    """The project's figures for `target` that no planned platform's accelerator takes, said
    with how to use one (a machine of yours with that accelerator)."""
    out = []
    for fig in shipped().get("measured", []):
        if any(from_shipped(target, name, table.get("accelerator"), {"measured": [fig]})
               for name, table in platforms.items()):
            continue
        one = from_shipped(target, "?", fig["accelerator"], {"measured": [fig]})
        if one is not None:
            out.append(f"  the project's {fig['accelerator']} figure: {one.seconds:.1f} s an "
                       f"epoch, for a machine of yours with one (--quotas FILE, e.g. "
                       f"docs/guides/plan-example.toml): {one.source}")
    return out


def measure_command(workload: str, platform: str, backend: str | None) -> str:
    """The one command that measures the real model's speed on `platform`: here, a few
    real-size steps timed after warm-up (lib/cli/measure.py); elsewhere, a session of the real
    model on the sample (the same model and input, minutes), whose row counts scaled."""
    if backend == "local" or platform == "local":
        # the sample: offline, the same model and input (drop it to time DATA_DIR's data)
        return f"train-anywhere measure {workload} -p SAMPLE_DATA True"
    sample = "-p SAMPLE_DATA True -p EPOCHS 3"
    if backend in ("kaggle", "colab"):
        return (f"train-anywhere sweep {workload} --on {backend} --platform {platform} "
                f"--grid SEED=0 {sample} --out runs/speed-{platform} (the real model on the "
                "sample there)")
    return (f"open notebooks/{platform}/{workload}.ipynb there with SAMPLE_DATA = True, "
            "EPOCHS = 3 (the real model on the sample), then copy its run folder under runs/")


def speeds(target: Target, platforms: dict, under: Path | None) -> tuple[dict, list[dict]]:
    """({platform: Speed} for each of `platforms` (name -> its quotas.toml table), the devices
    measured that are none of them (see `measured`))."""
    found, elsewhere = measured(under, target, platforms) if under and Path(under).is_dir() \
        else ({}, [])
    out = {}
    for name, table in platforms.items():
        speed = found.get(name) or from_shipped(target, name, table.get("accelerator"))
        out[name] = speed or Speed(name, None, "unmeasured", measure_command(
            target.workload, name, table.get("backend")))
    return out, elsewhere
