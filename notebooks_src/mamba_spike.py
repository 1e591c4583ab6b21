# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Mamba-Spike: a spiking front-end and Mamba on event-camera data
#
# Mamba-Spike (Qin & Liu, 2024) classifies recordings of event cameras, which report
# brightness changes per pixel (ON/OFF events) instead of frames. The events are binned into
# frames (T, 2, H, W); three spiking conv layers of leaky integrate-and-fire neurons
# (snntorch, beta 0.97, 1×1 recurrent conv) turn them into spikes; their firing rate over 5
# steps feeds Mamba blocks (selective state-space models, here with a parallel scan that
# runs on every device), and a mean over time feeds the classifier.
#
# **Data** (`DATASET`), read with tonic, which downloads it into `DATA_DIR` on first use:
# * `"nmnist"`: N-MNIST, digits seen by a moving 34×34 sensor (60,000 + 10,000, about 1 GB);
# * `"dvsgesture"`: DVS Gesture, 11 hand gestures on a 128×128 sensor (about 2.5 GB);
# * `"cifar10dvs"`: CIFAR10-DVS, 10,000 CIFAR-10 images shown to a 128×128 sensor (about
#   7 GB; no official split, so a seeded 90/10 split as in the official code).
#
# Framing is the official one by default (`N_TIME_BINS` frames spread over each recording:
# 300 / 500 / 100); `DT_US` gives true time bins instead (a variable T, padded per batch;
# on a TPU also set `FIXED_T`, since XLA needs one shape). Frames are cached on disk under
# `DATA_DIR/cache`, so framing is paid once. On a TPU the spiking layers' loop over the T
# frames is unrolled into the compiled graph, so the first steps compile longer the larger T
# is; a smaller `N_TIME_BINS` (e.g. 100) starts faster.
#
# Frames keep the sensors' full size (128×128 for DVS Gesture and CIFAR10-DVS: the official
# input and its 36.25 M parameters) where a training step fits the device's memory; otherwise
# `DOWNSAMPLE = None` halves them, and the config printout says so and why. The printout and
# the results table name every setting that differs from the official code.
#
# * **Resume is automatic**: re-run the notebook after a disconnect and training continues
#   from the newest checkpoint in `OUT_DIR` (on Colab that folder is on your Drive).
# * `SMOKE = True` trains a few batches per epoch; `SAMPLE_DATA = True` writes and uses a
#   small offline sample (clustered, class-dependent events) in each dataset's real format.

# %% tags=["parameters"]
PLATFORM = "local"  # which notebook this is (written by build_notebooks.py)
DEVICE = "auto"  # "auto", "cuda", "xla", "mps" or "cpu"
DATA_DIR = None  # None: the platform's data folder (/content on Colab), ./data locally
OUT_DIR = None  # None: Drive on Colab, /kaggle/working on Kaggle, ./runs locally
TRACKERS = ["tensorboard"]  # and/or "wandb", "mlflow" (guide: Tracking and secrets)
SAMPLE_DATA = False  # True: write and use a small offline sample in the real format
SMOKE = False  # True: a few batches per epoch, for a quick check
DATASET = "nmnist"  # "nmnist", "dvsgesture" or "cifar10dvs"
N_TIME_BINS = None  # frames per recording; None: the official 300 / 500 / 100 (or DT_US)
DT_US = None  # instead of N_TIME_BINS: frames of this many microseconds (variable T)
FIXED_T = None  # with DT_US: pad/crop every recording to this many frames (needed on TPU)
DOWNSAMPLE = None  # spatial factor; None: 1 (official) if it fits the memory, else 2
DENOISE_US = 10000  # drop events without a neighbour within this many µs; None: off
EPOCHS = 100  # passes over the training set (the official 100-200)
BATCH_SIZE = None  # None: DATASET's official batch in all (a run keeps its own); else per device
MICRO_BATCH = "auto"  # per device and step: "auto" (what fits) or a number; gradients add up
LR = 1e-3  # AdamW learning rate, cosine decay to 1% of it
WEIGHT_DECAY = 1e-4  # AdamW weight decay
CLIP_GRAD = 1.0  # maximum gradient norm; None: no clipping
D_MODEL = None  # Mamba width; None: the dataset's official size (128 / 256)
N_LAYERS = None  # Mamba blocks; None: the official 4 (N-MNIST) or 6
SPIKE_CHANNELS = None  # channels of the last spiking layer; None: the official 64 or 128
SEED = 1  # fixes initialisation and shuffling
CHECKPOINT_MINUTES = 10.0  # also save mid-epoch this often
RESUME = "auto"  # "auto": resume, refuse a changed run; "new": start afresh; "require": resume
COMPILE = "auto"  # torch.compile: "auto" where it pays off (docs: Workloads), True or False

# %%
from lib.workloads.mamba_spike import MambaSpikeRunConfig

cfg = MambaSpikeRunConfig.from_params(globals())
print(cfg)

# %% [markdown]
# ## Device and data
#
# The datasets are built here, in the notebook's process: the sample is written or the real
# dataset downloaded, and every recording is framed into the disk cache once, before any
# training process starts (several processes then only read the cache).

# %%
from lib import session

s = session.start(cfg)

# %%
from lib.plots import event_examples, event_time_strip
from lib.workloads import mamba_spike

train_set, test_set, info = mamba_spike.datasets(s, warm=True)
t = info["T"] or f"variable ({info['dt_us']} µs bins)"
print(f"{info['name']}: {info['train_size']} training and {info['test_size']} test recordings "
      f"from {info['root']}; frames T={t} x 2 x {info['frame_hw'][0]} x {info['frame_hw'][1]}; "
      f"{info['framed_now']} recordings framed into {info['cache_dir']} now"
      + (" (synthetic sample: moving blobs of events, not the real recordings)"
         if cfg.sample_data else ""))
_, frames = event_examples(train_set, info["classes"], path=s.out_dir / "examples.png",
                           sample=cfg.sample_data)
event_time_strip(frames, path=s.out_dir / "time_strip.png", sample=cfg.sample_data);

# %% [markdown]
# ## Training
#
# `launch` runs the training function on every device this platform offers. It resumes from
# the newest checkpoint in `OUT_DIR`, saves every epoch and every `CHECKPOINT_MINUTES`, keeps
# the best test accuracy as `best.pt`, and logs to `metrics.jsonl` and TensorBoard. The model,
# optimiser and schedule are in `lib/workloads/mamba_spike.py`.

# %%
from lib.launch import launch

history = launch(mamba_spike.train, s)

# %% [markdown]
# ## Results
#
# Training curves; the best checkpoint's confusion matrix on the test set; and how sparse the
# spiking front-end is (spikes per neuron per time step, and the share of neurons that never
# fire on a recording): spiking networks are judged by sparsity as well as accuracy.

# %%
from lib.plots import confusion_matrix, firing_rates, training_curves

training_curves(history, s.out_dir / "curves.png", title=f"Mamba-Spike on {info['name']}",
                sample=cfg.sample_data);

# %%
task, best = mamba_spike.load_best(s)
_, test_loader = mamba_spike.loaders(s)
scores, matrix = mamba_spike.evaluate_test(s, task, test_loader, info["num_classes"])
confusion_matrix(matrix, info["classes"], s.out_dir / "confusion.png",
                 title=f"best checkpoint (epoch {best['position'][0]}), test set",
                 sample=cfg.sample_data);

# %%
stats = mamba_spike.spike_statistics(task.model, test_set, s.device)
firing_rates(stats, s.out_dir / "firing_rates.png", sample=cfg.sample_data);

# %%
from IPython.display import Markdown, display

from lib.bootstrap import show_tensorboard

table = mamba_spike.results_table(scores, stats, info, task, cfg.sample_data,
                                  s.deviations())
(s.out_dir / "results.md").write_text(table + "\n")
print(f"best checkpoint: epoch {best['position'][0]} of {len(history)}")
display(Markdown(table))
show_tensorboard(s.out_dir / "tb", s.runtime)

# %%
from lib.bootstrap import finish

finish(s.runtime, s.out_dir)
