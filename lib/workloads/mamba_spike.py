"""Mamba-Spike on event cameras: parameters, data, task, training, results.

The official recipe (ECNU-Cross-Innovation-Lab/Mamba-Spike): AdamW lr 1e-3, weight decay
1e-4, gradient clipping at norm 1.0, cosine decay to 0.01 lr; batch 32 / 16 / 8 for N-MNIST /
DVS Gesture / CIFAR10-DVS; 100 epochs (train.py) or 200 (train_<dataset>.py); the sensors'
full 128x128 frames. A new run trains with its dataset's official batch on every platform;
`BATCH_SIZES` is what a step holds (16 on a T4 at DVS Gesture's size, scaled by the official
ratio for the others): a device that holds less accumulates gradients. Every setting
that differs from the official one is named by `MambaSpikeRunConfig.deviations()`, in the
config printout and in the results table.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lib.base.errors import how_to_set
from lib.data.catalog import EVENT_NAMES, OFFICIAL_TIME_BINS
from lib.runtime.lif_path import check_path_env
from lib.training.config import ConfigError, RunConfig
from lib.workloads import Workload

if TYPE_CHECKING:  # torch, the data and the model are imported where they run (the contract)
    import torch

    from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig
    from lib.session import Session
    from lib.training.loop import Task

BATCH_SCALE = {"nmnist": 2.0, "dvsgesture": 1.0, "cifar10dvs": 0.5}  # official 32 / 16 / 8
OFFICIAL_BATCH = {"nmnist": 32, "dvsgesture": 16, "cifar10dvs": 8}
OFFICIAL = {"lr": 1e-3, "weight_decay": 1e-4, "clip_grad": 1.0, "denoise_us": 10_000}
OFFICIAL_EPOCHS = (100, 200)  # --epochs of train.py and of the per-dataset train_*.py scripts
# DOWNSAMPLE = None keeps the sensors' full 128x128 frames (the official input) when a training
# step's activations fit the device, else halves H and W, which quarters them. The official
# DVS Gesture setting (T = 500, batch 16) needs ~28 GB in half precision at 128x128: more than
# the 16 GB of a T4, P100 or v5e chip (a Mac is assumed alike).
DEFAULT_DOWNSAMPLE = {"nmnist": 1, "dvsgesture": 2, "cifar10dvs": 2}  # when 128x128 does not fit
DEVICE_MEMORY_GB = 16.0
ACTIVATION_SHARE = 0.75  # of it for activations; weights, AdamW state and workspaces the rest
HALF_PRECISION = 0.5  # fp16 / bf16 autocast keeps activations in 2 bytes, not float32's 4
LR_FLOOR = 0.01  # cosine decays to this fraction of LR
# fp16's first loss scale: |grad| reaches up to 4.9 (fp32 on the CPU) and 8-16 (the H100 kit's fp16
# skipped 2**16..2**13), over 65,504 / 2**16; 2**10 fits up to 64 (BENCHMARKS.md, round six)
GRAD_SCALE = 2.0**10
SPLIT_SEED = 42  # the official CIFAR10-DVS 90/10 split
# Accuracy (%) reported by the authors: README of the official code (N-MNIST: repository only).
REPORTED = {"nmnist": 99.5, "dvsgesture": 97.8, "cifar10dvs": 92.5}
SIZE_OVERRIDES = ("d_model", "n_layers", "spike_channels")
# SMOKE checks that everything runs, in seconds: few frames and a small model, unless the
# parameters set them (the non-smoke defaults stay the official ones).
SMOKE_TIME_BINS = 12
SMOKE_SIZES = {"d_model": 32, "n_layers": 1, "spike_channels": 16}


@dataclass
class MambaSpikeRunConfig(RunConfig):
    """The official Mamba-Spike training defaults; framing and model sizes per dataset."""

    WORKLOAD = "mamba_spike"
    SCHEDULE_SPANS_EPOCHS = True  # cosine annealing over all EPOCHS
    BATCH_SIZES = {"cuda": 16, "xla": 32, "mps": 8}  # DVS Gesture's; scaled per DATASET
    # CPU, measured: 1.56x / 1.50x / 1.53x at T = 20 / 60 / 300, compiling in 186 / 451 /
    # 2,346 s: at T = 300, batch 8, repaid in ~1,350 steps, a fifth of one N-MNIST epoch: on.
    # CUDA: off (compile time grows with T and is paid again every session; lib/runtime/compile.py).
    COMPILE_AUTO = {"cpu": True, "cuda": False}

    epochs: int = 100
    lr: float = 1e-3  # AdamW
    dataset: str = "nmnist"
    n_time_bins: int | None = None  # None: the official 300 / 500 / 100 (unless DT_US is set)
    dt_us: int | None = None  # true bins of this many microseconds instead (variable T)
    fixed_t: int | None = None  # with DT_US: pad/crop every recording to this many frames
    downsample: int | None = None  # spatial factor; None: DEFAULT_DOWNSAMPLE[dataset]
    denoise_us: int | None = 10_000  # tonic Denoise filter time; None or 0: off
    weight_decay: float = 1e-4
    clip_grad: float | None = 1.0  # max gradient norm; None: no clipping
    d_model: int | None = None  # None: the dataset's preset (official sizes)
    n_layers: int | None = None
    spike_channels: int | None = None

    def device_notes(self, device_type: str) -> tuple[str, ...]:
        """The device line names the LIF path the spiking layers take (lib.kernels.lif)."""
        from lib.models.mamba_spike import lif_notes

        return lif_notes(device_type)

    def validate(self) -> None:
        check_path_env()  # TA_LIF_PATH, before anything starts
        self._choice("dataset", self.dataset, EVENT_NAMES)
        for name in ("n_time_bins", "dt_us", "fixed_t", "downsample", *SIZE_OVERRIDES):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name.upper()}={value!r} must be a positive integer or None "
                                  f"(None: {self._default_text(name)}); "
                                  f"{how_to_set(name.upper(), None)}.")
        self._check_framing()
        self._non_negative("denoise_us", self.denoise_us, " (0 or None: no denoising); e.g. "
                           "DENOISE_US = 10000 as the official code.")
        self._non_negative("weight_decay", self.weight_decay,
                           "; e.g. WEIGHT_DECAY = 1e-4 as the official code.")
        if self.clip_grad is not None:
            self._positive("clip_grad", self.clip_grad)

    def _check_framing(self) -> None:
        if self.n_time_bins is not None and self.dt_us is not None:
            raise ConfigError(
                f"N_TIME_BINS={self.n_time_bins!r} and DT_US={self.dt_us!r} are both set; "
                "expected one framing: set DT_US = None (N_TIME_BINS frames per recording) or "
                "N_TIME_BINS = None (frames of DT_US microseconds).")
        if self.fixed_t is not None and self.dt_us is None:
            raise ConfigError(
                f"FIXED_T={self.fixed_t!r} is set but DT_US is None; FIXED_T pads or crops "
                "DT_US framing, while N_TIME_BINS framing already has a fixed T. Set "
                "FIXED_T = None, or set DT_US (and N_TIME_BINS = None).")

    def _default_text(self, name: str) -> str:
        if name == "n_time_bins":
            return f"the official {OFFICIAL_TIME_BINS.get(self.dataset, '')}"
        if name == "downsample":
            return (f"the official 1 where it fits the device's memory, else "
                    f"{DEFAULT_DOWNSAMPLE.get(self.dataset, 1)}")
        if name in ("dt_us", "fixed_t"):
            return "off"
        return "the dataset's preset size"

    def smoke_shrinks(self) -> str:
        """SMOKE's own frame count and model sizes, where the parameters leave them unset."""
        unset = self.n_time_bins is None and self.dt_us is None
        parts = [f"{SMOKE_TIME_BINS} frames"] if unset else []
        parts += [f"{k.upper()} {v}" for k, v in SMOKE_SIZES.items() if getattr(self, k) is None]
        return "; " + ", ".join(parts) if parts else ""

    def framing(self) -> dict:
        """Keyword arguments of `event_datasets`, defaults resolved."""
        bins = self.n_time_bins
        if bins is None and self.dt_us is None:
            bins = SMOKE_TIME_BINS if self.smoke else OFFICIAL_TIME_BINS[self.dataset]
        return dict(n_time_bins=bins, dt_us=self.dt_us, fixed_t=self.fixed_t,
                    downsample=self.resolved_downsample(), denoise_us=self.denoise_us or None)

    def batch_scale(self) -> float:
        """BATCH_SIZES (DVS Gesture's) scaled by DATASET's official ratio."""
        return BATCH_SCALE[self.dataset]

    def official_batch(self) -> int:
        """DATASET's official batch (accumulated where a device cannot hold it: exact)."""
        return OFFICIAL_BATCH[self.dataset]

    def model_config(self, downsample: int | None = None) -> MambaSpikeConfig:
        """The dataset's preset at the frame size the data produces (or at `downsample`),
        sizes overridden."""
        from lib.data.events import frame_hw
        from lib.models.mamba_spike import MambaSpikeConfig

        hw = frame_hw(self.dataset, downsample or self.resolved_downsample())
        sizes = {k: getattr(self, k) for k in SIZE_OVERRIDES if getattr(self, k) is not None}
        if self.smoke:
            sizes = {**SMOKE_SIZES, **sizes}
        return MambaSpikeConfig.preset(self.dataset, input_hw=hw, **sizes)

    def frames(self) -> int | None:
        """Frames per recording: N_TIME_BINS or the official count, FIXED_T; None if variable."""
        if self.dt_us is not None:
            return self.fixed_t
        return self.n_time_bins or OFFICIAL_TIME_BINS[self.dataset]

    def varying_shapes(self) -> str:
        return "DT_US without FIXED_T: T changes between batches" if self.frames() is None else ""

    def full_size_gb(self) -> float | None:
        """Estimated activation memory (GB) of a training step at the full sensor size, with
        this T and per-device batch, in half precision; None when T is variable."""
        from lib.models.mamba_spike import activation_bytes

        t = self.frames()
        if t is None:
            return None
        cfg = self.model_config(downsample=1)
        return HALF_PRECISION * activation_bytes(cfg, self.resolved_batch_size(), t) / 1e9

    def resolved_downsample(self) -> int:
        """DOWNSAMPLE, else 1 (the official full frames) where they fit, else the default."""
        if self.downsample is not None:
            return self.downsample
        gb = self.full_size_gb()
        if gb is not None and gb <= ACTIVATION_SHARE * DEVICE_MEMORY_GB:
            return 1
        return DEFAULT_DOWNSAMPLE[self.dataset]

    def _downsample_deviation(self) -> str | None:
        from lib.data.events import frame_hw
        from lib.models.mamba_spike import parameter_count

        d = self.resolved_downsample()
        if d == 1:
            return None
        (h, w), (fh, fw) = frame_hw(self.dataset, d), frame_hw(self.dataset, 1)
        text = (f"DOWNSAMPLE = {d}: {h}x{w} frames, not the official {fh}x{fw} "
                f"({parameter_count(self.model_config()) / 1e6:.2f} M parameters, not "
                f"{parameter_count(self.model_config(downsample=1)) / 1e6:.2f} M)")
        if self.downsample is not None:
            return text
        gb, budget = self.full_size_gb(), ACTIVATION_SHARE * DEVICE_MEMORY_GB
        if gb is None:
            return (f"{text}, because T varies (DT_US without FIXED_T) and the memory of the "
                    "official size cannot be estimated; DOWNSAMPLE = 1 tries it")
        return (f"{text}, because at T = {self.frames()} and batch "
                f"{self.resolved_batch_size()} the official size needs about {gb:.0f} GB of "
                f"activations, more than the {budget:.0f} GB of a {DEVICE_MEMORY_GB:.0f} GB "
                "device left for them; "
                "DOWNSAMPLE = 1 with a smaller N_TIME_BINS or BATCH_SIZE trains it")

    def deviations(self) -> list[str]:
        """Each setting that differs from the official code's, one phrase each."""
        from lib.models.mamba_spike import PRESETS

        out = [f"{name.upper()} = {getattr(self, name)!r} (official: {OFFICIAL[name]!r})"
               for name in ("lr", "weight_decay", "clip_grad")
               if getattr(self, name) != OFFICIAL[name]]
        if self.epochs not in OFFICIAL_EPOCHS:
            out.insert(0, f"EPOCHS = {self.epochs} (official: 100 in train.py, 200 in "
                          "train_<dataset>.py)")
        if (self.denoise_us or None) != OFFICIAL["denoise_us"]:
            out.append(f"DENOISE_US = {self.denoise_us!r} (official: 10000)")
        official_t = OFFICIAL_TIME_BINS[self.dataset]
        if self.dt_us is not None:
            fixed = "" if self.fixed_t is None else f", FIXED_T = {self.fixed_t}"
            out.append(f"DT_US = {self.dt_us}{fixed} (official: {official_t} frames spread "
                       "over each recording)")
        elif self.frames() != official_t:
            out.append(f"N_TIME_BINS = {self.n_time_bins} (official: {official_t})")
        out += [x for x in [self._downsample_deviation()] if x]
        preset = PRESETS[self.dataset]
        out += [f"{name.upper()} = {getattr(self, name)} (official: {preset[name]})"
                for name in SIZE_OVERRIDES
                if getattr(self, name) not in (None, preset[name])]
        return out + self.sample_and_smoke_deviations()

    def __str__(self) -> str:
        from lib.data.events import frame_hw
        from lib.models.mamba_spike import parameter_count

        h, w = frame_hw(self.dataset, self.resolved_downsample())
        t = self.framing()["n_time_bins"] or self.fixed_t or f"variable ({self.dt_us} us bins)"
        found = self.deviations()
        return (super().__str__() + f"\n  frames: {t} x 2 x {h} x {w}; model: "
                f"{parameter_count(self.model_config()) / 1e6:.2f} M parameters"
                + "\n  deviations from the official code: " + ("; ".join(found) or "none"))


def cache_dir(s: Session) -> Path:
    """DATA_DIR/cache, or OUT_DIR/frame_cache when DATA_DIR is read-only (an attached dataset)."""
    data = Path(s.data_dir)
    if data.is_dir() and not os.access(data, os.W_OK):
        return Path(s.out_dir) / "frame_cache"
    return data / "cache"


def datasets(s: Session, warm: bool = False):
    """(train_set, test_set, info) of (frames (T, 2, H, W), label); `warm` frames every
    recording into the disk cache now. On XLA, T must be fixed (it raises otherwise)."""
    from lib.data.events import build_datasets as event_datasets
    from lib.data.events import warm_cache

    cfg, choice, kept = s.cfg, s.choice, s.storage.prepared
    train, test, info = event_datasets(
        cfg.dataset, s.data_dir, sample=cfg.sample_data, cache_dir=cache_dir(s), seed=SPLIT_SEED,
        static_shapes=choice.type == "xla", kept=kept, **cfg.framing())
    info["framed_now"] = warm_cache(train, test, workers=choice.num_workers, kept=kept,
                                    start=choice.worker_start) if warm else 0
    return train, test, info


def build_task(cfg: MambaSpikeRunConfig, device: torch.device) -> tuple[Task, dict]:
    """Mamba-Spike, AdamW, per-epoch cosine decay and clipping as a `Task`, plus its config."""
    import torch

    from lib.models.mamba_spike import MambaSpike
    from lib.training.loop import Task
    from lib.training.metrics import Accuracy

    model_cfg = cfg.model_config()
    model = MambaSpike(model_cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs,
                                                           eta_min=LR_FLOOR * cfg.lr)
    task = Task(model, torch.nn.functional.cross_entropy, optimizer,
                metrics=lambda: [Accuracy(model_cfg.n_classes)], scheduler=scheduler,
                clip_grad=cfg.clip_grad, monitor="test_accuracy", grad_scale=GRAD_SCALE)
    return task, asdict(model_cfg)


def loaders(s: Session):
    """(train, test) loaders; the training set is sharded across processes. A single process
    packs any recording not yet framed first (ranks of a DDP/XLA run only read: the notebook
    packed them)."""
    from lib.data.events import collate_fn

    train_set, test_set, info = datasets(s, warm=s.dist.world_size == 1)
    return s.loaders(train_set, test_set, collate_fn(info))


def train(s: Session) -> list[dict]:
    """Train (resuming if a checkpoint exists) on this process's device; return the history."""
    return s.fit(loaders(s), *build_task(s.cfg, s.device))


def load_best(s: Session) -> tuple[Task, dict]:
    """The task with the best checkpoint's weights, on this session's device."""
    task, model_config = build_task(s.cfg, s.device)
    state = s.load_best(task, model_config)
    return task, state


def evaluate_test(s: Session, task: Task, test_loader, n_classes: int):
    """(scores, confusion matrix (K, K) CPU tensor) of `task` on the test loader."""
    from lib.training.loop import evaluate_on
    from lib.training.metrics import Accuracy, ConfusionMatrix

    cm = ConfusionMatrix(n_classes)
    scores = evaluate_on(task, test_loader, s.choice, [Accuracy(n_classes), cm], s.max_batches)
    return scores, cm.matrix()


def spike_statistics(model: MambaSpike, dataset, device: torch.device, n: int = 16) -> dict:
    """Per front-end layer: mean spikes per neuron per step and share of silent neurons, over
    the first `n` test recordings (zero-padded to the longest)."""
    from lib.data.events import pad_collate
    from lib.models.mamba_spike import firing_rates

    batch, _ = pad_collate([dataset[i] for i in range(min(n, len(dataset)))])
    model.eval()
    return firing_rates(model, batch.to(device))


def results_table(scores: dict, stats: dict, info: dict, task: Task, sample: bool,
                  deviations: list[str]) -> str:
    """Markdown table: accuracy beside the authors' figure, size, framing and sparsity; the
    last row names each of `deviations` (`MambaSpikeRunConfig.deviations()`)."""
    from lib.models.mamba_spike import MambaSpikeConfig, count_parameters, parameter_count

    name = info["name"]
    ours = "this run (synthetic sample)" if sample else f"this run ({name})"
    h, w = info["frame_hw"]
    frames = f"{info['T']} x 2 x {h} x {w}" if info["T"] is not None else (
        f"variable x 2 x {h} x {w} ({info['dt_us']} us bins)")
    official = parameter_count(MambaSpikeConfig.preset(name))  # the sensor's full frames
    sensor = "x".join(str(v) for v in MambaSpikeConfig.preset(name).input_hw)
    rows = [f"| | {ours} | Mamba-Spike, reported ({name}) |", "|---|---|---|",
            f"| test accuracy (%) | {100 * scores['test_accuracy']:.2f} | {REPORTED[name]} |",
            f"| balanced accuracy (%) | {100 * scores['test_balanced_accuracy']:.2f} | - |",
            f"| parameters | {count_parameters(task.model) / 1e6:.2f} M | "
            f"{official / 1e6:.2f} M (official code) |",
            f"| frames T x 2 x H x W | {frames} | "
            f"{OFFICIAL_TIME_BINS[name]} x 2 x {sensor} |"]
    for layer in sorted({k.split("_")[0] for k in stats}):
        rows.append(f"| {layer} firing rate / silent | {stats[f'{layer}_rate']:.4f} / "
                    f"{stats[f'{layer}_silent']:.2f} | - |")
    rows.append(f"| deviations from the official code | {'; '.join(deviations) or 'none'} | - |")
    return "\n".join(rows)


# XLA lanes: the official T = 300 does not finish a batch in ten minutes there.
WORKLOAD = Workload(MambaSpikeRunConfig, datasets, train, headline="test_accuracy",
                    tiny=dict(SMOKE_BATCHES=2, BATCH_SIZE=4, DATASET="nmnist", N_TIME_BINS=4,
                              DOWNSAMPLE=2, D_MODEL=16, N_LAYERS=1, SPIKE_CHANNELS=8))
