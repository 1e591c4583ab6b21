"""Studio Lab, SageMaker and Paperspace: detection, storage, the /dev/shm and GPU checks, and
too-old Python / torch, each against the service's documented environment
(lib/runtime/clouds.py)."""

import json
import os
import subprocess
import tomllib
from collections import namedtuple
from pathlib import Path

import pytest
import torch
import yaml

from lib import bootstrap
from lib.base.errors import DeviceError, OutDirError
from lib.runtime import clouds
from lib.runtime.device import Probe, choose_device, shm_workers
from lib.runtime.platforms import default_dirs, detect_runtime, get_platform
from tests.cloud_standins import fill

ROOT = Path(__file__).resolve().parent.parent
T4 = dict(cuda=True, cuda_name="Tesla T4", capability=(7, 5), cuda_count=1,
          arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"))
CU128 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")  # torch 2.11's default wheels


def env(root, **more):
    return {"TA_CLOUD_ROOT": str(root), **more}


def nothing(path):
    return False


def test_each_service_is_recognised_by_what_it_sets(tmp_path):
    lab = env(tmp_path, HOME=str(tmp_path / "home/studio-lab-user"),
              SAGEMAKER_INTERNAL_IMAGE_URI="x")  # AWS's packages read this in paid Studio too
    assert clouds.detect(lab, nothing) == "studiolab"
    assert clouds.detect(env(tmp_path, SAGEMAKER_APP_TYPE="JupyterLab"), nothing) == "sagemaker"
    meta = tmp_path / clouds.SAGEMAKER_METADATA
    assert clouds.detect(env(tmp_path), lambda p: p == meta) == "sagemaker"
    assert clouds.detect(env(tmp_path, PAPERSPACE_NOTEBOOK_ID="n1"), nothing) == "paperspace"
    both = {tmp_path / "notebooks", tmp_path / "storage"}
    assert clouds.detect(env(tmp_path), lambda p: p in both) == "paperspace"
    assert clouds.detect(env(tmp_path), lambda p: p == tmp_path / "notebooks") is None
    assert clouds.detect(env(tmp_path, HOME=str(tmp_path / "home" / "someone")), nothing) is None
    # Colab and Kaggle are asked first; then these; else local
    assert detect_runtime(env(tmp_path, SAGEMAKER_APP_TYPE="JupyterLab"), {}) == "sagemaker"
    assert detect_runtime(env(tmp_path, SAGEMAKER_APP_TYPE="JupyterLab",
                              KAGGLE_KERNEL_RUN_TYPE="Batch"), {}) == "kaggle"


def test_a_notebook_instance_is_told_from_a_studio_space(tmp_path):
    meta = tmp_path / clouds.SAGEMAKER_METADATA
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"ResourceArn": "arn:aws:sagemaker:us-east-1:1:"
                                "notebook-instance/mine", "ResourceName": "mine"}))
    assert clouds.sagemaker_kind(env(tmp_path)) == "instance"
    meta.write_text(json.dumps({"ResourceArn": "arn:aws:sagemaker:us-east-1:1:space/d/s"}))
    assert clouds.sagemaker_kind(env(tmp_path)) == "studio"
    roles = clouds.storage("sagemaker", env(tmp_path))
    assert roles.durable == tmp_path / "home/sagemaker-user/train-anywhere-work/runs"
    instance = env(tmp_path, HOME=str(tmp_path / "home/ec2-user"))
    assert clouds.storage("sagemaker", instance).durable == (
        tmp_path / "home/ec2-user/SageMaker/train-anywhere-work/runs")


def test_defaults_are_on_what_survives_and_never_under_paperspace_notebooks(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("TA_CLOUD_ROOT", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home/studio-lab-user"))
    data, out = default_dirs("mshnet", "studiolab")
    assert out == tmp_path / "home/studio-lab-user/train-anywhere-work/runs/mshnet"
    assert data == tmp_path / "home/studio-lab-user/train-anywhere-work/data"
    data, out = default_dirs("mshnet", "paperspace")
    assert out == tmp_path / "storage/train-anywhere/runs/mshnet"
    assert tmp_path / "notebooks" not in out.parents
    with pytest.raises(OutDirError, match="reserves folders named 'checkpoints'"):
        clouds.check_out_dir(tmp_path / "notebooks" / "runs" / "x", "paperspace")
    clouds.check_out_dir(out, "paperspace")
    clouds.check_out_dir(tmp_path / "notebooks" / "x", "sagemaker")  # only Paperspace's rule


def test_session_limits_are_the_services(tmp_path):
    assert get_platform("studiolab_t4").session_hours == 4.0  # GPU sessions of 4 h
    # the advice given with the ETA warning and the clean stop names what ends a session there
    assert "caps GPU time per day" in clouds.storage("studiolab", env(tmp_path)).carry_over
    assert "idle shutdown" in clouds.storage("sagemaker", env(tmp_path)).carry_over
    assert "shuts down after 6 h" in clouds.storage("paperspace", env(tmp_path)).carry_over
    assert get_platform("paperspace_gpu").session_hours == 6.0  # free machines' shutdown
    assert get_platform("sagemaker_gpu").session_hours is None  # billed, no limit


def test_workers_shrink_to_what_dev_shm_holds_and_say_so():
    assert shm_workers(2, None) == (2, "")
    assert shm_workers(2, 8 * 2**30) == (2, "")
    workers, line = shm_workers(2, 64 * 2**20)  # a container's default
    assert workers == 0 and "/dev/shm has 64 MB free: DataLoader workers 2 -> 0" in line
    choice = choose_device("auto", get_platform("paperspace_gpu"),
                           Probe(**T4, shm_free=300 * 2**20), environ={})
    assert choice.num_workers == 1 and "DataLoader workers 2 -> 1" in choice.describe()


@pytest.mark.parametrize("platform,name,capability,dtype", [
    ("sagemaker_gpu", "Tesla T4", (7, 5), torch.float16),
    ("sagemaker_gpu", "NVIDIA A10G", (8, 6), torch.bfloat16),
    ("paperspace_gpu", "NVIDIA RTX A4000", (8, 6), torch.bfloat16),
    ("paperspace_gpu", "Quadro RTX 4000", (7, 5), torch.float16),
])
def test_precision_follows_the_gpu_found(platform, name, capability, dtype):
    choice = choose_device("auto", get_platform(platform),
                           Probe(**dict(T4, cuda_name=name, capability=capability)), environ={})
    assert choice.precision.dtype == dtype


@pytest.mark.parametrize("platform,name,capability,fix", [
    ("sagemaker_gpu", "Tesla V100-SXM2-16GB", (7, 0), "ml.g4dn (T4)"),  # ml.p3
    ("paperspace_gpu", "Quadro M4000", (5, 2), "RTX or Ampere machine"),
    ("paperspace_gpu", "Quadro P4000", (6, 1), "RTX or Ampere machine"),
])
def test_a_torch_without_kernels_for_the_gpu_is_one_line_with_this_services_fix(
        platform, name, capability, fix):
    machine = dict(T4, cuda_name=name, capability=capability, arch_list=CU128,
                   torch_version="2.11.0+cu128")
    with pytest.raises(DeviceError) as err:
        choose_device("auto", get_platform(platform), Probe(**machine), environ={})
    line = err.value.one_line()
    sm = f"sm_{capability[0]}{capability[1]}"
    for part in (name, sm, "2.11.0+cu128", "whl/cu126", fix, 'DEVICE = "cpu"'):
        assert part in line, (part, line)
    assert "\n" not in line


def test_too_old_python_is_one_line_naming_environment_yml(tmp_path):
    lab = env(tmp_path, HOME=str(tmp_path / "home/studio-lab-user"))
    line = bootstrap.python_problem((3, 9), lab)
    assert line.startswith("this kernel runs Python 3.9, the project needs 3.11 or newer")
    assert "environment.yml" in line and "train-anywhere" in line
    assert bootstrap.python_problem((3, 11), lab) is None
    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert spec["name"] == "train-anywhere" and "ipykernel" in spec["dependencies"]
    python = next(d for d in spec["dependencies"] if str(d).startswith("python="))
    assert tuple(map(int, python.split("=")[1].split("."))) >= bootstrap.MIN_PYTHON
    # The environment is the lane CI tests Studio Lab's notebooks in (images.toml), not newer.
    lane = tomllib.loads((ROOT / "images.toml").read_text())["images"]["sagemaker_distribution"]
    (pip,) = [d["pip"] for d in spec["dependencies"] if isinstance(d, dict)]
    assert python == f"python={lane['python']}"
    assert {f"{k}=={lane['pins'][k]}" for k in ("torch", "torchvision")} <= set(pip)


def test_a_real_python_39_stops_at_the_bootstrap_import_with_that_line(tmp_path):
    """Studio Lab's old default kernel: the bootstrap cell's `from lib.bootstrap import
    prepare` raises EnvironmentTooOld (IPython shows its one line) before any 3.11 module."""
    python = next((p for p in sorted(Path.home().glob(".pyenv/versions/3.9.*/bin/python3.9"))),
                  None)
    if python is None:
        pytest.skip("no Python 3.9 here (pyenv install 3.9): the line is tested above")
    home = tmp_path / "home/studio-lab-user"
    out = subprocess.run([str(python), "-c", "import lib.bootstrap"], cwd=ROOT,
                         capture_output=True, text=True,
                         env={"TA_CLOUD_ROOT": str(tmp_path), "HOME": str(home),
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("lib.bootstrap.EnvironmentTooOld: this kernel runs Python 3.9"), last
    assert "environment.yml" in last


@pytest.mark.parametrize("runtime,have,fix", [
    # Paperspace's default image; the container (and the install) is gone after a shutdown
    ("paperspace", "2.1.1+cu121", "whl/cu126`, then Kernel > Restart Kernel (again in each new"),
    ("studiolab", None, "environment.yml"),
    ("sagemaker", "2.2.0", "pip install -U torch torchvision"),
])
def test_too_old_torch_is_one_line_with_the_fix(runtime, have, fix):
    def version(name):
        if have is None:
            raise bootstrap.importlib.metadata.PackageNotFoundError(name)
        return have

    line = bootstrap.torch_problem(runtime, version)
    assert f"this kernel has {'torch ' + have if have else 'no torch'}; the project needs " \
           "torch 2.3 or newer; fix: " in line and fix in line
    assert bootstrap.torch_problem(runtime, lambda name: "2.8.0") is None


def test_python_too_old_message_elsewhere_names_the_sagemaker_kernel(tmp_path):
    line = bootstrap.python_problem((3, 10), env(tmp_path, SAGEMAKER_APP_TYPE="JupyterLab"))
    assert "sagemaker-distribution" in line and "3.10" in line

def test_an_8_gb_gpu_gets_half_the_t4_batch_and_the_study_keeps_its_global_batch():
    """Paperspace's free GPUs have 8 GB: each workload's default batch is halved there (the
    workload's own BATCH_SIZES, scaled by the platform), except the optimizer study's 128."""
    from lib.workloads import get

    for name in ("fashion_mnist", "mshnet", "mamba_spike"):
        config = get(name).config
        assert config.default_batch("paperspace_gpu") * 2 == config.default_batch("colab_t4")
    study = get("optimizer_study").config
    assert study.default_batch("paperspace_gpu") == study.default_batch("colab_t4") == 128


def test_studio_lab_checks_a_download_against_its_15_gb_quota_not_the_disk(tmp_path,
                                                                           monkeypatch):
    """Studio Lab's home is 15 GB, conda environments and pip installs included: a download
    that the disk behind it would hold but the quota would not stops first with one line (both
    numbers, Studio Lab's fix); with room in the quota it goes ahead."""
    import tonic

    from lib.data import events, space

    home = tmp_path / "home/studio-lab-user"
    monkeypatch.setenv("TA_CLOUD_ROOT", str(tmp_path))
    monkeypatch.setenv("HOME", str(home))
    usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(space.shutil, "disk_usage", lambda p: usage(10**13, 0, 10**12))
    env = fill(home, 10 * 10**9)  # a 10 GB conda environment
    (home / ".conda/pkgs").mkdir()
    os.link(env, home / ".conda/pkgs/libtorch_cuda.so")  # conda's package cache: counted once
    called = []
    monkeypatch.setattr(tonic.datasets.DVSGesture, "__init__",
                        lambda self, *a, **k: called.append(1) or (_ for _ in ()).throw(
                            RuntimeError("download failed")))
    data, _ = default_dirs("mamba_spike", "studiolab")
    with pytest.raises(space.NoSpace) as err:
        events.load_events("dvsgesture", data, True)
    line = err.value.one_line()
    assert "downloading and unpacking DVSGesture needs 8.00 GB" in line, line
    assert (f"Studio Lab's 15 GB project storage has 5.00 GB free (10.00 GB of 15.00 GB used "
            f"under {home})") in line, line
    assert "conda env remove" in line and "\n" not in line and called == []
    env.unlink()  # the environment and the cache removed: the download goes ahead
    (home / ".conda/pkgs/libtorch_cuda.so").unlink()
    with pytest.raises(FileNotFoundError, match="downloading it failed"):
        events.load_events("dvsgesture", data, True)
    assert called == [1]
    # Outside the home (or off Studio Lab) only the disk counts.
    assert space.free_bytes(tmp_path / "elsewhere") == 10**12
    assert clouds.quota(home / "x", {"TA_CLOUD_ROOT": str(tmp_path), "HOME": "/root"}) is None
