"""MSHNet: size as the paper, output shapes, head wiring, gradients, and that it can learn."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lib.data.irstd_sample import sample_pair
from lib.losses.sls import SLSLoss
from lib.models.mshnet import MSHNet, MSHNetConfig, count_parameters


@pytest.fixture(scope="module")
def model() -> MSHNet:
    torch.manual_seed(0)
    return MSHNet()


def test_parameter_count_is_the_papers_4_07_million(model):
    assert count_parameters(model) == pytest.approx(4.07e6, rel=0.02)


def test_output_shapes_at_every_scale(model):
    fused, scales = model(torch.randn(2, 3, 32, 48))
    assert fused.shape == (2, 1, 32, 48)
    assert [tuple(s.shape) for s in scales] == [(2, 1, 32 >> k, 48 >> k) for k in range(4)]


def test_input_sizes_that_do_not_pool_four_times_are_rejected(model):
    with pytest.raises(ValueError, match="multiple of 16"):
        model(torch.randn(1, 3, 40, 32))


def test_config_with_wrong_number_of_stages_is_rejected():
    with pytest.raises(ValueError, match="5 widths and 4 block counts"):
        MSHNetConfig(widths=(16, 32, 64))


def test_fusion_conv_sees_the_heads_upsampled_in_scale_order(model):
    x = torch.randn(1, 3, 32, 32)
    fuse = model.fuse
    saved = fuse.weight.detach().clone(), fuse.bias.detach().clone()
    try:
        with torch.no_grad():
            fuse.bias.zero_()
            for k in range(4):
                fuse.weight.zero_()
                fuse.weight[0, k, 1, 1] = 1  # the fusion becomes "take head k"
                fused, scales = model.eval()(x)
                up = scales[k] if k == 0 else F.interpolate(
                    scales[k], scale_factor=2**k, mode="bilinear", align_corners=True)
                torch.testing.assert_close(fused, up)
    finally:
        with torch.no_grad():
            fuse.weight.copy_(saved[0]), fuse.bias.copy_(saved[1])


def test_eval_output_of_an_image_does_not_depend_on_its_batch(model):
    x = torch.randn(3, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        together = model(x)[0]
        alone = torch.cat([model(x[i : i + 1])[0] for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)


def _grads(model: MSHNet, warm: bool) -> dict[str, bool]:
    model.train().zero_grad(set_to_none=True)
    loss = SLSLoss(warm_epochs=1)
    loss.set_epoch(0 if warm else 1)
    target = torch.zeros(2, 1, 32, 32)
    target[:, :, 10:13, 20:23] = 1
    loss(model(torch.randn(2, 3, 32, 32)), target).backward()
    return {n: p.grad is not None and bool(torch.isfinite(p.grad).all())
            for n, p in model.named_parameters()}


def test_after_warm_up_every_parameter_gets_a_finite_gradient(model):
    has_grad = _grads(model, warm=False)
    assert all(has_grad.values()), [n for n, ok in has_grad.items() if not ok]


def test_warm_up_trains_the_network_but_not_the_coarse_heads_or_fusion(model):
    has_grad = _grads(model, warm=True)
    untouched = {n for n, ok in has_grad.items() if not ok}
    assert untouched == {"heads.1.weight", "heads.1.bias", "heads.2.weight", "heads.2.bias",
                         "heads.3.weight", "heads.3.bias", "fuse.weight", "fuse.bias"}


@pytest.fixture
def one_thread():
    """One intra-op thread: on a shared 2-core machine, two spinning threads cost more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_few_steps_on_sample_images_reduce_the_loss(one_thread):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    pairs = [sample_pair(rng, 32) for _ in range(4)]
    x = torch.tensor(np.stack([p[0] for p in pairs]), dtype=torch.float32)[:, None] / 255
    x = ((x - 0.45) / 0.22).expand(-1, 3, -1, -1)
    y = torch.tensor(np.stack([p[1] for p in pairs]) > 127, dtype=torch.float32)[:, None]
    model = MSHNet()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    loss_fn = SLSLoss(warm_epochs=1)  # epoch 0: the soft-IoU warm-up
    losses = []
    for _ in range(20):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.1, losses
