"""The notebook's parameters cell, turned into a typed, validated, printable dataclass.

Every notebook's parameters are plain UPPER_CASE literals; `Workload.from_params(globals())`
refuses any UPPER_CASE name the workload does not know (a misspelt `-p EPOCH 1` would
otherwise train the defaults), reads the ones named like its fields (lower-cased), checks
their types (papermill can pass `EPOCHS="ten"`) and values, and returns the config. This is
the one place a parameter is validated. A workload subclasses `RunConfig` and adds its own
fields and checks.

`identity()` is the experiment a run folder holds: every parameter that changes what is
computed. The rest (`RUN_SETTINGS`: how long, where, on what) may change between sessions of
the same run; see `lib.runs.identity`.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from lib.base.errors import ConfigError, front_end, how_to_set, literal
from lib.runs.trackers import NAMES as TRACKER_NAMES
from lib.runtime.platforms import ANY, DEVICE_CHOICES, PLATFORMS, default_dirs, get_platform
from lib.training import batch

__all__ = ["ConfigError", "RunConfig", "RESUME_CHOICES"]

RESUME_CHOICES = ("auto", "new", "require")
# Parameters that may change between sessions of one run: where and on what it trains, how
# often it saves, how it resumes. EPOCHS too, unless the lr schedule spans them.
RUN_SETTINGS = frozenset({"platform", "device", "data_dir", "out_dir", "checkpoint_minutes",
                          "resume", "batch_size", "micro_batch", "epochs", "compile",
                          "trackers"})


def _type_ok(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (tuple, list):
        return isinstance(value, (tuple, list)) and all(
            _type_ok(v, typing.get_args(annotation)[0]) for v in value
        )
    return isinstance(value, annotation)


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (tuple, list):
        return f"a list of {_type_name(typing.get_args(annotation)[0])}"
    return "None" if annotation is type(None) else annotation.__name__


@dataclass
class RunConfig:
    """Parameters every notebook has (the parameter contract)."""

    WORKLOAD: ClassVar[str] = ""

    platform: str
    epochs: int
    lr: float
    seed: int = 0
    device: str = "auto"
    data_dir: str | None = None
    out_dir: str | None = None
    sample_data: bool = False
    smoke: bool = False
    batch_size: int | None = None
    # Samples per forward/backward on one device: "auto" (what fits, found and remembered)
    # or a number dividing the per-device batch; gradients add up to it (lib.training.batch).
    micro_batch: int | str = "auto"
    checkpoint_minutes: float = 10.0
    smoke_batches: int = 6  # train (and eval) batches per epoch in smoke mode
    resume: str = "auto"  # "auto", "new" (afresh in a new sub-folder) or "require"
    compile: bool | str = "auto"  # torch.compile: "auto" (where it helps), True or False
    # where the run's records go besides metrics.jsonl (lib/runs/trackers.py)
    trackers: list[str] = field(default_factory=lambda: ["tensorboard"])

    # True where the lr schedule is laid over EPOCHS (cosine to the last epoch): then a
    # changed EPOCHS changes every remaining step's lr, so it defines the experiment.
    SCHEDULE_SPANS_EPOCHS: ClassVar[bool] = False
    # True for a workload whose OUT_DIR holds a grid of runs (one folder per cell).
    GRID: ClassVar[bool] = False
    # The default BATCH_SIZE per device, per accelerator ("cuda": a 16 GB T4/P100, "xla": a
    # v5e chip's 16 GB HBM, "mps": a Mac's memory shared with the OS).
    BATCH_SIZES: ClassVar[dict[str, int]] = {}
    # What COMPILE = "auto" does per device type ("cpu", "cuda"), where torch.compile works
    # there; missing: off (lib.runtime.compile).
    COMPILE_AUTO: ClassVar[dict[str, bool]] = {}

    @classmethod
    def parameter_names(cls) -> list[str]:
        return [f.name.upper() for f in fields(cls)]

    @classmethod
    def check_names(cls, namespace: dict[str, Any]) -> None:
        """Refuse UPPER_CASE names that are not parameters (a typo would train defaults)."""
        known = cls.parameter_names()
        for name in namespace:
            if name.isupper() and not name.startswith("_") and name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                where = {"cli": "-p argument", "papermill": "papermill -p argument",
                         "notebook": "parameters cell"}[front_end()]
                raise ConfigError(
                    f"unknown parameter {name} for {cls.WORKLOAD}: {hint}Its parameters are "
                    f"{', '.join(known)}. Fix the name in the {where}.")

    @classmethod
    def from_params(cls, namespace: dict[str, Any]) -> RunConfig:
        """Build from a notebook namespace: field `lr` is read from `LR`, and so on."""
        cls.check_names(namespace)
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in fields(cls):
            name = f.name.upper()
            if name not in namespace:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ConfigError(f"parameter {name} is missing; "
                                      f"{how_to_set(name, '...')}.")
                continue
            value = namespace[name]
            if not _type_ok(value, hints[f.name]):
                # A single value where a list is expected (-p TRACKERS wandb): the fix is the
                # user's value as a list, not the default.
                meant = [value] if _type_ok([value], hints[f.name]) else cls.example(f.name)
                raise ConfigError(
                    f"{name}={value!r} has type {type(value).__name__}; expected "
                    f"{_type_name(hints[f.name])}; {how_to_set(name, meant)}."
                )
            kwargs[f.name] = list(value) if isinstance(value, tuple) else value
        return cls(**kwargs)

    def __post_init__(self) -> None:
        get_platform(self.platform)  # raises the clear "unknown PLATFORM" message
        if self.device not in DEVICE_CHOICES:
            raise ConfigError(f"unknown DEVICE {self.device!r}; expected one of "
                              f"{list(DEVICE_CHOICES)}; {how_to_set('DEVICE', 'auto')} (the "
                              "best device this machine has).")
        self._choice("resume", self.resume, RESUME_CHOICES)
        if isinstance(self.compile, str) and self.compile != "auto":
            raise ConfigError(f"COMPILE={self.compile!r} is not a choice; expected \"auto\" "
                              "(compile where it helps), True or False; "
                              f"{how_to_set('COMPILE', 'auto')}.")
        self._trackers()
        self._positive("epochs", self.epochs)
        if self.lr is not None:  # a workload may let None mean "the method's default"
            self._positive("lr", self.lr)
        self._positive("checkpoint_minutes", self.checkpoint_minutes)
        self._positive("smoke_batches", self.smoke_batches)
        if self.batch_size is not None:
            self._positive("batch_size", self.batch_size)
        if isinstance(self.micro_batch, str) and self.micro_batch != "auto":
            raise ConfigError(f"MICRO_BATCH={self.micro_batch!r} is not a choice; expected "
                              "\"auto\" (what fits on this device) or a number of samples; "
                              f"{how_to_set('MICRO_BATCH', 'auto')}.")
        if not isinstance(self.micro_batch, str) and self.micro_batch <= 0:
            raise ConfigError(f"MICRO_BATCH={self.micro_batch!r} must be > 0; "
                              f"{how_to_set('MICRO_BATCH', 'auto')} (what fits on this device).")
        if self.seed is not None and self.seed < 0:
            raise ConfigError(f"SEED={self.seed} is negative; expected an integer >= 0; "
                              f"{how_to_set('SEED', self.example('seed'))}.")
        self.validate()

    def validate(self) -> None:
        """Workload-specific checks; override in subclasses."""

    def _trackers(self) -> None:
        """TRACKERS: known names, each once (a tracker listed twice would log every epoch
        twice)."""
        for name in self.trackers:
            if name not in TRACKER_NAMES or self.trackers.count(name) > 1:
                what = "is listed twice" if name in TRACKER_NAMES else "is not a tracker"
                raise ConfigError(
                    f"TRACKERS={literal(self.trackers)}: {name!r} {what}; expected each of "
                    f"{list(TRACKER_NAMES)} at most once; "
                    f"{how_to_set('TRACKERS', self._trackers_meant())}.")

    def _trackers_meant(self) -> list[str]:
        """TRACKERS as the user likely meant it: each known name once, a misspelt one as the
        closest name, an unknown one left out (none left: the default)."""
        meant = []
        for name in self.trackers:
            close = difflib.get_close_matches(str(name), TRACKER_NAMES, n=1, cutoff=0.6)
            if close and close[0] not in meant:
                meant.append(close[0])
        return meant or self.example("trackers")

    def check_micro_batch(self) -> None:
        """Refuse a MICRO_BATCH no device of a new run can take, before anything starts (the
        rule is the batch plan's, whose arithmetic imports no torch)."""
        batch.check_micro_batch(self)

    @classmethod
    def closed_choices(cls, namespace: dict[str, Any]) -> dict[str, tuple]:
        """NAME -> the values a parameter may take, for each parameter checked against a
        closed list when `namespace` (a parameters cell's values) is validated: DEVICE, and
        every `_choice` a workload's checks make (Colab's form shows them as drop-downs)."""
        seen = {"DEVICE": tuple(DEVICE_CHOICES)}

        class Recording(cls):  # the same checks, each closed list written down
            @classmethod
            def _choice(klass, name, value, choices):
                seen[name.upper()] = tuple(choices)
                return super()._choice(name, value, choices)

        Recording.from_params(namespace)
        return seen

    @classmethod
    def example(cls, field_name: str):
        """A valid value of `field_name` to show in a fix: its default, else 1."""
        f = next((f for f in fields(cls) if f.name == field_name), None)
        default = None if f is None else f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        return 1 if default is None or default is dataclasses.MISSING else default

    def _positive(self, name: str, value) -> None:
        if value <= 0:
            example = self.example(name)
            if not isinstance(example, (int, float)) or example <= 0:
                example = 1
            raise ConfigError(
                f"{name.upper()}={value!r} must be > 0; {how_to_set(name.upper(), example)}."
            )

    @staticmethod
    def _non_negative(name: str, value, hint: str) -> None:
        """None passes; a negative value raises, the message ending in `hint` (the fix)."""
        if value is not None and value < 0:
            raise ConfigError(f"{name.upper()}={value!r} must be >= 0{hint}")

    @classmethod
    def _choice(cls, name: str, value: str, choices) -> None:
        if value not in choices:
            example = cls.example(name)
            example = example if example in choices else sorted(choices)[0]
            raise ConfigError(
                f"unknown {name.upper()} {value!r}; expected one of {sorted(choices)}; "
                f"{how_to_set(name.upper(), example)}."
            )

    # Derived settings -------------------------------------------------------------------
    @classmethod
    def run_settings(cls) -> frozenset[str]:
        """The fields that may change between sessions of one run (see `identity`)."""
        return RUN_SETTINGS - {"epochs"} if cls.SCHEDULE_SPANS_EPOCHS else RUN_SETTINGS

    def identity(self, global_batch: int) -> dict[str, Any]:
        """The experiment: every parameter that changes what is computed, the global batch."""
        params = {k: v for k, v in self.to_dict().items() if k not in self.run_settings()}
        return {"workload": self.WORKLOAD, **params, "global_batch_size": global_batch}

    def device_notes(self, device_type: str) -> tuple[str, ...]:
        """What the run's device line adds for this workload on `device_type` (a workload
        with its own kernels says which ran); none by default."""
        return ()

    def note(self) -> str | None:
        """What every epoch row of this run says beside its numbers ("synthetic sample")."""
        from lib.data.samples import NOTE

        return NOTE if self.sample_data else None

    def smoke_shrinks(self) -> str:
        """What else SMOKE makes smaller in this workload (e.g. its model), as `; ...`."""
        return ""

    def sample_and_smoke_deviations(self) -> list[str]:
        """The deviations from a paper's setup that every workload can have."""
        out = []
        if self.sample_data:
            out.append("SAMPLE_DATA = True (the offline sample, not the dataset)")
        if self.smoke:
            out.append(f"SMOKE = True ({self.smoke_batches} batches per epoch"
                       f"{self.smoke_shrinks()})")
        return out

    def experiments(self, global_batch: int) -> list[tuple[str, dict[str, Any]]]:
        """(run folder under OUT_DIR, identity) of every run a grid workload trains."""
        return [(".", self.identity(global_batch))]

    def varying_shapes(self) -> str:
        """Why the model's input shape changes between batches ("" when it does not): then
        `COMPILE = "auto"` does not compile (each new shape would compile again)."""
        return ""

    def resolved_batch_size(self, device: str | None = None) -> int:
        """BATCH_SIZE, else the workload's default on this platform (`default_batch`) for the
        device found (`device`: the local notebook's follows what this machine has)."""
        if self.batch_size is not None:
            return self.batch_size
        return max(1, round(self.default_batch(self.platform, device) * self.batch_scale()))

    def batch_scale(self) -> float:
        """A factor on BATCH_SIZES for this config (a workload whose datasets differ in size)."""
        return 1.0

    def default_global_batch(self, devices: int, device: str | None = None) -> int:
        """A new run's global batch when BATCH_SIZE is None: a paper preset's official batch
        (reached by accumulation where a device cannot hold it), else the default per device
        x `devices`."""
        official = self.official_batch()
        return official if official is not None else self.resolved_batch_size(device) * devices

    def official_batch(self) -> int | None:
        """The global batch of the paper this workload reproduces; None: not a paper preset."""
        return None

    def deviations(self) -> list[str]:
        """Each setting that differs from the paper's, one phrase each ([] for a workload
        that reproduces no paper); the batch's are the session's (`Session.deviations`)."""
        return []

    def step_batch(self, device: str) -> int | None:
        """The samples one step holds by default on a `device` of this platform (BATCH_SIZES,
        scaled to its memory): MICRO_BATCH = "auto" starts near it. None where the workload
        names no limit (the CPU)."""
        if device not in self.BATCH_SIZES:
            return None
        scaled = round(self.BATCH_SIZES[device] * PLATFORMS[self.platform].batch_scale)
        return max(1, round(max(1, scaled) * self.batch_scale()))

    @classmethod
    def default_batch(cls, platform: str, device: str | None = None) -> int:
        """The default batch per device on `platform`: BATCH_SIZES for its accelerator, scaled
        to its GPU's memory (`Platform.batch_scale`). The local notebook (accelerator ANY)
        takes the entry of the device found, and on the CPU (or before the device is known)
        the "mps" one: a laptop's memory."""
        profile = PLATFORMS[platform]
        kind = profile.accelerator
        if kind == ANY:
            kind = device if device in cls.BATCH_SIZES else "mps"
        if kind not in cls.BATCH_SIZES:
            raise ConfigError(
                f"BATCH_SIZE=None, but {cls.WORKLOAD} has no default batch for a "
                f"{kind} platform ({platform}); {how_to_set('BATCH_SIZE', 32)} (or another "
                f"size), or add {kind!r} to BATCH_SIZES in lib/workloads/{cls.WORKLOAD}.py.")
        return max(1, round(cls.BATCH_SIZES[kind] * profile.batch_scale))

    def paths(self, runtime: str) -> tuple[Path, Path]:
        """(data_dir, out_dir): the parameters if given, else `runtime`'s defaults."""
        data, out = default_dirs(self.WORKLOAD, runtime)
        data = Path(self.data_dir).expanduser() if self.data_dir else data
        out = Path(self.out_dir).expanduser() if self.out_dir else out
        return data, out

    def to_dict(self) -> dict[str, Any]:
        """Plain literals only: this is what checkpoints and metrics files store."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        rows = [f"  {k.upper():<20} {v!r}" for k, v in self.to_dict().items()]
        return f"{type(self).__name__} ({self.WORKLOAD})\n" + "\n".join(rows)
