# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # MSHNet: infrared small-target segmentation
#
# MSHNet (Liu et al., CVPR 2024) finds targets a few pixels wide in infrared images: a
# U-Net (16…256 channels) of residual blocks with channel and spatial attention, whose
# decoder predicts at four scales fused by a 3×3 conv (4.07 M parameters). It is trained
# with the scale- and location-sensitive (SLS) loss after a soft-IoU warm-up, and scored by
# mIoU, nIoU, the detection rate Pd and the false-alarm rate Fa.
#
# The defaults are the official code's: the warm-up runs 6 epochs (its `--warm-epoch 5`
# trains while the epoch, counted from 0, is at most 5; `WARMUP_RULE = "paper"` gives the
# paper's 5), and Fa counts false-alarm pixels as its `utils/metric.py` does (leaving out
# those of a component whose area equals a found target's); the results table adds Fa over
# every unmatched pixel, and the config printout and the table name any other deviation.
#
# **Data.** `DATASET` is `"IRSTD-1k"` or `"NUDT-SIRST"`, in the layout of the official code
# (`images/`, `masks/`, `trainval.txt`, `test.txt`) or the raw IRSTD-1k release
# (`IRSTD1k_Img/`, `IRSTD1k_Label/`), found in `DATA_DIR` or up to two folders below it:
# * Colab: unpack it into `MyDrive/train-anywhere/data/` on your Drive;
# * Kaggle: attach the dataset (*Add Input*); it appears under `/kaggle/input`, where
#   `DATA_DIR = None` looks;
# * locally: `./data/`, or set `DATA_DIR`;
# * Studio Lab, SageMaker, Paperspace: the folder the `data in ...` line names (printed after
#   the device line, on the storage the service keeps), or set `DATA_DIR`.
#
# * **Resume is automatic**: re-run the notebook after a disconnect and training continues
#   from the newest checkpoint in `OUT_DIR` (on Colab that folder is on your Drive).
# * `SMOKE = True` trains a few batches per epoch; `SAMPLE_DATA = True` writes and uses a
#   small offline sample (64 px, a few bright targets on clutter) in the real layout.

# %% tags=["parameters"]
PLATFORM = "local"  # which notebook this is (written by build_notebooks.py)
DEVICE = "auto"  # "auto", "cuda", "xla", "mps" or "cpu"
DATA_DIR = None  # None: found under /kaggle/input or Drive's train-anywhere/data
OUT_DIR = None  # None: Drive on Colab, /kaggle/working on Kaggle, ./runs locally
TRACKERS = ["tensorboard"]  # and/or "wandb", "mlflow" (guide: Tracking and secrets)
SAMPLE_DATA = False  # True: write and use a small offline sample in the real layout
SMOKE = False  # True: a few batches per epoch, for a quick check
DATASET = "IRSTD-1k"  # "IRSTD-1k" or "NUDT-SIRST": picks the folder and the paper's row
EPOCHS = 400  # passes over the training set (the paper's 400)
BATCH_SIZE = None  # None: the paper's 4 in all (a run keeps its own); else per device
MICRO_BATCH = "auto"  # per device and step: "auto" (what fits) or a number; gradients add up
LR = 0.05  # Adagrad learning rate, constant (the paper's)
WARM_EPOCHS = 5  # soft-IoU warm-up W before the SLS loss (the official --warm-epoch 5)
WARMUP_RULE = "official"  # "official": W + 1 epochs, as main.py; "paper": W epochs
BASE_SIZE = None  # test images are resized to this; None: 256 (64 with SAMPLE_DATA)
CROP_SIZE = None  # training crop after the random rescale; None: as BASE_SIZE
SEED = 1  # fixes initialisation, shuffling and augmentation
CHECKPOINT_MINUTES = 10.0  # also save mid-epoch this often
RESUME = "auto"  # "auto": resume, refuse a changed run; "new": start afresh; "require": resume
COMPILE = "auto"  # torch.compile: "auto" where it pays off (docs: Workloads), True or False

# %%
from lib.workloads.mshnet import MSHNetRunConfig

cfg = MSHNetRunConfig.from_params(globals())
print(cfg)

# %% [markdown]
# ## Device and data
#
# The split files are checked against the folders and every image against its mask here,
# so a layout problem stops with one message before training starts.

# %%
from lib import session

s = session.start(cfg)

# %%
from lib.workloads import mshnet

train_set, test_set, info = mshnet.datasets(s, check=True)
print(f"{info['dataset']}: {info['train_size']} training and {info['test_size']} test images "
      f"({info['layout']}) from {info['root']}; {info['base_size']} px, masks > "
      f"{info['mask_threshold']} are target")
mshnet.example_grid(train_set, sample=cfg.sample_data);

# %% [markdown]
# ## Training
#
# `launch` runs the training function on every device this platform offers. It resumes from
# the newest checkpoint in `OUT_DIR`, saves every epoch and every `CHECKPOINT_MINUTES`, keeps
# the best test mIoU as `best.pt`, and logs to `metrics.jsonl` and TensorBoard. The model,
# loss and optimiser are in `lib/workloads/mshnet.py`.

# %%
from lib.launch import launch

history = launch(mshnet.train, s)

# %% [markdown]
# ## Results
#
# Curves of the loss and the four metrics (mIoU, nIoU and Pd in percent, Fa in 1e-6), the
# best checkpoint's predictions on test images (truth green, prediction red, both yellow),
# and its scores beside the paper's.

# %%
from lib.plots import training_curves

training_curves(history, s.out_dir / "curves.png", metrics=mshnet.CURVES,
                title="MSHNet" if cfg.sample_data else f"MSHNet on {cfg.dataset}",
                sample=cfg.sample_data);

# %%
task, best = mshnet.load_best(s)
_, test_loader = mshnet.loaders(s)
scores = mshnet.evaluate_test(s, task, test_loader)
mshnet.prediction_grid(task, test_set, s.device, path=s.out_dir / "predictions.png",
                       sample=cfg.sample_data);

# %%
from IPython.display import Markdown, display

from lib.bootstrap import show_tensorboard

table = mshnet.results_table(scores, cfg.dataset, cfg.sample_data, s.deviations())
(s.out_dir / "results.md").write_text(table + "\n")
print(f"best checkpoint: epoch {best['position'][0]} of {len(history)}")
display(Markdown(table))
show_tensorboard(s.out_dir / "tb", s.runtime)

# %%
from lib.bootstrap import finish

finish(s.runtime, s.out_dir)
