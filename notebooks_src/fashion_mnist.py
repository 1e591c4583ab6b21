# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Fashion-MNIST quickstart
#
# A small CNN (after pytorch/examples' MNIST script) on Fashion-MNIST: 60,000 28×28
# greyscale clothes images in 10 classes. The same source is rendered into a notebook for
# every platform of the project; only the platform's name in the parameters and the
# generated bootstrap cell after them differ.
#
# * **Resume is automatic**: re-run the notebook after a disconnect and training continues
#   from the newest checkpoint in `OUT_DIR` (on Colab that folder is on your Drive).
# * `SMOKE = True` trains a few batches per epoch (seconds); `SAMPLE_DATA = True` uses a
#   small offline sample in the real file format instead of downloading the dataset.

# %% tags=["parameters"]
PLATFORM = "local"  # which notebook this is (written by build_notebooks.py)
DEVICE = "auto"  # "auto", "cuda", "xla", "mps" or "cpu"
DATA_DIR = None  # None: the platform's data folder (/content on Colab), ./data locally
OUT_DIR = None  # None: Drive on Colab, /kaggle/working on Kaggle, ./runs locally
TRACKERS = ["tensorboard"]  # and/or "wandb", "mlflow" (guide: Tracking and secrets)
SAMPLE_DATA = False  # True: write and use a small offline sample in the real format
SMOKE = False  # True: a few batches per epoch, for a quick check
EPOCHS = 14  # passes over the training set
BATCH_SIZE = None  # None: the platform's default
MICRO_BATCH = "auto"  # per device and step: "auto" (what fits) or a number; gradients add up
LR = 1.0  # Adadelta learning rate
GAMMA = 0.7  # learning-rate decay per epoch (StepLR)
SEED = 1  # fixes initialisation, shuffling and dropout
CHECKPOINT_MINUTES = 10.0  # also save mid-epoch this often
RESUME = "auto"  # "auto": resume, refuse a changed run; "new": start afresh; "require": resume
COMPILE = "auto"  # torch.compile: "auto" where it pays off (docs: Workloads), True or False

# %%
from lib.workloads.fashion_mnist import FashionConfig

cfg = FashionConfig.from_params(globals())
print(cfg)

# %% [markdown]
# ## Device and data

# %%
from lib import session

s = session.start(cfg)

# %%
from lib.data import fashion
from lib.plots import image_grid

train_set, test_set, info = fashion.build_datasets(s.data_dir, cfg.sample_data)
print(f"{info['train_size']} training and {info['test_size']} test images from {info['root']}"
      + (" (synthetic sample: garment-like shapes, not Fashion-MNIST)" if cfg.sample_data else ""))
image_grid(*fashion.example_grid(train_set), title="training images", sample=cfg.sample_data);

# %% [markdown]
# ## Training
#
# `launch` runs the training function on every device this platform offers (one process per
# GPU or TPU chip when there are several). It resumes from the newest checkpoint in
# `OUT_DIR`, saves every epoch and every `CHECKPOINT_MINUTES`, and logs to `metrics.jsonl`
# and TensorBoard. The model, optimiser and loop are in `lib/workloads/fashion_mnist.py`.

# %%
from lib.launch import launch
from lib.workloads import fashion_mnist

history = launch(fashion_mnist.train, s)

# %% [markdown]
# ## Results

# %%
from IPython.display import Markdown, display

from lib.bootstrap import show_tensorboard
from lib.plots import confusion_matrix, training_curves
from lib.training.loop import evaluate_on
from lib.training.metrics import Accuracy, ConfusionMatrix

training_curves(history, s.out_dir / "curves.png", title="Fashion-MNIST CNN",
                sample=cfg.sample_data);
task, best = fashion_mnist.load_best(s)
_, test_loader = fashion_mnist.loaders(s)
cm = ConfusionMatrix(info["num_classes"])
scores = evaluate_on(task, test_loader, s.choice, [Accuracy(info["num_classes"]), cm],
                     s.max_batches)
confusion_matrix(cm.matrix(), info["classes"], s.out_dir / "confusion.png",
                 title=f"best checkpoint (epoch {best['position'][0]}), test set",
                 sample=cfg.sample_data);
display(Markdown(fashion_mnist.results_table(scores, best, history, cfg.sample_data,
                                                s.out_dir)))
show_tensorboard(s.out_dir / "tb", s.runtime)

# %%
from lib.bootstrap import finish

finish(s.runtime, s.out_dir)
