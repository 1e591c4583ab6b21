"""COMPILE: where torch.compile runs, what "auto" chooses, and that a compiled run computes
the same numbers as an eager one, resumes, and leaves checkpoints an uncompiled model loads."""

import pytest
import torch

from lib import workloads
from lib.runtime import compile
from lib.runtime.device import Probe, choose_device
from lib.runtime.platforms import get_platform
from lib.training.config import ConfigError
from lib.workloads.fashion_mnist import FashionConfig
from lib.workloads.optimizer_study import OptimizerStudyConfig
from tests.test_train import make_task, strip, train

T4 = Probe(cuda=True, cuda_name="Tesla T4", capability=(7, 5), arch_list=("sm_75",),
           cuda_count=1)
P100 = Probe(cuda=True, cuda_name="Tesla P100-PCIE-16GB", capability=(6, 0),
             arch_list=("sm_60",), cuda_count=1)


def _choice(device, probe, platform="colab_t4"):
    return choose_device(device, get_platform(platform), probe, environ={})


def test_never_on_a_p100_mps_or_xla():
    p100 = _choice("cuda", P100, "kaggle_p100")
    assert not p100.compile_ok and "sm_60" in p100.compile_note
    mps = _choice("mps", Probe(mps=True), "local")
    xla = _choice("xla", Probe(xla_installed=True), "colab_tpu")
    for choice in (p100, mps, xla):
        assert compile.decide("auto", OptimizerStudyConfig, choice) == (False, choice.compile_note)
        with pytest.raises(ConfigError, match="COMPILE=True"):
            compile.decide(True, OptimizerStudyConfig, choice)
        assert compile.decide(False, OptimizerStudyConfig, choice)[0] is False


def test_auto_follows_the_table_and_stays_off_in_smoke_runs():
    cpu = _choice("cpu", Probe())
    assert cpu.compile_ok  # this machine has a C++ compiler
    t4 = _choice("cuda", T4)
    if t4.compile_ok:  # Triton installed (it comes with torch's Linux wheels)
        assert compile.decide("auto", OptimizerStudyConfig, t4)[0] is True
        assert compile.decide("auto", OptimizerStudyConfig, t4, smoke=True) == (
            False, compile.SMOKE_REASON)
    for name in workloads.names():  # each workload's COMPILE_AUTO, as its config says
        config = workloads.get(name).config
        on = config.COMPILE_AUTO.get("cpu", False)
        decided, why = compile.decide("auto", config, cpu)
        assert decided is on
        # a user about to wait for a compile is told so, and how not to
        assert ("takes minutes" in why and "COMPILE = False starts at once" in why) is on
    assert compile.decide(True, FashionConfig, cpu) == (True, "COMPILE = True")


def test_auto_does_not_compile_a_mamba_spike_run_whose_t_changes_between_batches():
    from lib.workloads.mamba_spike import MambaSpikeRunConfig

    def run(**changes):
        return MambaSpikeRunConfig.from_params(dict(PLATFORM="colab_t4", SAMPLE_DATA=True,
                                                    N_TIME_BINS=None, **changes))

    cpu = _choice("cpu", Probe())
    assert MambaSpikeRunConfig.COMPILE_AUTO["cpu"]  # measured: it pays on the CPU at a fixed T
    assert run().varying_shapes() == "" and run(DT_US=1000, FIXED_T=300).varying_shapes() == ""
    varying = run(DT_US=1000).varying_shapes()
    assert "DT_US without FIXED_T" in varying
    assert compile.decide("auto", MambaSpikeRunConfig, cpu, varying=varying) == (
        False, f"{varying}: each new shape would compile again")
    assert compile.decide(True, MambaSpikeRunConfig, cpu, varying=varying) == (
        True, "COMPILE = True")
    assert compile.decide("auto", MambaSpikeRunConfig, cpu, varying="")[0] is True


def test_compile_is_a_run_setting_and_checked():
    params = dict(PLATFORM="colab_t4", EPOCHS=1, LR=1.0)
    eager = FashionConfig.from_params(dict(params, COMPILE=False))
    compiled = FashionConfig.from_params(dict(params, COMPILE=True))
    assert eager.identity(64) == compiled.identity(64)  # how, not what: the run resumes
    with pytest.raises(ConfigError, match="COMPILE='yes'"):
        FashionConfig.from_params(dict(params, COMPILE="yes"))
    with pytest.raises(ConfigError, match="COMPILE=1 has type int"):
        FashionConfig.from_params(dict(params, COMPILE=1))


def _assert_close(history, expected):
    """Epoch records equal, floats within float32 rounding (compile_seconds aside)."""
    for got, want in zip(strip(history), strip(expected), strict=True):
        got.pop("compile_seconds", None)
        want.pop("compile_seconds", None)
        assert got.keys() == want.keys()
        for k, v in want.items():
            if isinstance(v, float):
                assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
            else:
                assert got[k] == v, k


def _compiled_task(**kw):
    task = make_task(**kw)
    compile.apply(task.model, True)
    return task


class _Dropped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.dropout(self.linear(x), 0.5, self.training)


def _masked(how):
    torch.manual_seed(0)
    model = _Dropped()
    if how == "plain":
        model.compile()  # inductor's own random masks
    elif how == "apply":
        compile.apply(model, True)
    torch.manual_seed(1)
    return model(torch.ones(4, 8))


@pytest.mark.slow  # compiles through inductor
def test_eager_masks_hold_after_the_same_class_was_compiled_plainly_in_this_process():
    """CI found it: Dynamo reuses a class's compiled forward across instances and does not
    guard inductor's global config, so a model compiled plainly first handed a later
    compile.apply its graph, and the run's dropout masks (so its losses) left eager's."""
    eager = _masked("eager")
    assert not torch.equal(_masked("plain"), eager)  # the plain compile does draw its own
    torch.testing.assert_close(_masked("apply"), eager, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # compiles through inductor: make test, not test-quick
def test_a_compiled_run_computes_the_eager_numbers_resumes_and_saves_plain_weights(tmp_path):
    """Toy model with dropout: the same masks (fallback_random), losses and weights within
    float rounding; a run killed after epoch 1 resumes to the uninterrupted numbers; the
    checkpoint loads strictly into an uncompiled model."""
    eager, h_eager = train(tmp_path / "eager", 2)
    straight, h_straight = train(tmp_path / "a", 2, task=_compiled_task(), compiled=True)
    assert compile.is_compiled(straight.model)
    assert h_straight[0]["compile_seconds"] >= 0 and "compile_seconds" not in h_straight[1]
    _assert_close(h_straight, h_eager)
    for p, q in zip(straight.model.parameters(), eager.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    train(tmp_path / "b", 1, task=_compiled_task(), compiled=True)
    resumed, h_resumed = train(tmp_path / "b", 2, task=_compiled_task(init_seed=9),
                               compiled=True)
    assert "compile_seconds" in h_resumed[1]  # the resumed session compiled again
    _assert_close(h_resumed, h_straight)
    for p, q in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    state = torch.load(tmp_path / "b" / "checkpoints" / "best.pt", weights_only=True)
    assert not any("_orig_mod" in k for k in state["model"])
    plain = make_task(init_seed=5).model
    plain.load_state_dict(state["model"])  # strict


def test_the_epoch_line_shows_compile_time_once_and_the_eta_leaves_it_out(tmp_path, capsys):
    from lib.runs.folder import RunFolder

    run = RunFolder(tmp_path, "toy", {}, tensorboard=False, progress=False)
    run.begin([], 0)
    bar = run.progress(total=3)
    record = {"epoch": 1, "lr": 0.1, "train_loss": 1.0, "seconds": 100.0,
              "compile_seconds": 90.0, "samples_per_s": 10.0}
    run.end_epoch(record, 3, bar)
    later = {k: v for k, v in record.items() if k != "compile_seconds"}
    run.end_epoch(dict(later, epoch=2, seconds=10.0), 3, bar)
    first, second = capsys.readouterr().out.strip().splitlines()
    # two epochs left at the 10 s an epoch takes once compiled: 20 s, not 2 x 100 s
    assert first.endswith("ETA 0.3 min  (compiling took 90 s, once)")
    assert "compiling" not in second and "ETA 0.2 min" in second
