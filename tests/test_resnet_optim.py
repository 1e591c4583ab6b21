"""ResNet-18 (CIFAR stem), the optimizer factory and the warm-up + cosine schedule."""

from __future__ import annotations

import io
import math

import pytest
import torch
from lion_pytorch import Lion
from torch import nn
from torchvision.models import resnet18

from lib.models.resnet import CifarResNet18, ResNetConfig, count_parameters
from lib.training.optim import (
    OPTIMIZERS,
    check_optimizer_name,
    defaults_table,
    init_state,
    make_optimizer,
    warmup_cosine,
    warmup_cosine_factor,
)


@pytest.fixture(autouse=True)
def one_thread():
    """CI shares 2 cores between workers: two intra-op threads each stall ~10x on ResNet."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("num_classes", [10, 100])
def test_parameter_count_is_torchvision_resnet18_with_a_3x3_stem(num_classes):
    model = CifarResNet18(ResNetConfig(num_classes=num_classes))
    imagenet = count_parameters(resnet18(num_classes=num_classes))
    # Only the stem differs: 64 filters of 3x3x3 instead of 7x7x3.
    assert count_parameters(model) == imagenet - 64 * 3 * 7 * 7 + 64 * 3 * 3 * 3
    if num_classes == 10:
        assert count_parameters(model) == 11_173_962  # the usual CIFAR ResNet-18 figure


def test_forward_keeps_32x32_until_the_first_stage():
    model = CifarResNet18(ResNetConfig(num_classes=10)).eval()
    sizes = {}
    model.layer1.register_forward_hook(lambda m, i, o: sizes.update(layer1=o.shape[-2:]))
    model.layer4.register_forward_hook(lambda m, i, o: sizes.update(layer4=o.shape[-2:]))
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert tuple(sizes["layer1"]) == (32, 32) and tuple(sizes["layer4"]) == (4, 4)
    assert isinstance(model.maxpool, nn.Identity) and model.conv1.kernel_size == (3, 3)


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="num_classes=1"):
        ResNetConfig(num_classes=1)


def test_factory_uses_the_table_and_the_documented_settings():
    params = [nn.Parameter(torch.zeros(3))]
    for name, d in OPTIMIZERS.items():
        group = make_optimizer(name, params).param_groups[0]
        assert (group["lr"], group["weight_decay"]) == (d.lr, d.weight_decay)
    sgd = make_optimizer("sgd", params).param_groups[0]
    assert sgd["momentum"] == 0.9 and sgd["nesterov"] is True
    lion = make_optimizer("lion", params)
    assert isinstance(lion, Lion) and lion.param_groups[0]["betas"] == (0.9, 0.99)
    assert make_optimizer("radam", params).param_groups[0]["decoupled_weight_decay"] is True
    group = make_optimizer("adamw", params, lr=0.5, weight_decay=0.0).param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (0.5, 0.0)


def test_lion_defaults_follow_the_papers_3_to_10x_rule():
    lr_ratio = OPTIMIZERS["adamw"].lr / OPTIMIZERS["lion"].lr
    wd_ratio = OPTIMIZERS["lion"].weight_decay / OPTIMIZERS["adamw"].weight_decay
    assert 3 <= lr_ratio <= 10 and 3 <= wd_ratio <= 10
    assert "| lion | 0.0002 | 0.25 |" in defaults_table()


def test_unknown_optimizer_lists_every_valid_choice():
    """Names are checked once, by the config (check_optimizer_name); it canonicalises case."""
    with pytest.raises(ValueError, match="unknown optimizer 'adagrad'") as err:
        check_optimizer_name("adagrad")
    assert all(name in str(err.value) for name in OPTIMIZERS)
    assert check_optimizer_name(" SGD ") == "sgd"
    with pytest.raises(ValueError, match="lr=-1.0"):
        make_optimizer("sgd", [nn.Parameter(torch.zeros(1))], lr=-1)


def _setup(name: str, seed: int):
    torch.manual_seed(seed)
    model = CifarResNet18(ResNetConfig(num_classes=10))
    opt = make_optimizer(name, model.parameters())
    return model, opt, warmup_cosine(opt, total_steps=4, warmup_steps=1)


def _steps(model, opt, sched, batches):
    model.train()
    for x, y in batches:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_steps_saves_and_resumes_exactly(name):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g))
               for _ in range(2)]
    model, opt, sched = _setup(name, seed=0)
    start = [p.detach().clone() for p in model.parameters()]
    _steps(model, opt, sched, batches[:1])
    assert any(not torch.equal(a, p) for a, p in zip(start, model.parameters(), strict=True))
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                "sched": sched.state_dict()}, buf)
    _steps(model, opt, sched, batches[1:])  # the uninterrupted run

    buf.seek(0)
    state = torch.load(buf, weights_only=True)  # what lib.runs.checkpoints does on resume
    model2, opt2, sched2 = _setup(name, seed=1)  # a fresh process: other initial weights
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["opt"])
    sched2.load_state_dict(state["sched"])
    assert opt2.param_groups[0]["lr"] == pytest.approx(OPTIMIZERS[name].lr)  # warm-up done
    _steps(model2, opt2, sched2, batches[1:])
    for a, b in zip(model.state_dict().values(), model2.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


@pytest.mark.parametrize("name", [*OPTIMIZERS, "adam-amsgrad", "adadelta"])
def test_optimizer_state_made_before_the_first_step_changes_nothing(name):
    """`init_state` (called before the first step on XLA, so that the first step's graph is
    every later step's) gives each parameter the state its first step would have made: three
    steps later, weights and state are those of the optimizer left to make it, bit for bit."""
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g))
            for _ in range(3)]

    def run(early: bool):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
        opt = (torch.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
               if name == "adam-amsgrad" else
               torch.optim.Adadelta(model.parameters(), lr=1.0) if name == "adadelta"
               else make_optimizer(name, model.parameters()))  # the study's, and Fashion's
        made = init_state(opt) if early else None
        if early:
            assert made == 4 and len(opt.state) == 4 and init_state(opt) == 0
        for x, y in data:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return model, opt

    (lazy, lazy_opt), (early, early_opt) = run(False), run(True)
    for a, b in zip(lazy.parameters(), early.parameters(), strict=True):
        assert torch.equal(a, b)
    lazy_state, early_state = lazy_opt.state_dict()["state"], early_opt.state_dict()["state"]
    assert lazy_state.keys() == early_state.keys()
    for key, values in lazy_state.items():
        assert values.keys() == early_state[key].keys(), name
        for field, value in values.items():
            assert torch.equal(value, early_state[key][field]), (name, field)


def test_optimizer_state_is_left_alone_where_zeros_would_not_be_the_first_steps():
    """SGD with dampening scales its first step's copy of the gradient differently from the
    later ones, so a zero buffer would change it; Adagrad makes its state when built."""
    params = [nn.Parameter(torch.ones(3))]
    damped = torch.optim.SGD(params, lr=0.1, momentum=0.9, dampening=0.5)
    assert init_state(damped) == 0 and not damped.state
    adagrad = torch.optim.Adagrad(params, lr=0.1, initial_accumulator_value=0.5)
    before = adagrad.state[params[0]]["sum"].clone()
    assert init_state(adagrad) == 0 and torch.equal(adagrad.state[params[0]]["sum"], before)


def test_warmup_cosine_shape():
    f = lambda s: warmup_cosine_factor(s, total_steps=110, warmup_steps=10, min_lr_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(4) == pytest.approx(0.5) and f(9) == 1.0
    assert f(10) == 1.0 and f(60) == pytest.approx(0.55) and f(110) == pytest.approx(0.1)
    assert f(500) == pytest.approx(0.1)
    after = [f(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))
    assert warmup_cosine_factor(0, 5, 0) == 1.0  # no warm-up: start at the peak


def test_scheduler_drives_the_optimizer_and_keeps_the_configured_horizon_on_resume():
    p = nn.Parameter(torch.zeros(1))
    opt = make_optimizer("sgd", [p], lr=1.0)
    sched = warmup_cosine(opt, total_steps=100, warmup_steps=0)
    lrs = []
    for _ in range(50):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 1.0 and lrs[25] == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    # Resume with a longer run configured: the step count comes back, the horizon is new.
    opt2 = make_optimizer("sgd", [p], lr=1.0)
    sched2 = warmup_cosine(opt2, total_steps=200, warmup_steps=0)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    opt2.step()
    sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(warmup_cosine_factor(51, 200, 0))


def test_scheduler_rejects_bad_lengths():
    opt = make_optimizer("adam", [nn.Parameter(torch.zeros(1))])
    with pytest.raises(ValueError, match="warmup_steps=20"):
        warmup_cosine(opt, total_steps=10, warmup_steps=20)
