"""In-memory image datasets (Fashion-MNIST, CIFAR) kept on the device as uint8, augmented there.

A `DeviceLoader` is what the loop takes for a DataLoader (`len`, `batch_size`, `sampler`
with `set_epoch(epoch, start)`, iteration over `(images, labels)` batches), but its batches
are cut from tensors already on the device: the host draws a few index and parameter tensors
per batch and launches a handful of kernels, so it cannot starve a GPU. Every random choice is
drawn on the CPU from a generator seeded by (seed, epoch): the sample order (`EpochSampler`,
as the DataLoader path uses) and, per dataset index, the crop offsets and flips, so the same
seed gives the same batches on every device, however the epoch is batched, sharded or resumed
(house rule 4). Augmentation as in torchvision: `RandomCrop(size, padding)` with zero padding,
`RandomHorizontalFlip()`, then `ToDtype(float32, scale=True)` and `Normalize(mean, std)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from lib.base.errors import DataError
from lib.data.common import EpochSampler, sample_seed

AUGMENT_STREAM = -2  # sample_seed(seed, epoch, -2) seeds the epoch's augmentation draws


@dataclass(frozen=True)
class Augment:
    """Random crop with `padding` zero pixels each side (0: none) and a horizontal flip."""

    padding: int = 0
    flip: bool = False


def epoch_params(n: int, seed: int, epoch: int, augment: Augment) -> tuple[torch.Tensor, ...]:
    """(crop offsets (n, 2) in [0, 2 * padding], flips (n,) bool) of every dataset index,
    drawn on the CPU from the (seed, epoch) generator."""
    g = torch.Generator().manual_seed(sample_seed(seed, epoch, AUGMENT_STREAM))
    offsets = torch.randint(0, 2 * augment.padding + 1, (n, 2), generator=g)
    flips = torch.randint(0, 2, (n,), generator=g).bool() & augment.flip
    return offsets, flips


def crop_indices(offsets: torch.Tensor, flips: torch.Tensor, h: int, w: int):
    """Rows (n, h) and columns (n, w) of the zero-padded images that make each sample's crop
    at `offsets` (top, left), flipped left-right where `flips` (the crop's column j is then
    the padded column left + w - 1 - j): a crop and a flip are one gather."""
    rows = offsets[:, :1] + torch.arange(h)
    ahead, back = torch.arange(w), torch.arange(w - 1, -1, -1)
    cols = offsets[:, 1:] + torch.where(flips[:, None], back, ahead)
    return rows, cols


class DeviceLoader:
    """Batches of (normalised float images, int64 labels) from uint8 images on `device`."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int,
                 device: torch.device, *, train: bool, seed: int, mean, std,
                 augment: Augment = Augment(), rank: int = 0, world_size: int = 1) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise DataError(f"DeviceLoader wants uint8 (N, C, H, W) images, got "
                            f"{images.dtype} {tuple(images.shape)}.")
        n = len(images)
        if train and n // world_size < batch_size:
            raise DataError(
                f"the training set has {n} samples, fewer than one batch of {batch_size} "
                f"per device; set BATCH_SIZE to at most {max(1, n // world_size)}.")
        self.hw = tuple(images.shape[2:])
        self.labels = labels.to(device=device, dtype=torch.int64)
        self.batch_size, self.device, self.train, self.seed = batch_size, device, train, seed
        self.augment = augment if train else Augment()
        p = self.augment.padding  # stored padded: a crop is then one gather, no pad per batch
        self.images = torch.nn.functional.pad(images, (p, p, p, p)).to(device)
        self.channels = torch.arange(images.shape[1], device=device)[None, :, None, None]
        shape = (1, images.shape[1], 1, 1)
        self.mean = torch.tensor(mean, dtype=torch.float32).reshape(shape).to(device)
        self.std = torch.tensor(std, dtype=torch.float32).reshape(shape).to(device)
        self.sampler = EpochSampler(n, seed, shuffle=train, rank=rank, world_size=world_size)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.train else -(-n // self.batch_size)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 -> float32 in [0, 1], minus mean, over std (torchvision's ToTensor and
        Normalize ops; ToDtype's multiplication by 1/255 differs by at most an ulp)."""
        return images.float().div(255).sub(self.mean).div(self.std)

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        """This rank's batches from the sampler's `start`: per batch, one slice of the epoch's
        plan sent to the device, one gather, a normalisation."""
        keys = list(iter(self.sampler))
        if not keys:
            return
        plan = self.epoch_plan(keys)
        stop = len(plan) - len(plan) % self.batch_size if self.train else len(plan)
        pinned = plan.is_pinned()
        for pos in range(0, stop, self.batch_size):
            part = plan[pos : pos + self.batch_size].to(self.device, non_blocking=pinned)
            yield self.batch(part)

    def epoch_plan(self, keys: list[tuple[int, int]]) -> torch.Tensor:
        """Each sample of the epoch in order, one int64 CPU row: its dataset index, then (when
        augmenting) its crop's rows and columns. A batch's rows go to the device as they are
        needed, so every batch is the same computation over new device data (on XLA: one
        graph, not one per batch position, as slicing a device copy at each offset gave)."""
        order = torch.tensor([i for _, i in keys], dtype=torch.int64)
        plan = order[:, None]
        if self.augment.padding or self.augment.flip:
            offsets, flips = epoch_params(self.sampler.n, self.seed, keys[0][0], self.augment)
            rows, cols = crop_indices(offsets[order], flips[order], *self.hw)
            plan = torch.cat([plan, rows, cols], dim=1)
        return plan.pin_memory() if self.device.type == "cuda" else plan

    def batch(self, part: torch.Tensor) -> list[torch.Tensor]:
        """(images, labels) of a batch from its plan rows, already on the device."""
        idx, h = part[:, 0], self.hw[0]
        if part.shape[1] == 1:
            images = self.images[idx]
        else:
            rows, cols = part[:, 1 : 1 + h], part[:, 1 + h :]
            images = self.images[idx[:, None, None, None], self.channels, rows[:, None, :, None],
                                 cols[:, None, None, :]]
        return [self.normalise(images), self.labels[idx]]


def images_and_labels(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 (N, C, H, W) images and int64 labels of a torchvision in-memory dataset:
    FashionMNIST (`data` (N, H, W) tensor) or CIFAR10/100 (`data` (N, H, W, C) numpy array),
    with its current `targets` (the noisy ones, after label noise)."""
    images = torch.as_tensor(dataset.data)
    images = images[:, None] if images.dim() == 3 else images.permute(0, 3, 1, 2)
    return images.contiguous(), torch.as_tensor(dataset.targets, dtype=torch.int64)
