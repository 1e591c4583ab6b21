"""`DeviceLoader` on the XLA device (torch_xla on the CPU): the CPU's batches for the same
seed and epoch, and a fixed few graphs, compiled in the first epoch only."""

import pytest
import torch

pytestmark = pytest.mark.xla
torch_xla = pytest.importorskip("torch_xla", reason="the XLA lane's environment has torch_xla")

from lib.data import fashion  # noqa: E402
from lib.data.cifar import STATS  # noqa: E402
from lib.data.on_device import Augment, DeviceLoader  # noqa: E402
from lib.runtime import xla  # noqa: E402

# (image shape, mean, std, training augmentation) as the workloads use them
CASES = {
    "cifar10": ((3, 32, 32), *STATS["cifar10"], Augment(padding=4, flip=True)),
    "fashion_mnist": ((1, 28, 28), (fashion.MEAN,), (fashion.STD,), Augment()),
}
BATCH = 8


def _loader(case: str, device, train: bool, n: int) -> DeviceLoader:
    shape, mean, std, augment = CASES[case]
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    return DeviceLoader(images, torch.arange(n) % 10, BATCH, device, train=train, seed=5,
                        mean=mean, std=std, augment=augment)


def _epoch(loader: DeviceLoader, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    loader.sampler.set_epoch(epoch)
    return [(x.cpu(), y.cpu()) for x, y in loader]


@pytest.mark.parametrize("train", [True, False], ids=["train", "test"])
@pytest.mark.parametrize("case", list(CASES))
def test_xla_batches_are_the_cpus_for_the_same_seed_and_epoch(case, train):
    n = 5 * BATCH + 3  # a partial last batch: dropped in training, kept in evaluation
    on_cpu = _loader(case, torch.device("cpu"), train, n)
    on_xla = _loader(case, xla.device(), train, n)
    for epoch in (0, 1):
        want, got = _epoch(on_cpu, epoch), _epoch(on_xla, epoch)
        assert len(got) == len(want) == (5 if train else 6)
        for (x, y), (x_cpu, y_cpu) in zip(got, want, strict=True):
            assert x.dtype == torch.float32 and y.dtype == torch.int64
            assert torch.equal(y, y_cpu)
            torch.testing.assert_close(x, x_cpu, rtol=1e-6, atol=1e-6)
    if train:  # the epochs really differ: shuffled (and augmented) anew
        assert not torch.equal(_epoch(on_cpu, 0)[0][1], _epoch(on_cpu, 1)[0][1])


def _compiles(loader: DeviceLoader, epoch: int) -> int:
    """Graphs compiled while iterating one epoch, each batch cut as a training step cuts it."""
    before = xla.compile_count()
    loader.sampler.set_epoch(epoch)
    for _x, _y in loader:
        xla.sync()
    return xla.compile_count() - before


@pytest.mark.parametrize("train", [True, False], ids=["train", "test"])
@pytest.mark.parametrize("case", list(CASES))
def test_only_the_first_epoch_compiles_and_not_one_graph_per_batch(case, train):
    loader = _loader(case, xla.device(), train, n=12 * BATCH + 3)
    first = _compiles(loader, 0)
    assert 0 < first <= 3, first  # one batch shape (two with a partial last), not 12 graphs
    assert [_compiles(loader, epoch) for epoch in (1, 2)] == [0, 0]
