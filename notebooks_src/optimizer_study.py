# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Optimizer study: ResNet-18 on CIFAR-10/100 with label noise
#
# Which optimizer trains a ResNet-18 best when a share of the training labels is wrong?
# This notebook runs the grid `OPTIMIZERS` × `SEEDS` at one `LABEL_NOISE`: SGD (Nesterov),
# Adam, AdamW, Lion and RAdam, each with its learning rate and weight decay from the
# literature, a linear warm-up and a cosine schedule. For one seed every optimizer sees the
# same noisy labels, the same initial weights and the same batches; the test set is never
# noised. Each run gets its own folder in `OUT_DIR`, and the results land in
# `results.csv`, a summary table (mean ± std over seeds), curves and a bar chart.
#
# * **Resumable**: re-run the notebook after a disconnect. Finished runs are skipped, the
#   interrupted one continues from its newest checkpoint (on Colab, `OUT_DIR` is on Drive).
# * **Fan out**: one run per invocation, in parallel or on several machines sharing
#   `OUT_DIR` (`-p OPTIMIZER adamw -p SEED 1`); every invocation merges its row into the same
#   `results.csv`, and a last run of the full grid trains nothing and reports everything.
# * `SMOKE = True` trains a few batches per epoch; `SAMPLE_DATA = True` uses a small
#   offline sample in the real CIFAR pickle layout instead of downloading the dataset.

# %% tags=["parameters"]
PLATFORM = "local"  # which notebook this is (written by build_notebooks.py)
DEVICE = "auto"  # "auto", "cuda", "xla", "mps" or "cpu"
DATA_DIR = None  # None: the platform's data folder (/content on Colab), ./data locally
OUT_DIR = None  # None: Drive on Colab, /kaggle/working on Kaggle, ./runs locally
TRACKERS = ["tensorboard"]  # and/or "wandb", "mlflow" (guide: Tracking and secrets)
SAMPLE_DATA = False  # True: write and use a small offline sample in the real format
SMOKE = False  # True: a few batches per epoch, for a quick check
DATASET = "cifar10"  # "cifar10" or "cifar100"
OPTIMIZERS = ["sgd", "adam", "adamw", "lion", "radam"]  # the grid's optimizers
SEEDS = [0, 1, 2]  # the grid's seeds: weights, batch order and label noise
OPTIMIZER = None  # one optimizer instead of OPTIMIZERS (fan-out: -p OPTIMIZER adamw)
SEED = None  # one seed instead of SEEDS (fan-out: -p SEED 1)
LABEL_NOISE = 0.2  # share of training labels replaced, 0.0 to 1.0
NOISE_MODE = "symmetric"  # "symmetric" (any other class) or "asymmetric" (class pairs)
EPOCHS = 200  # passes over the training set, per run
BATCH_SIZE = None  # None: 128 in all on every platform (the lr table assumes it)
MICRO_BATCH = "auto"  # per device and step: "auto" (what fits) or a number; gradients add up
LR = None  # None: each optimizer's literature default (the table below)
WEIGHT_DECAY = None  # None: each optimizer's literature default
WARMUP_EPOCHS = 5  # linear warm-up, then cosine decay to zero
CHECKPOINT_MINUTES = 10.0  # also save mid-epoch this often
RESUME = "auto"  # "auto": resume, refuse a changed run; "new": start afresh; "require": resume
COMPILE = "auto"  # torch.compile: "auto" where it pays off (docs: Workloads), True or False

# %%
from lib.workloads.optimizer_study import OptimizerStudyConfig

cfg = OptimizerStudyConfig.from_params(globals())
print(cfg)

# %% [markdown]
# ## Device, optimizers and data

# %%
from IPython.display import Markdown, display

from lib import session
from lib.training.optim import defaults_table

s = session.start(cfg)
display(Markdown(defaults_table()))

# %%
from lib.workloads import optimizer_study

train_set, test_set, info = optimizer_study.datasets(s)
print(f"{info['name']}: {info['train_size']} training and {info['test_size']} test images "
      f"from {info['root']}; {info['noise_mode']} label noise {info['label_noise']:g} "
      f"(realised {info['realised_noise']:.4f} at seed {cfg.grid_seeds()[0]})")
optimizer_study.noisy_examples(train_set, info["name"], sample=cfg.sample_data);

# %% [markdown]
# ## Training the grid
#
# One run after the other, each through `launch` (every device of this platform), with
# checkpoints every epoch and every `CHECKPOINT_MINUTES`. The model, optimizers and
# schedule are in `lib/workloads/optimizer_study.py` and `lib/training/optim.py`.

# %%
rows = optimizer_study.train_grid(s)

# %% [markdown]
# ## Results
#
# Every finished run in `OUT_DIR` at this dataset and noise, whichever invocation made it.

# %%
from lib.bootstrap import show_tensorboard
from lib.study.figures import report

study = report(s.out_dir, cfg.dataset, cfg.noise_mode, cfg.label_noise, sample=cfg.sample_data)
if cfg.sample_data:
    display(Markdown("**Synthetic sample** (colour patterns in the CIFAR layout, not CIFAR): "
                     "these numbers only show that the study runs."))
display(Markdown(study.table))
print(f"{len(study.rows)} runs in {study.paths['results']}")
show_tensorboard(s.out_dir, s.runtime)

# %%
from lib.bootstrap import finish

finish(s.runtime, s.out_dir)
