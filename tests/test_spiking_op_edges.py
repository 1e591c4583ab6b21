"""The fused LIF op (lib/kernels/lif.py) at its edges, on every path this machine runs: T = 0,
no bias, beta outside [0, 1], a forced path the device cannot run, a second backward, and a
bad TA_LIF_PATH; each refused in one line or handled as snntorch handles it. The op's 16-bit
contract at the op itself (before autograd casts anything): d cur in the input's dtype,
membranes in float32, every output contiguous, the fakes saying the same."""

from __future__ import annotations

import pytest
import snntorch as snn
import torch
from snntorch import surrogate

from lib.base.errors import ConfigError
from lib.kernels import LIF_PATH_ENV, choose_path, lif_multistep, lif_reference
from lib.kernels import lif as lif_module
from lib.kernels.lif import lif_backward, lif_forward
from tests.spiking_cases import op_inputs

CPU_PATHS = ["portable", "reference"]  # the triton path: its T = 0 check, below, runs first


@pytest.fixture(autouse=True)
def _no_forced_path(monkeypatch):
    monkeypatch.delenv(LIF_PATH_ENV, raising=False)


@pytest.mark.parametrize("path", [*CPU_PATHS, "triton"])
def test_t_0_is_refused_in_one_line_before_any_kernel(path, monkeypatch):
    # the triton path without its interpreter: the T check must come before any path check
    monkeypatch.setattr(lif_module, "choose_path", lambda *a, **k: pytest.fail("chose a path"))
    with pytest.raises(ConfigError, match=r"^lif_multistep got currents \(0, 4, 3\): T = 0 "
                                          r"time steps; expected T >= 1"):
        lif_multistep(torch.zeros(0, 4, 3), torch.zeros(3, 3), torch.zeros(3), 0.9, 1.0, 25.0,
                      path=path)


@pytest.mark.parametrize("path", CPU_PATHS)
def test_no_bias_is_a_zero_bias(path):
    cur, w, b, beta, thr, _ = op_inputs("odd", torch.float64)
    want = lif_multistep(cur, w, torch.zeros_like(b), beta, thr, 25.0, path=path)
    got = lif_multistep(cur, w, None, beta, thr, 25.0, path=path)
    assert torch.equal(got, want) and 0.05 < want.mean() < 0.9


def _leaky_loop(cur, weight, bias, beta, thr, slope):
    """snntorch's Leaky (which clamps beta to [0, 1] itself) stepped over the op's layout."""
    lif = snn.Leaky(beta=beta, threshold=thr, spike_grad=surrogate.fast_sigmoid(slope=slope))
    snn.SpikingNeuron.instances.remove(lif)
    mem, spk, out = torch.zeros_like(cur[0]), None, []
    for cur_t in cur.unbind(0):
        if spk is not None:
            cur_t = cur_t + torch.nn.functional.linear(spk.to(cur.dtype), weight, bias)
        spk, mem = lif(cur_t, mem)
        out.append(spk)
    return torch.stack(out)


@pytest.mark.parametrize("path", CPU_PATHS)
@pytest.mark.parametrize("beta", [-0.5, 1.5])
def test_beta_outside_0_1_is_clamped_as_snntorch_clamps_it(path, beta):
    cur, w, b, _, thr, _ = op_inputs("odd", torch.float64)
    want = _leaky_loop(cur, w, b, beta, thr, 25.0)
    got = lif_multistep(cur, w, b, beta, thr, 25.0, path=path)
    assert torch.equal(got, want) and 0.05 < want.mean() < 0.95
    assert not torch.equal(lif_reference(cur, w, b, beta, thr, 25.0), want)  # it bites


@pytest.mark.parametrize("device, said", [
    ("mps", "runs on CUDA GPUs only, not on mps; use 'portable' or 'auto' there"),
    ("xla", "runs on CUDA GPUs only, not on xla; use 'scan' or 'auto' there")])
def test_a_forced_triton_path_where_it_cannot_run_is_one_line(device, said, monkeypatch):
    monkeypatch.setattr(lif_module, "triton_available", lambda: True)
    for force in ({"path": "triton"}, {}):
        if not force:
            monkeypatch.setenv(LIF_PATH_ENV, "triton")
        with pytest.raises(ConfigError, match=f"^the triton LIF path .*{said}"):
            choose_path(torch.device(device), **force)


def test_a_forced_triton_path_without_triton_installed_is_one_line(monkeypatch):
    monkeypatch.setattr(lif_module, "triton_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (7, 5))
    with pytest.raises(ConfigError, match=r"needs the triton package, which is not installed "
                                          r"here; `pip install triton`"):
        choose_path(torch.device("cuda"), "triton")
    assert choose_path(torch.device("cuda")) == "portable"  # auto: no triton, no refusal


def test_a_second_backward_names_what_works_instead():
    cur, w, b, beta, thr, _ = op_inputs("odd", torch.float64)
    inputs = [x.clone().requires_grad_() for x in (cur, w, b)]
    out = lif_multistep(*inputs, beta, thr, 25.0, path="portable")
    (dcur,) = torch.autograd.grad(out.sum(), inputs[0], create_graph=True)
    with pytest.raises(NotImplementedError, match=r"portable path has a first derivative only.*"
                                                  r"set TA_LIF_PATH=reference"):
        dcur.pow(2).sum().backward()
    # what it names works: the reference path's second derivative
    out = lif_multistep(*inputs, beta, thr, 25.0, path="reference")
    (dcur,) = torch.autograd.grad(out.sum(), inputs[0], create_graph=True)
    dcur.pow(2).sum().backward()
    assert inputs[0].grad is not None and inputs[0].grad.abs().sum() > 0


def test_a_bad_lif_path_is_refused_before_the_run_starts(monkeypatch):
    """At the config (`train-anywhere run` and the notebook's first cell build it), not when
    the first batch reaches the spiking layer."""
    from lib.workloads.mamba_spike import MambaSpikeRunConfig

    params = dict(PLATFORM="colab_t4", DEVICE="auto", DATA_DIR=None, OUT_DIR=None,
                  SAMPLE_DATA=True, SMOKE=True, BATCH_SIZE=None, SEED=1)
    monkeypatch.setenv(LIF_PATH_ENV, "fast")
    with pytest.raises(ConfigError, match=r"^TA_LIF_PATH='fast' is not one of \('auto', "):
        MambaSpikeRunConfig.from_params(params)
    monkeypatch.setenv(LIF_PATH_ENV, "portable")
    assert MambaSpikeRunConfig.from_params(params).dataset == "nmnist"


def _strided(x: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout (a transposed copy, transposed back)."""
    return x.transpose(0, -1).contiguous().transpose(0, -1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_in_16_bits_the_ops_return_what_their_fakes_promise(dtype):
    """Called as ops, before autograd casts anything: spikes and d cur in the input's dtype,
    membranes and the weight's gradients in float32, every output contiguous though the
    inputs are not; the fakes (what torch.compile plans with) the same."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cur, w, b, beta, thr, grad = op_inputs("C20-two-blocks", torch.float32)
    cur, grad, w, b = _strided(cur.to(dtype)), _strided(grad.to(dtype)), _strided(w.float()), b
    assert not cur.is_contiguous() and not grad.is_contiguous()
    real = lif_forward(cur, w, b.float(), beta, thr, 25.0, "portable")
    real_bw = lif_backward(grad, real[1], w, beta, thr, 25.0, "portable")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = lif_forward(*(mode.from_tensor(x) for x in (cur, w, b.float())), beta, thr,
                           25.0, "portable")
        fake_bw = lif_backward(*(mode.from_tensor(x) for x in (grad, real[1], w)), beta, thr,
                               25.0, "portable")
    assert [x.dtype for x in real] == [dtype, torch.float32]
    assert [x.dtype for x in real_bw] == [dtype, torch.float32, torch.float32]
    for r, f in zip([*real, *real_bw], [*fake, *fake_bw], strict=True):
        assert r.is_contiguous() and (r.dtype, r.shape, r.stride()) == (f.dtype, f.shape,
                                                                         f.stride())


@pytest.mark.parametrize("forced, said", [(None, "LIF path portable (auto)"),
                                          ("reference", "LIF path reference (TA_LIF_PATH="
                                                        "reference)")])
def test_the_runs_device_line_says_which_lif_path_runs(forced, said, tmp_path, monkeypatch,
                                                       capsys):
    from lib import session
    from lib.workloads.mamba_spike import MambaSpikeRunConfig

    if forced:
        monkeypatch.setenv(LIF_PATH_ENV, forced)
    cfg = MambaSpikeRunConfig.from_params(dict(
        PLATFORM="local", DEVICE="cpu", DATA_DIR=str(tmp_path / "data"),
        OUT_DIR=str(tmp_path / "run"), SAMPLE_DATA=True, SMOKE=True, BATCH_SIZE=None, SEED=1))
    session.start(cfg, runtime="local")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if " -> device cpu " in x]
    assert line.endswith(f"; {said}"), line


def test_the_guide_documents_the_variable_and_every_path():
    from pathlib import Path

    from lib.kernels import PATHS

    guide = (Path(__file__).resolve().parent.parent / "docs/guides/workloads.md").read_text()
    assert f"`{LIF_PATH_ENV}`" in guide and "LIF path portable (auto)" in guide
    assert all(f"`{path}`" in guide for path in PATHS)
