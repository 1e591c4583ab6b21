"""Device choice, preflight and precision with the machine faked by a hand-built Probe."""

import itertools

import pytest
import torch

from lib.runtime.device import DeviceError, Probe, choose_device, choose_precision, cuda_preflight
from lib.runtime.platforms import ANY, PLATFORMS, get_platform

T4 = dict(cuda=True, cuda_name="Tesla T4", capability=(7, 5), cuda_count=1,
          arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
A100 = dict(T4, cuda_name="NVIDIA A100", capability=(8, 0))
# Kaggle's torch (CUDA 12.8 build) on a P100: no sm_60 kernels and no PTX to JIT from.
P100_KAGGLE = dict(T4, cuda_name="Tesla P100-PCIE-16GB", capability=(6, 0),
                   torch_version="2.10.0+cu128")
P100_CU126 = dict(P100_KAGGLE, arch_list=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80"),
                  torch_version="2.14.1+cu126")
NO_ENV: dict = {}


def pick(platform="colab_t4", device="auto", environ=NO_ENV, **probe):
    return choose_device(device, get_platform(platform), Probe(**probe), environ=environ)


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize("cuda,mps,xla", list(itertools.product([False, True], repeat=3)))
def test_auto_prefers_the_platform_accelerator_then_cuda_xla_mps_cpu(platform, cuda, mps, xla):
    machine = dict(T4 if cuda else {}, mps=mps, xla_installed=xla,
                   xla_device_type="TPU" if xla else "")
    choice = pick(platform, **machine)
    available = {"cuda": cuda, "xla": xla, "mps": mps}
    wanted = PLATFORMS[platform].accelerator
    if wanted == ANY:  # the local notebook: this machine's best, saying which it found
        expected = next((k for k in ("cuda", "xla", "mps") if available[k]), "cpu")
        assert choice.type == expected
        assert ("this machine's best device" if expected != "cpu" else
                "no CUDA GPU or Apple MPS found") in choice.reason
        return
    expected = wanted if available[wanted] else next(
        (k for k in ("cuda", "xla", "mps") if available[k]), "cpu")
    assert choice.type == expected
    if expected != wanted:  # one line that says what it fell back to and why
        assert f"no {wanted} here" in choice.reason


def test_xla_on_a_cpu_host_is_used_only_by_the_tpu_notebook():
    cpu_xla = dict(xla_installed=True, xla_device_type="CPU")
    assert pick("colab_tpu", **cpu_xla).type == "xla"
    assert pick("colab_t4", **cpu_xla).type == "cpu"
    assert pick("local", **cpu_xla).type == "cpu"


def test_cpu_fallback_says_so_in_one_line():
    choice = pick("kaggle_p100")
    assert choice.type == "cpu"
    assert "\n" not in choice.describe()
    assert "falls back to the CPU" in choice.describe() and "cuda" in choice.describe()


@pytest.mark.parametrize("request_", ["cuda", "mps", "xla", "cpu"])
def test_explicit_device_is_honoured_when_present(request_):
    machine = dict(T4, mps=True, xla_installed=True, xla_device_type="TPU")
    choice = pick("colab_t4", device=request_, **machine)
    assert choice.type == request_
    assert f'DEVICE="{request_}"' in choice.reason


def test_explicit_device_that_is_absent_fails_clearly():
    with pytest.raises(DeviceError, match=r'DEVICE="cuda".*no cuda device.*DEVICE = "auto"'):
        pick("colab_t4", device="cuda")


def test_unknown_device_is_refused_by_the_config_cell():
    from lib.workloads.fashion_mnist import FashionConfig

    with pytest.raises(ValueError, match=r"unknown DEVICE 'gpu'.*'auto', 'cuda'.*DEVICE = "):
        FashionConfig.from_params({"PLATFORM": "colab_t4", "DEVICE": "gpu"})


def test_environment_override_wins_and_is_validated():
    choice = pick("colab_t4", environ={"TA_DEVICE": "cpu"}, **T4)
    assert choice.type == "cpu" and "TA_DEVICE=cpu" in choice.reason
    with pytest.raises(ValueError, match="TA_DEVICE='tpu'"):
        pick(environ={"TA_DEVICE": "tpu"})


def test_no_cuda_and_no_mps_switches():
    machine = dict(T4, mps=True)
    assert pick("colab_t4", environ={"NO_CUDA": "1"}, **machine).type == "mps"
    choice = pick("colab_t4", environ={"NO_CUDA": "1", "NO_MPS": "1"}, **machine)
    assert choice.type == "cpu" and "switched off" in choice.reason


def test_p100_under_a_torch_without_sm60_is_caught_before_the_first_kernel():
    with pytest.raises(DeviceError) as err:
        pick("kaggle_p100", **P100_KAGGLE)
    msg = str(err.value)
    for part in ("Tesla P100", "sm_60", "2.10.0+cu128", "cu126", "T4 x2", 'DEVICE = "cpu"'):
        assert part in msg


def test_p100_with_a_pascal_build_passes_preflight():
    choice = pick("kaggle_p100", **P100_CU126)
    assert choice.type == "cuda"
    assert choice.precision.dtype == torch.float16 and choice.precision.scaler


def test_ptx_entry_lets_a_newer_gpu_jit():
    cuda_preflight(Probe(**dict(T4, capability=(12, 1), arch_list=("sm_80", "compute_90"))))
    with pytest.raises(DeviceError):
        cuda_preflight(Probe(**dict(T4, capability=(7, 5), arch_list=("sm_80", "compute_80"))))


@pytest.mark.parametrize("kind,machine,dtype,scaler", [
    ("cuda", T4, torch.float16, True),  # bf16 is emulated on T4: fp16 + GradScaler
    ("cuda", A100, torch.bfloat16, False),
    ("xla", {}, torch.bfloat16, False),
    ("mps", dict(torch_version="2.8.0"), torch.float16, True),
    ("mps", dict(torch_version="2.4.1"), None, False),
    ("cpu", {}, None, False),
])
def test_precision_per_device(kind, machine, dtype, scaler):
    precision = choose_precision(kind, Probe(**machine))
    assert (precision.dtype, precision.scaler) == (dtype, scaler)


def test_loader_settings_follow_the_device_not_the_data():
    cuda = pick("colab_t4", **T4)
    mps = pick("local", mps=True)
    xla = pick("colab_tpu", xla_installed=True)
    cpu = pick("colab_t4")
    assert (cuda.pin_memory, mps.pin_memory, xla.pin_memory, cpu.pin_memory) == (
        True, False, False, False)
    assert mps.num_workers == 0  # macOS spawn workers cannot pickle notebook classes
    assert cuda.num_workers == PLATFORMS["colab_t4"].num_workers


# The 2026 line-up: say what really runs, in the one device line.
L4 = dict(T4, cuda_name="NVIDIA L4", capability=(8, 9), arch_list=T4["arch_list"] + ("sm_89",))
H100 = dict(T4, cuda_name="NVIDIA H100 80GB HBM3", capability=(9, 0))


def test_the_kaggle_p100_notebook_on_a_t4_says_p100s_are_retired():
    choice = pick("kaggle_p100", **T4)
    line = choice.describe()
    assert choice.type == "cuda" and "\n" not in line
    assert line == ("device cuda (fp16) on Tesla T4 (sm_75): the Kaggle P100 notebook runs on a "
                    "Tesla T4: Kaggle has retired its P100s, and a notebook asking for one gets "
                    "a T4")


@pytest.mark.parametrize("machine,dtype,tf32,name", [
    (T4, torch.float16, False, "Tesla T4 (sm_75)"),
    (L4, torch.bfloat16, True, "NVIDIA L4 (sm_89)"),
    (A100, torch.bfloat16, True, "NVIDIA A100 (sm_80)"),
    (H100, torch.bfloat16, True, "NVIDIA H100 80GB HBM3 (sm_90)"),
])
def test_colab_gpu_precision_follows_the_gpu_found_and_the_line_names_it(machine, dtype, tf32,
                                                                         name):
    choice = pick("colab_t4", **machine)
    assert (choice.precision.dtype, choice.tf32) == (dtype, tf32)
    line = choice.describe()
    assert f" on {name}: " in line
    assert ("TF32 matmuls" in line) is tf32
    if machine is not T4:
        assert f"runs on a {machine['cuda_name']}, not a T4: precision follows the GPU" in line


def test_tf32_is_switched_on_only_for_a_real_ampere_gpu():
    before = torch.backends.cuda.matmul.allow_tf32
    pick("colab_t4", **A100)  # a faked probe never touches torch's global switches
    assert torch.backends.cuda.matmul.allow_tf32 == before


@pytest.mark.parametrize("platform", ["colab_tpu", "kaggle_tpu"])
def test_xla_on_a_cpu_says_it_is_the_cpu_not_a_tpu(platform):
    line = pick(platform, xla_installed=True, xla_device_type="CPU").describe()
    assert line.startswith("device xla (bf16) on the CPU (XLA): ")
    assert "XLA runs on the CPU here (PJRT_DEVICE=CPU), not on a TPU" in line
    assert "accelerator is available" not in line
    assert ("torch_xla.launch is not in use" in line) is (platform == "kaggle_tpu")
    tpu = pick(platform, xla_installed=True, xla_device_type="TPU").describe()
    assert "on a TPU: the" in tpu and "accelerator is available" in tpu and "CPU" not in tpu


def test_probe_reads_the_xla_device_type_from_pjrt_device_without_importing_torch_xla():
    from lib.runtime.device import probe

    assert probe(environ={"PJRT_DEVICE": "cpu"}).xla_device_type == "CPU"
    assert probe(environ={}).xla_device_type == ""


@pytest.mark.parametrize("machine,expected", [
    ({}, "no cuda here: one process on one device, DDP is not in use"),
    (dict(T4, cuda_count=1), "1 GPU here: one process on one device, DDP is not in use"),
])
def test_t4x2_without_two_gpus_says_ddp_is_not_in_use(machine, expected):
    line = pick("kaggle_t4x2", **machine).describe()
    assert line.endswith("; " + expected) and "\n" not in line


def test_t4x2_with_two_gpus_has_no_caveat():
    line = pick("kaggle_t4x2", **dict(T4, cuda_count=2)).describe()
    assert line == ("device cuda (fp16) on 2 x Tesla T4 (sm_75): the Kaggle T4 x2 notebook's "
                    "accelerator is available")


@pytest.mark.parametrize("machine,kind,batch,precision", [
    (T4, "cuda", 256, "fp16"),  # a workstation's own NVIDIA GPU
    (dict(mps=True, torch_version="2.8.0"), "mps", 128, "fp16"),  # a Mac
    ({}, "cpu", 128, "fp32"),  # a laptop or CI
])
def test_the_local_notebook_takes_what_this_machine_has(machine, kind, batch, precision):
    """CUDA > MPS > CPU, saying which; the default batch and precision follow the device."""
    from lib.workloads.fashion_mnist import FashionConfig

    choice = pick("local", **machine)
    assert (choice.type, choice.precision.name) == (kind, precision)
    assert "\n" not in choice.describe() and "Mac" not in choice.describe()
    cfg = FashionConfig(platform="local", epochs=1, lr=1.0)
    assert cfg.resolved_batch_size(choice.type) == batch


def test_an_old_platform_name_is_refused_naming_the_new_one():
    from lib.base.errors import ConfigError

    with pytest.raises(ConfigError, match="PLATFORM 'local_mps' is now 'local'"):
        get_platform("local_mps")
