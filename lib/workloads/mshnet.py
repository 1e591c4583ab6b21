"""MSHNet infrared small-target segmentation: parameters, task, training, results figures.

The official recipe (ying-fu/MSHNet): Adagrad lr 0.05 without a schedule, 400 epochs,
batch 4, 256 px crops, a soft-IoU warm-up (`--warm-epoch 5`, which main.py trains for six
epochs), then the SLS loss on every head. The best checkpoint is the one with the highest test
mIoU, as the official code keeps. Every setting that differs from that recipe is named by
`MSHNetRunConfig.deviations()`, in the config printout and in the results table, with the
batch's (`Session.deviations`: a global batch other than 4; BatchNorm over fewer samples
than 4, on several devices or in micro-batches of accumulated gradients).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lib.base.errors import DataError, DataNotFound
from lib.data.catalog import IRSTD_PAPER_RESULTS as PAPER_RESULTS
from lib.losses.warmup import OFFICIAL_WARM_EPOCH, WARMUP_RULES, warmup_length
from lib.plots import image_grid
from lib.runtime.platforms import input_roots, storage
from lib.training.config import ConfigError, RunConfig
from lib.workloads import Workload

if TYPE_CHECKING:  # torch, the data and the model are imported where they run (the contract)
    import torch

    from lib.session import Session
    from lib.training.loop import Task

PAPER_SIZE = 256  # base and crop size of the paper
SAMPLE_SIZE = 64  # the offline sample's: CPU smoke runs take seconds
CURVES = ("loss", "mIoU", "nIoU", "Pd", "Fa")
OFFICIAL = {"epochs": 400, "lr": 0.05, "batch_size": 4, "warm_epochs": OFFICIAL_WARM_EPOCH,
            "warmup_rule": "official"}  # main.py's defaults


def data_dir(runtime: str, sample: bool, default: Path) -> Path:
    """DATA_DIR when the notebook leaves it None.

    The dataset is what the user attached (`lib.runtime.platforms.storage(...).inputs`:
    /kaggle/input
    in either Kaggle layout, Drive's train-anywhere/data on Colab): the first such folder
    holding an IRSTD layout. Not found: /kaggle/input on Kaggle (whose error then says what
    was expected), else `default`. The sample goes to `default` (scratch): inputs are
    read-only.
    """
    from lib.data.irstd import find_layout

    roles = storage(runtime)
    if sample or not roles.inputs:
        return default
    for root in [*input_roots(runtime), *roles.inputs]:
        try:
            find_layout(root)
            return root
        except (DataNotFound, DataError):
            continue
    return roles.inputs[0] if runtime == "kaggle" else default


@dataclass
class MSHNetRunConfig(RunConfig):
    """The official MSHNet training defaults; image sizes default to 256 (64 on the sample)."""

    WORKLOAD = "mshnet"
    BATCH_SIZES = {"cuda": 8, "xla": 16, "mps": 4}
    # CPU, measured: 1.05x (rounds 0.90-1.18: no clear gain); even at face value it saves
    # 0.19 s of a 3.9 s step, so its 358 s compile takes ~1,900 steps (~10 IRSTD-1k epochs) to
    # repay: off. CUDA: on, a judgement (400 epochs repay minutes of compiling;
    # lib/runtime/compile.py).
    COMPILE_AUTO = {"cpu": False, "cuda": True}

    epochs: int = 400
    lr: float = 0.05  # Adagrad
    dataset: str = "IRSTD-1k"
    base_size: int | None = None  # evaluation size; None: 256, or 64 with SAMPLE_DATA
    crop_size: int | None = None  # training crop; None: like base_size
    warm_epochs: int = OFFICIAL_WARM_EPOCH  # the official --warm-epoch W
    warmup_rule: str = "official"  # "official": W + 1 warm-up epochs as main.py; "paper": W

    def validate(self) -> None:
        self._choice("dataset", self.dataset, PAPER_RESULTS)
        for name in ("base_size", "crop_size"):
            value = getattr(self, name)
            if value is not None and (value < 16 or value % 16):
                raise ConfigError(
                    f"{name.upper()}={value!r} must be a multiple of 16 that is >= 16 (MSHNet "
                    f"pools four times); e.g. {name.upper()} = 256 as the paper, or None."
                )
        self._choice("warmup_rule", self.warmup_rule, WARMUP_RULES)
        self._non_negative("warm_epochs", self.warm_epochs,
                           " (with WARMUP_RULE = 'paper', 0: no warm-up); e.g. WARM_EPOCHS = 5 "
                           "as the official code.")

    def official_batch(self) -> int:
        """The official batch, 4 (reached by accumulation where a device cannot hold it)."""
        return OFFICIAL["batch_size"]

    def warmup_epochs(self) -> int:
        """Soft-IoU warm-up epochs: WARM_EPOCHS + 1 under the official rule, else WARM_EPOCHS."""
        return warmup_length(self.warm_epochs, self.warmup_rule)

    def deviations(self) -> list[str]:
        """Each setting that differs from the official main.py's, one phrase each."""
        out = [f"{name.upper()} = {getattr(self, name)!r} (official: {OFFICIAL[name]!r})"
               for name in ("epochs", "lr", "warm_epochs") if getattr(self, name) != OFFICIAL[name]]
        if self.warmup_rule != OFFICIAL["warmup_rule"]:
            out.append(f"WARMUP_RULE = {self.warmup_rule!r}: {self.warmup_epochs()} warm-up "
                       f"epochs (official: WARM_EPOCHS + 1 = {self.warm_epochs + 1})")
        base, crop = self.image_sizes()
        if (base, crop) != (PAPER_SIZE, PAPER_SIZE):
            out.append(f"BASE_SIZE/CROP_SIZE = {base}/{crop} px (official: 256/256)")
        return out + self.sample_and_smoke_deviations()

    def __str__(self) -> str:
        found = self.deviations()
        n = self.warmup_epochs()
        return (super().__str__() + f"\n  warm-up: {n} epoch{'s' * (n != 1)} of soft-IoU"
                + "\n  deviations from the official code: " + ("; ".join(found) or "none"))

    def image_sizes(self) -> tuple[int, int]:
        """(base_size, crop_size) in pixels, the parameters or their defaults."""
        default = SAMPLE_SIZE if self.sample_data else PAPER_SIZE
        base = self.base_size or default
        return base, self.crop_size or base

    def paths(self, runtime: str) -> tuple[Path, Path]:
        data, out = super().paths(runtime)
        if self.data_dir is None:
            data = data_dir(runtime, self.sample_data, data)
        return data, out


def datasets(s: Session, check: bool = False):
    """(train_set, test_set, info) of the configured data; `check` reads every size first.

    The offline sample is not named after DATASET (info["dataset"] is "sample"); the paper
    row for results is always DATASET's.
    """
    from lib.data.irstd import build_datasets as irstd_datasets

    cfg = s.cfg
    base, crop = cfg.image_sizes()
    train_set, test_set, info = irstd_datasets(
        s.data_dir, cfg.sample_data, base, crop, dataset=None if cfg.sample_data else cfg.dataset)
    if check:
        train_set.check_sizes()
        test_set.check_sizes()
    return train_set, test_set, info


def build_task(cfg: MSHNetRunConfig, device: torch.device) -> tuple[Task, dict]:
    """MSHNet, the SLS loss with its warm-up and Adagrad as a `Task`, plus the model config."""
    import torch

    from lib.losses.sls import SLSLoss
    from lib.models.mshnet import MSHNet, MSHNetConfig
    from lib.training.loop import Task
    from lib.training.metrics_seg import SegMetrics

    model_cfg = MSHNetConfig()
    model = MSHNet(model_cfg).to(device)
    loss = SLSLoss(cfg.warmup_epochs())
    optimizer = torch.optim.Adagrad(model.parameters(), lr=cfg.lr)
    # Fresh metrics per evaluation, told the loss's phase: warm-up epochs score the head the
    # warm-up trains (scales[0]), later epochs the fused map.
    task = Task(model, loss, optimizer, metrics=lambda: [SegMetrics(warm=loss.warm)],
                monitor="test_mIoU", monitor_mode="max")
    return task, asdict(model_cfg)


def loaders(s: Session):
    """(train, test) loaders; the training set is sharded across processes."""
    train_set, test_set, _ = datasets(s)
    return s.loaders(train_set, test_set)


def train(s: Session) -> list[dict]:
    """Train (resuming if a checkpoint exists) on this process's device; return the history."""
    return s.fit(loaders(s), *build_task(s.cfg, s.device))


def load_best(s: Session) -> tuple[Task, dict]:
    """The task with the best checkpoint's weights, its loss in that epoch's phase."""
    task, model_config = build_task(s.cfg, s.device)
    state = s.load_best(task, model_config)
    task.loss_fn.set_epoch(state["position"][0] - 1)  # position = epochs done
    return task, state


def evaluate_test(s: Session, task: Task, test_loader) -> dict:
    """test_loss, test_mIoU, test_nIoU, test_Pd, test_Fa of `task` on the test loader."""
    from lib.training.loop import evaluate_on
    from lib.training.metrics_seg import SegMetrics

    metrics = [SegMetrics(warm=task.loss_fn.warm)]
    return evaluate_on(task, test_loader, s.choice, metrics, s.max_batches)


def _first(dataset, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` (image, mask) pairs of `dataset`, stacked."""
    import torch

    pairs = [dataset[i] for i in range(min(n, len(dataset)))]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def _overlays(x, y, logit) -> tuple[torch.Tensor, list[float]]:
    """(N, 3, H, W) overlay images and each image's IoU of prediction and truth."""
    import torch

    from lib.data.irstd import overlay

    rgb = torch.stack([torch.from_numpy(overlay(*t)).permute(2, 0, 1)
                       for t in zip(x, y, logit, strict=True)])
    pred, gt = logit > 0, y > 0.5
    inter, union = (pred & gt).sum((1, 2, 3)), (pred | gt).sum((1, 2, 3))
    iou = torch.where(union > 0, inter / union.clamp(min=1), 1.0)
    return rgb, iou.tolist()


def example_grid(dataset, n: int = 8, seed: int = 0, path: Path | None = None,
                 sample: bool = False):
    """Figure of `n` (augmented) samples, ground truth in green; drawn under its own seed so
    showing them does not move the global RNG that initialises the model. `sample` marks the
    title as the synthetic sample's."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        x, y = _first(dataset, n)
    rgb, _ = _overlays(x, y, torch.full_like(y, -1.0))
    titles = [f"{int(t.sum())} target px" for t in y]
    return image_grid(rgb, titles, path, cols=min(n, 8), sample=sample,
                      title="training images (augmented), targets in green")


UNTRAINED_SHARE = 0.5  # above this share of pixels marked as target, the grid says why


def prediction_grid(task: Task, dataset, device: torch.device, n: int = 8,
                    path: Path | None = None, sample: bool = False):
    """Figure of the first `n` test images: truth green, prediction red, both yellow; `sample`
    marks the title as the synthetic sample's."""
    import torch

    from lib.training.metrics_seg import select_prediction

    x, y = _first(dataset, n)
    task.model.eval()
    with torch.no_grad():
        logit = select_prediction(task.model(x.to(device)), task.loss_fn.warm).float().cpu()
    rgb, ious = _overlays(x, y, logit)
    title = "test images: truth green, prediction red, both yellow"
    marked = (logit > 0).float().mean().item()
    if marked > UNTRAINED_SHARE:  # an all-red grid would otherwise read as a bug
        title += (f"\n{marked:.0%} of pixels marked as target: the model has not yet "
                  "learnt the background")
    return image_grid(rgb, [f"IoU {v:.2f}" for v in ious], path, cols=min(n, 4), title=title,
                      sample=sample)


def results_table(scores: dict, dataset: str, sample: bool, deviations: list[str]) -> str:
    """Markdown table of this run's mIoU, nIoU, Pd (%) and Fa (x1e-6) beside the paper's.

    Fa is counted as the official code counts it; "Fa, every unmatched pixel" adds the pixels
    it leaves out. The last row names each of `deviations` (`MSHNetRunConfig.deviations()`).
    """
    paper = PAPER_RESULTS[dataset]
    ours = "this run (synthetic sample)" if sample else f"this run ({dataset})"
    rows = [f"| | {ours} | MSHNet paper ({dataset}) |", "|---|---|---|"]
    for key, label in (("mIoU", "mIoU (%)"), ("nIoU", "nIoU (%)"), ("Pd", "Pd (%)"),
                       ("Fa", "Fa (x1e-6)"), ("Fa_all", "Fa, every unmatched pixel (x1e-6)")):
        theirs = f"{paper[key]:.2f}" if key in paper else "-"
        rows.append(f"| {label} | {scores[f'test_{key}']:.2f} | {theirs} |")
    rows.append(f"| deviations from the official code | {'; '.join(deviations) or 'none'} | - |")
    return "\n".join(rows)


# XLA lanes: at the sample's 64 px a smoke batch of 16 takes minutes per step. (Not 32 px: the
# Kaggle TPU lane's bf16 epoch there gave a non-finite loss, as a CPU epoch did at 32 px with
# batches of 4; two of the sample's 16 test masks are empty at 32 px. Not yet looked into.)
WORKLOAD = Workload(MSHNetRunConfig, datasets, train, headline="test_mIoU",
                    tiny=dict(SMOKE_BATCHES=2, BATCH_SIZE=8))
