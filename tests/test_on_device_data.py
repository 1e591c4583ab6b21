"""On-device batches: seeded on the CPU (same batches whatever the device, batching,
sharding or resume), torchvision's crop/flip/normalise numbers, the loop's loader contract."""

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from lib.base.errors import DataError
from lib.data.on_device import Augment, DeviceLoader, epoch_params

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
AUG = Augment(padding=4, flip=True)


def _data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g),
            torch.arange(n) % 10)


def _loader(images, labels, batch=8, train=True, seed=3, **kw):
    return DeviceLoader(images, labels, batch, torch.device("cpu"), train=train, seed=seed,
                        mean=MEAN, std=STD, augment=AUG, **kw)


def _epoch(loader, epoch, start=0):
    loader.sampler.set_epoch(epoch, start)
    return [(x.clone(), y.clone()) for x, y in loader]


def test_augmentation_is_torchvisions_crop_flip_and_normalise_per_sample():
    images, labels = _data()
    loader = _loader(images, labels)
    offsets, flips = epoch_params(len(images), 3, 1, AUG)
    assert 0 < flips.sum() < len(flips) and offsets.min() == 0 and offsets.max() == 8
    loader.sampler.set_epoch(1)
    order = [i for _, i in loader.sampler]
    got = torch.cat([x for x, _ in loader])
    for k, i in enumerate(order):
        ref = TF.pad(images[i], [4, 4, 4, 4], fill=0)
        ref = TF.crop(ref, int(offsets[i, 0]), int(offsets[i, 1]), 8, 8)
        if flips[i]:
            ref = TF.horizontal_flip(ref)
        ref = TF.normalize(TF.to_dtype(ref, torch.float32, scale=True), MEAN, STD)
        torch.testing.assert_close(got[k], ref, rtol=1e-6, atol=1e-6)


def test_batches_depend_on_seed_and_epoch_only():
    images, labels = _data()
    a, b = _loader(images, labels), _loader(images, labels)
    first = _epoch(a, 0)
    assert all(torch.equal(x, x2) and torch.equal(y, y2)
               for (x, y), (x2, y2) in zip(first, _epoch(b, 0), strict=True))
    assert not torch.equal(first[0][0], _epoch(a, 1)[0][0])
    assert not torch.equal(first[0][0], _epoch(_loader(images, labels, seed=4), 0)[0][0])
    # a resume three batches into the epoch gives the rest of the very same batches
    rest = _epoch(a, 0, start=3 * 8)
    assert len(rest) == len(first) - 3
    for (x, y), (x2, y2) in zip(rest, first[3:], strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)


def test_a_sample_is_augmented_alike_however_the_epoch_is_batched_or_sharded():
    images, labels = _data(n=48)
    by_index = {}
    loader = _loader(images, torch.arange(48), batch=16)
    for x, y in _epoch(loader, 2):
        by_index.update({int(i): s for i, s in zip(y, x, strict=True)})
    for rank in (0, 1):
        shard = _loader(images, torch.arange(48), batch=4, rank=rank, world_size=2)
        for x, y in _epoch(shard, 2):
            for i, s in zip(y, x, strict=True):
                assert torch.equal(s, by_index[int(i)])


def test_loader_contract_drop_last_for_training_and_every_sample_for_evaluation():
    images, labels = _data(n=42)
    train = _loader(images, labels, batch=8)
    test = _loader(images, labels, batch=8, train=False)
    assert len(train) == 5 and len(_epoch(train, 0)) == 5
    batches = _epoch(test, 0)
    assert len(test) == 6 and sum(len(y) for _, y in batches) == 42
    assert torch.equal(torch.cat([y for _, y in batches]), labels)  # in order, unaugmented
    x, y = batches[0]
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.shape == (8, 3, 8, 8)
    torch.testing.assert_close(x[0], TF.normalize(images[0].float() / 255, MEAN, STD))
    with pytest.raises(DataError, match="BATCH_SIZE"):
        _loader(images, labels, batch=64)


def test_flip_only_mirrors_every_chosen_sample():
    images, labels = _data(n=16)
    loader = DeviceLoader(images, torch.arange(16), 16, torch.device("cpu"), train=True, seed=3,
                          mean=(0.0,) * 3, std=(1 / 255,) * 3, augment=Augment(flip=True))
    (x, idx), = _epoch(loader, 0)
    flips = epoch_params(16, 3, 0, Augment(flip=True))[1]
    assert 0 < flips.sum() < 16
    for s, i in zip(x, idx, strict=True):
        want = images[i].flip(-1) if flips[i] else images[i]
        torch.testing.assert_close(s, want.float(), rtol=1e-6, atol=1e-4)
