"""Every workload's CUDA path on a machine without a GPU: a fake-CUDA dry run (issue 39).

For each workload, `tests.fake_cuda.dry_run` runs `lib.training.loop.fit` itself on tensors that
claim
to live on cuda:0 (torch's FakeTensorMode: devices, shapes and dtypes, no values): the
workload's own `build_task` (model, loss, optimiser, scheduler, metrics), the device chosen
by `lib.runtime.device.choose_device` from a patched probe (a T4: fp16 autocast + GradScaler; an
A100: bf16 autocast), one training step, one evaluation batch, the epoch's checkpoint, and a
fresh task resumed from it for one more step. A tensor left on the CPU fails as on a GPU,
naming where it was made; float64 device tensors and host syncs in the batch loop fail
unless `tests.device_findings.ALLOWED` (the one list, each entry with its reason) accepts them.
The planted-mistake tests prove each kind is caught and named.

Stubbed, at the narrowest point, because fake mode cannot carry it:
- the backward pass (`torch.autograd.backward`): on a CUDA build of torch without a GPU (CI's
  PyPI wheel) the autograd engine asks the driver for a CUDA context (hasPrimaryContext) and
  fails; the stand-in gives every leaf the graph reaches a zero gradient like itself, as
  AccumulateGrad would. Not checked: the devices inside backward formulas (torch's own,
  or snntorch's surrogate gradient) and gradient values.
- autocast's and GradScaler's "is CUDA available" check (`amp_definitely_not_available`)
  answers False, and `torch.cuda.is_bf16_supported` True (the A100's answer);
  `torch.cuda.get_device_capability` answers (7, 5), so the spiking front-end's fused op takes
  its Triton path (lib/kernels: traced through its fake outputs; its kernels are tested apart).
- host reads: `.item()` and friends return 0 (False), device-to-host copies return CPU
  tensors of ones: fake tensors have no values. So the dry run checks devices, dtypes and
  syncs, never numbers; GradScaler never sees an overflow (its skipped step is not run).
- `pin_memory()` marks the tensor pinned instead of page-locking it (needs a driver).
- `torch.bincount`'s output length is its input's max + 1, a value: it is taken as
  `minlength` (and noted as the host sync it is on CUDA).
- data loading: the DataLoader workloads (Mamba-Spike, MSHNet) get a `Replay` of synthetic
  CPU batches in their loaders' format (uint8 frames; float image and 0/1 mask); their
  datasets, transforms, workers and collation are not run. The on-device loaders of
  Fashion-MNIST and the optimizer study run for real, on small synthetic uint8 images.
- `torch.save` writes the checkpoint's remaining fake CPU tensors (optimizer step counts) as
  ones, and `torch.load` runs outside the fake mode (inside it, it makes fake tensors).
- `FakeTensorConverter.from_meta_and_device` skips its memo, whose weak reference to each new
  tensor makes `Module.to`'s `swap_tensors` fail.
- MSHNet is built with one residual block per stage (`blocks=(1, 1, 1, 1)`; every kind of
  layer still runs): fake ops cost the same at any size, so the block count is the time.
Not covered: torch.compile (its CUDA code generator needs a GPU), DDP over several GPUs, MPS
(fake mode cannot claim "mps" on Linux), XLA (its own lane), kernel speed and memory.
"""

import functools
import inspect
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from torch import nn

from lib.data import fashion
from lib.data.cifar import STATS
from lib.data.events import frame_hw
from lib.data.on_device import Augment, DeviceLoader
from lib.models import mshnet as mshnet_model
from lib.models.mshnet import MSHNetConfig
from lib.runs import checkpoints
from lib.training.metrics import Accuracy
from lib.training.optim import OPTIMIZERS, make_optimizer, resolved_hparams
from lib.workloads import fashion_mnist as fashion_workload
from lib.workloads import get, mamba_spike, mshnet, names, optimizer_study
from tests import fake_cuda
from tests.device_findings import ALLOWED, REPO
from tests.fake_cuda import (
    A100,
    CHECKPOINT,
    FLOAT64,
    SYNC,
    T4,
    DryRunError,
    Replay,
    cuda_choice,
    dry_run,
)

pytestmark = pytest.mark.quick
BATCH = 2
PROBES = {"t4_fp16": T4, "a100_bf16": A100}


def config(name: str, **changes):
    """The workload's SMOKE config on the sample, its `tiny` settings, batch 2, on a T4 notebook."""
    w = get(name)
    return w.config.from_params({"PLATFORM": "colab_t4", "SMOKE": True, "SAMPLE_DATA": True,
                                 **w.tiny, "BATCH_SIZE": BATCH, **changes})


def images(n: int, c: int, hw: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 256, (n, c, hw, hw), dtype=torch.uint8, generator=g),
            torch.arange(n) % 10)


def device_loaders(x, y, mean, std, augment: Augment | None = None):
    """The workloads' own on-device loaders (Session.device_loaders), on the fake device."""
    return lambda device: (
        DeviceLoader(x, y, BATCH, device, train=True, seed=0, mean=mean, std=std,
                     augment=augment or Augment()),
        DeviceLoader(x, y, BATCH, device, train=False, seed=0, mean=mean, std=std))


def replay(*batch: torch.Tensor):
    return lambda device: (Replay([list(batch)]), Replay([list(batch)]))


def fashion_case():
    cfg = config("fashion_mnist")
    x, y = images(2 * BATCH, 1, 28)
    return (lambda d: fashion_workload.build_task(cfg, d),
            device_loaders(x, y, (fashion.MEAN,), (fashion.STD,)))


def optimizer_study_case(optimizer: str = "adamw"):
    cfg = config("optimizer_study").cell(optimizer, 0)
    x, y = images(2 * BATCH, 3, 32)
    mean, std = STATS[cfg.dataset]
    return (lambda d: optimizer_study.build_task(cfg, d, 10, steps_per_epoch=1),
            device_loaders(x, y, mean, std, Augment(padding=4, flip=True)))


def mamba_spike_case():
    cfg = config("mamba_spike")
    t, (h, w) = cfg.framing()["n_time_bins"], frame_hw(cfg.dataset, cfg.resolved_downsample())
    frames = torch.randint(0, 3, (BATCH, t, 2, h, w), dtype=torch.uint8)  # event counts
    return lambda d: mamba_spike.build_task(cfg, d), replay(frames, torch.arange(BATCH))


def mshnet_case():
    # WARMUP_RULE "paper" with one warm-up epoch: epoch 1 trains the soft-IoU warm-up (and
    # scores scales[0]), epoch 2, after the resume, the SLS loss on every head (and `fused`).
    cfg = config("mshnet", BASE_SIZE=32, WARMUP_RULE="paper", WARM_EPOCHS=1)
    image = torch.randn(BATCH, 3, 32, 32)
    mask = torch.zeros(BATCH, 1, 32, 32)
    mask[:, :, 10:12, 10:12] = 1.0

    def build(device):
        # The smallest MSHNet: one residual block per stage (every kind of layer still runs;
        # fake ops cost the same at any size, so the block count is the dry run's time).
        smallest = functools.partial(MSHNetConfig, blocks=(1, 1, 1, 1))
        with mock.patch.object(mshnet_model, "MSHNetConfig", smallest):  # build_task's
            return mshnet.build_task(cfg, device)

    return build, replay(image, mask)


CASES = {"fashion_mnist": fashion_case, "optimizer_study": optimizer_study_case,
         "mamba_spike": mamba_spike_case, "mshnet": mshnet_case}


def test_every_workload_has_a_dry_run():
    missing = sorted(set(names()) - set(CASES))
    assert not missing, (f"lib/workloads/{missing[0]}.py has no fake-CUDA dry run: add a case "
                         "to CASES in tests/test_fake_cuda.py (its build_task, and a batch in "
                         "its loaders' format)")


# fp16 + GradScaler (a T4) for every workload; bf16 (an A100) where the model is small: the
# bf16 path is the same code with another autocast dtype and no scaler, and ResNet-18 and
# MSHNet cost seconds per dry run (time budget, issue 34).
RUNS = [(w, "t4_fp16") for w in CASES] + [(w, "a100_bf16") for w in ("fashion_mnist",
                                                                      "mamba_spike")]


@pytest.mark.parametrize("workload, probe", RUNS)
def test_workload_step_eval_and_checkpoint_on_fake_cuda(workload, probe, tmp_path):
    """One step, one evaluation batch, a checkpoint and a resumed step, on fake cuda:0, with
    the precision `choose_device` picks for that GPU; only ALLOWED findings."""
    choice = cuda_choice(PROBES[probe])
    assert choice.precision.name == {"t4_fp16": "fp16", "a100_bf16": "bf16"}[probe]
    build, loaders = CASES[workload]()
    accepted = dry_run(build, loaders, choice, tmp_path, workload).check()
    kinds = {(f.kind, f.code.strip()) for f in accepted}
    scaler = {(SYNC, "self.scaler.step(optimizer)"), (FLOAT64, "self.scaler.unscale_(optimizer)")}
    assert (scaler <= kinds) == (probe == "t4_fp16"), kinds  # the scaler: fp16 only
    pdfa = any(f.file == "lib/training/metrics_seg.py" for f in accepted)
    assert pdfa == (workload == "mshnet"), accepted
    assert (tmp_path / "checkpoints" / "ckpt-e0002-b000000.pt").exists()


@pytest.mark.parametrize("optimizer", [o for o in OPTIMIZERS if o != "adamw"])
def test_every_optimizer_of_the_study_steps_on_fake_cuda(optimizer, tmp_path):
    """The study's other update rules (lib.training.optim.make_optimizer), fp16 with the scaler as
    on a
    T4, over the small Fashion-MNIST CNN (the rule is the point, not the model)."""
    build, loaders = fashion_case()

    def with_optimizer(device):
        task, model_config = build(device)
        task.optimizer = make_optimizer(optimizer, task.model.parameters(),
                                        *resolved_hparams(optimizer, None, None))
        task.scheduler = None
        return task, model_config

    dry_run(with_optimizer, loaders, cuda_choice(T4), tmp_path)


def test_the_notebooks_confusion_matrix_evaluation_on_fake_cuda():
    """Mamba-Spike's evaluate_test (its notebook's confusion matrix, also Fashion-MNIST's):
    per batch, on the device, without a host sync."""
    build, loaders = mamba_spike_case()
    choice = cuda_choice(A100)
    with fake_cuda.fake_cuda() as rec:
        with rec.building():
            task, model_config = build(choice.torch_device)
        session = SimpleNamespace(choice=choice, max_batches=1)
        test = fake_cuda.Watched(loaders(choice.torch_device)[1], rec)
        scores, matrix = mamba_spike.evaluate_test(session, task, test, 10)
    rec.check()
    assert matrix.shape == (10, 10) and matrix.device.type == "cpu"
    assert set(scores) >= {"test_accuracy", "test_balanced_accuracy"}


# Planted mistakes: each in a copy of the Fashion-MNIST task, one at a time -----------------


def line_of(marker: str) -> str:
    """'tests/test_fake_cuda.py:N', N the line of this file that ends with `# marker`."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    n = next(i for i, text in enumerate(lines, 1) if text.endswith(f"# {marker}"))
    return f"tests/test_fake_cuda.py:{n}"


class CpuCounterAccuracy(Accuracy):
    """Accuracy with a per-class hit counter created on the CPU."""

    def reset(self) -> None:
        super().reset()
        self.per_class = torch.zeros(self.num_classes)  # planted: cpu counter

    def update(self, output, target) -> None:
        super().update(output, target)
        self.per_class += torch.bincount(target, minlength=self.num_classes)


class DeviceCountAccuracy(Accuracy):
    """Accuracy that also counts the samples in a device tensor, as `Accuracy` did before it
    counted on the host: a blocking host-to-device copy every batch."""

    def reset(self) -> None:
        super().reset()
        self.counted = None

    def update(self, output, target) -> None:
        super().update(output, target)
        n = torch.tensor(target.shape[0], device=target.device)  # planted: host-to-device
        self.counted = n if self.counted is None else self.counted + n


def masked_loss(output, target):
    keep = torch.arange(target.shape[0]) >= 0  # planted: mask without device
    losses = nn.functional.cross_entropy(output, target, reduction="none")
    return (losses * keep).sum() / target.shape[0]


def float64_loss(output, target):
    scale = torch.tensor(0.5, dtype=torch.float64, device=output.device)  # planted: float64
    return nn.functional.cross_entropy(output, target) * scale.float()


SEEN = []


def item_loss(output, target):
    loss = nn.functional.cross_entropy(output, target)
    SEEN.append(loss.item())  # planted: item per batch
    return loss


def print_loss(output, target):
    loss = nn.functional.cross_entropy(output, target)
    print("loss", loss)  # planted: print
    return loss


def planted(**changes):
    """The Fashion-MNIST case with `changes` to its Task (metrics=..., loss_fn=...)."""
    build, loaders = fashion_case()

    def changed(device):
        task, model_config = build(device)
        for name, value in changes.items():
            setattr(task, name, value)
        return task, model_config

    return changed, loaders


@pytest.mark.parametrize("changes, marker, words", [
    (dict(metrics=lambda: [CpuCounterAccuracy(10)]), "planted: cpu counter",
     ["device mix", "aten.add_", "aten.zeros"]),
    (dict(loss_fn=masked_loss), "planted: mask without device", ["device mix", "aten.mul",
                                                                 "aten.ge"]),
    (dict(metrics=lambda: [DeviceCountAccuracy(10)]), "planted: host-to-device",
     [SYNC, "a blocking copy of a host tensor to the device"]),
    (dict(loss_fn=float64_loss), "planted: float64", [FLOAT64]),
    (dict(loss_fn=item_loss), "planted: item per batch", [SYNC, ".item()"]),
    (dict(loss_fn=print_loss), "planted: print", [SYNC, "printing a cuda:0 tensor"]),
], ids=["cpu-metric-counter", "mask-without-device", "host-to-device-per-batch",
        "float64-constant", "item-per-batch", "print-per-batch"])
def test_a_planted_mistake_is_caught_and_named(changes, marker, words, tmp_path):
    """The dry run fails, naming the kind, the op and the file:line where the tensor was made
    (a device mix) or where the code asked for it (float64, a sync). The same copy without a
    mistake passes: test_workload_step_eval_and_checkpoint_on_fake_cuda[fashion_mnist-a100]."""
    with pytest.raises(DryRunError) as err:
        dry_run(*planted(**changes), cuda_choice(A100), tmp_path)
    message = str(err.value)
    for word in [*words, line_of(marker)]:
        assert word in message, (word, message)


def source_line(function, text: str) -> str:
    """'path:N' of the line of `function` (repository-relative) that contains `text`."""
    lines, first = inspect.getsourcelines(function)
    n = first + next(i for i, line in enumerate(lines) if text in line)
    return f"{Path(inspect.getsourcefile(function)).relative_to(REPO)}:{n}"


def test_a_device_tensor_in_a_checkpoint_is_caught_at_the_line_that_saved_it(tmp_path):
    """Planted: the checkpoint saved as the loop holds its state (`to_cpu` skipped), so the
    weights and optimizer state go to torch.save on cuda:0. The dry run names the kind, where
    in the state the device tensors are, and the file:line that saved them."""
    with (mock.patch.object(checkpoints, "to_cpu", lambda state: state),  # planted: no to_cpu
          pytest.raises(DryRunError) as err):
        dry_run(*planted(), cuda_choice(A100), tmp_path)
    message = str(err.value)
    for word in [CHECKPOINT, "saved on cuda:0 (state.model.",
                 source_line(checkpoints.atomic_save, "torch.save(")]:
        assert word in message, (word, message)


def test_an_allowance_needs_its_reason_and_every_one_is_used():
    """ALLOWED is the one list; each entry says why (the workload tests show each is hit)."""
    assert all(len(a.reason) > 40 for a in ALLOWED)
    assert {(a.kind, a.file) for a in ALLOWED} == {
        (SYNC, "lib/training/backend.py"), (FLOAT64, "lib/training/backend.py"),
        (SYNC, "lib/training/metrics_seg.py")}
