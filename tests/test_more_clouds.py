"""Lightning AI Studios, Modal Notebooks, Colab Enterprise / Workbench, a JupyterHub, and Colab
and Kaggle as they are at the end of 2026: detection, storage roles, limits, Modal's Volume
advice and refusal, the bootstrap's checks, precision per GPU, Kaggle Models inputs and pushes.
None of these trains (tests/test_notebooks_more_clouds.py runs the notebooks)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from lib import bootstrap
from lib.base.errors import OutDirError
from lib.runtime import clouds
from lib.runtime.device import Probe, choose_device
from lib.runtime.platforms import (
    PLATFORMS,
    default_dirs,
    detect_runtime,
    get_platform,
    input_roots,
    session_limit_hours,
    storage,
)
from tests import cloud_standins as standin

ROOT = Path(__file__).resolve().parent.parent
CU128 = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")


def standin_env(make, root, **kwargs):
    env, home, ours = make(root, **kwargs)
    return {**env, "TA_CLOUD_ROOT": str(root)}, home, ours


@pytest.fixture
def in_env(monkeypatch):
    """Set a stand-in's environment in os.environ (what lib.runtime.platforms.storage reads)."""
    def apply(env):
        for key in ("HOME", "TA_CLOUD_ROOT", *clouds.LIGHTNING_VARS, *clouds.MODAL_VARS,
                    "VERTEX_PRODUCT", "COLAB_RELEASE_TAG", *clouds.JUPYTERHUB_VARS,
                    clouds.MODAL_VOLUME_ENV, clouds.EPHEMERAL_OK_ENV):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
    return apply


def test_each_service_is_told_from_every_other(tmp_path):
    """Every stand-in is recognised as itself, and the order never mistakes one for another:
    Colab Enterprise sets Colab's variable but is not Colab; a hub's variables beside a named
    service's leave it that service; a hub alone is a hub; Kaggle and Colab come first."""
    found = {}
    for name, make in [("lightning", standin.lightning), ("modal", standin.modal),
                       ("vertex", standin.colab_enterprise), ("jupyterhub", standin.jupyterhub)]:
        root = tmp_path / name
        root.mkdir()
        env, _, _ = standin_env(make, root)
        found[name] = detect_runtime(env, {})
        hub = {"JUPYTERHUB_USER": "student", "JUPYTERHUB_API_URL": "http://hub/api"}
        assert detect_runtime({**env, **hub}, {}) == found[name]  # services run on hubs too
    assert found == {"lightning": "lightning", "modal": "modal", "vertex": "vertex",
                     "jupyterhub": "jupyterhub"}
    workbench = {"VERTEX_PRODUCT": "WORKBENCH_INSTANCE", "TA_CLOUD_ROOT": str(tmp_path)}
    assert detect_runtime(workbench, {}) == "vertex"
    # Colab proper: its variable or its module, without VERTEX_PRODUCT (or another product)
    assert detect_runtime({"COLAB_RELEASE_TAG": "release-colab_20261101-060000"}, {}) == "colab"
    assert detect_runtime({"VERTEX_PRODUCT": "SOMETHING_ELSE", "COLAB_RELEASE_TAG": "x"},
                          {}) == "colab"
    assert detect_runtime({}, {"google.colab": object()}) == "colab"
    assert detect_runtime({"KAGGLE_KERNEL_RUN_TYPE": "Interactive",
                           "JUPYTERHUB_USER": "x"}, {}) == "kaggle"
    # Modal's notebooks: `modal.is_local()` says True there; the variables decide
    assert detect_runtime({"MODAL_TASK_ID": "ta-1"}, {}) == "modal"
    assert detect_runtime({"TA_CLOUD_ROOT": str(tmp_path)}, {}) == "local"


def test_lightning_keeps_data_and_runs_in_the_studios_home(tmp_path, in_env):
    env, home, ours = standin_env(standin.lightning, tmp_path)
    in_env(env)
    data, out = default_dirs("fashion_mnist", "lightning")
    assert (data, out) == (ours / "data", ours / "runs" / "fashion_mnist")
    assert home == tmp_path / "teamspace/studios/this_studio" and home in out.parents
    roles = storage("lightning")
    assert "machine switches" in roles.keeps and not roles.session_bound
    assert clouds.advice("lightning") == ""
    profile = get_platform("lightning_studio")
    assert session_limit_hours(profile, "lightning", {}) is None  # no documented cap
    assert session_limit_hours(profile, "lightning", {"TA_SESSION_HOURS": "2"}) == 2.0


def test_modal_keeps_runs_on_the_volume_and_data_in_the_container(tmp_path, in_env):
    env, home, ours = standin_env(standin.modal, tmp_path)
    in_env(env)
    data, out = default_dirs("mshnet", "modal")
    assert out == tmp_path / "mnt" / standin.MODAL_VOLUME / "train-anywhere/runs/mshnet"
    assert data == tmp_path / "tmp/train-anywhere/data"  # the container's disk: fast, refilled
    assert clouds.advice("modal") == ""
    clouds.check_out_dir(out, "modal")  # a full run on the Volume: allowed
    assert session_limit_hours(get_platform("modal"), "modal", {}) is None
    note = clouds.clock_note("modal", 7.5)
    assert "after 10 minutes" in note and "every 7.5 min (CHECKPOINT_MINUTES)" in note
    assert clouds.clock_note("lightning", 7.5) == ""
    # Several Volumes: TA_MODAL_VOLUME picks one; else the first by name
    (tmp_path / "mnt" / "a-data").mkdir()
    assert clouds.modal_volume() == tmp_path / "mnt" / "a-data"
    in_env({**env, clouds.MODAL_VOLUME_ENV: standin.MODAL_VOLUME})
    assert default_dirs("mshnet", "modal")[1] == out
    in_env({**env, clouds.MODAL_VOLUME_ENV: "not-attached"})  # said, not written in the container
    assert clouds.modal_volume() is None and clouds.advice("modal").startswith("no Modal Volume")


def test_a_new_modal_container_sees_only_what_was_committed(tmp_path, in_env):
    """The stand-in's Volume as Modal documents it (tests/cloud_standins.py): a new container
    mounts the last commit; a write after it is lost with a container that never shut down,
    kept by one that did (the final commit), and kept once a background commit landed. The
    code's idle stop and mount point are the documented ones."""
    env, home, ours = standin_env(standin.modal, tmp_path)
    in_env(env)
    volume = tmp_path / "mnt" / standin.MODAL_VOLUME
    assert clouds.modal_volume() == volume and standin.attached(tmp_path) == [volume.name]
    (volume / "ckpt.pt").write_text("epoch 1")
    standin.commit(tmp_path)  # Volume.commit()
    (volume / "ckpt.pt").write_text("epoch 2")
    (volume / "STOPPED.json").write_text("{}")
    (home / "clone").mkdir()
    standin.new_container(tmp_path, shutdown=False)  # lost before its final commit
    assert (volume / "ckpt.pt").read_text() == "epoch 1" and not (volume / "STOPPED.json").exists()
    assert not home.exists() and clouds.modal_volume() == volume
    (volume / "STOPPED.json").write_text("{}")
    standin.new_container(tmp_path)  # shut down: the final snapshot and commit
    assert (volume / "STOPPED.json").exists()
    with standin.background_commits(tmp_path, every=0.01) as landed:
        (volume / "ckpt.pt").write_text("epoch 3")
        written = time.monotonic()
        while not [t for t in landed if t > written]:
            assert time.monotonic() < written + 30, "no background commit landed"
            time.sleep(0.01)
    (volume / "late.json").write_text("{}")  # after the last background commit
    standin.new_container(tmp_path, shutdown=False)
    assert (volume / "ckpt.pt").read_text() == "epoch 3" and not (volume / "late.json").exists()
    assert clouds.MODAL_IDLE_MINUTES == standin.MODAL_IDLE_MINUTES  # the documented default
    assert clouds.advice("modal") == "" and "/mnt/<volume>" in clouds.NO_VOLUME


def test_modal_without_a_volume_says_how_to_attach_one_and_refuses_a_full_run(tmp_path,
                                                                              in_env):
    env, _, _ = standin_env(standin.modal, tmp_path, volume=False)
    in_env(env)
    advice = clouds.advice("modal")
    assert advice.startswith("no Modal Volume is attached") and "/mnt/<volume>" in advice
    assert "\n" not in advice
    lines = bootstrap.modal_lines("modal", os.environ, version=lambda name: "2.11.0+cu126")
    assert lines == ["bootstrap: Modal's default image is unpinned: torch 2.11.0+cu126 read "
                     "here", f"bootstrap: {advice}"]
    _, out = default_dirs("fashion_mnist", "modal")
    assert out == tmp_path / "tmp/train-anywhere/runs/fashion_mnist"
    assert "lost when it stops" in storage("modal").keeps
    with pytest.raises(OutDirError) as err:
        clouds.check_out_dir(out, "modal")
    line = str(err.value)
    assert line.startswith(f"OUT_DIR {str(out)!r} is in this Modal container") and "\n" not in line
    assert "TA_EPHEMERAL_OK=1" in line and "/mnt/<volume>" in line
    with pytest.raises(OutDirError):  # a folder under /mnt that is no attached Volume
        clouds.check_out_dir(tmp_path / "mnt" / "typo" / "runs", "modal")
    clouds.check_out_dir(out, "modal", smoke=True)  # a smoke run may run anywhere
    clouds.check_out_dir(out, "modal", {**env, clouds.EPHEMERAL_OK_ENV: "1"})  # the user said so
    clouds.check_out_dir(out, "lightning")  # nothing of this elsewhere


def test_colab_enterprise_never_mounts_drive(tmp_path, in_env, monkeypatch):
    """Colab Enterprise (and Workbench) set COLAB_RELEASE_TAG but have no Drive: the bootstrap
    of a Colab notebook there must not call drive.mount (it would wait for an authorisation
    that cannot come); run folders stay on the runtime's disk, said so."""
    env, content, ours = standin_env(standin.colab_enterprise, tmp_path)
    in_env(env)
    monkeypatch.delenv("TA_DRIVE", raising=False)
    monkeypatch.chdir(tmp_path)

    def mount():
        raise AssertionError("tried to mount Drive on Colab Enterprise")

    monkeypatch.setattr(bootstrap, "mount_drive", mount)
    monkeypatch.setattr(bootstrap, "install_missing", lambda **kw: [])
    assert bootstrap.prepare("colab_t4", ROOT, environ=dict(os.environ)) == "vertex"
    roles = storage("vertex")
    assert roles.durable == ours / "runs" and roles.synced is None
    assert "Cloud Storage" in roles.keeps and "drive" not in str(roles.durable).lower()
    assert session_limit_hours(get_platform("colab_t4"), "vertex", {}) is None
    in_env({**env, "VERTEX_PRODUCT": "WORKBENCH_INSTANCE",
            "HOME": str(tmp_path / "home/jupyter")})
    assert storage("vertex").durable == tmp_path / "home/jupyter/train-anywhere-work/runs"


def test_a_jupyterhub_keeps_runs_in_the_home_and_honours_a_small_dev_shm(tmp_path, in_env):
    env, home, ours = standin_env(standin.jupyterhub, tmp_path)
    in_env(env)
    assert default_dirs("fashion_mnist", "jupyterhub")[1] == ours / "runs" / "fashion_mnist"
    assert home in ours.parents
    # Kubernetes' 64 MB /dev/shm: the DataLoader workers that would die of it are not started
    t4 = Probe(cuda=True, cuda_name="Tesla T4", capability=(7, 5), cuda_count=1,
               arch_list=CU128, shm_free=64 * 2**20)
    choice = choose_device("auto", get_platform("colab_t4"), t4, environ={})
    assert choice.num_workers == 0 and any("/dev/shm has 64 MB free" in n for n in choice.notes)


@pytest.mark.parametrize("gpu,capability,precision,scaler", [
    ("Tesla T4", (7, 5), "fp16", True),
    ("NVIDIA L4", (8, 9), "bf16", False),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "bf16", False),
    ("NVIDIA H100 80GB HBM3", (9, 0), "bf16", False),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0), "bf16", False),  # Colab's G4
])
@pytest.mark.parametrize("platform", ["lightning_studio", "modal", "colab_t4"])
def test_precision_follows_the_gpu_found(platform, gpu, capability, precision, scaler):
    """bf16 from compute capability 8.0 (L4, A100, H100, G4's sm_120), fp16 + GradScaler on a
    T4, whatever GPU the notebook was rendered for; the device line names the GPU found."""
    p = Probe(cuda=True, cuda_name=gpu, capability=capability, cuda_count=1, arch_list=CU128)
    choice = choose_device("auto", get_platform(platform), p, environ={})
    assert (choice.precision.name, choice.precision.scaler) == (precision, scaler)
    assert gpu in choice.describe()
    if "T4" not in gpu:
        assert "precision follows the GPU found" in choice.reason


def test_tpu_profiles_name_todays_chips():
    assert "v5e-1" in PLATFORMS["colab_tpu"].gpu and "v6e-1" in PLATFORMS["colab_tpu"].gpu
    assert PLATFORMS["kaggle_tpu"].gpu == "TPU v5e-8" and PLATFORMS["kaggle_tpu"].devices == 8
    xla = Probe(xla_installed=True, xla_device_type="TPU")
    for name in ("colab_tpu", "kaggle_tpu"):
        choice = choose_device("auto", PLATFORMS[name], xla, environ={})
        assert (choice.type, choice.precision.name, choice.precision.scaler) == (
            "xla", "bf16", False)


def test_the_bootstraps_checks_on_lightning_and_modal():
    ok = bootstrap.lightning_env_line({"CONDA_DEFAULT_ENV": "cloudspace"}, "/c", "/c")
    assert "base conda env `cloudspace`" in ok and "WARNING" not in ok
    venv = bootstrap.lightning_env_line({}, "/teamspace/studios/this_studio/.venv", "/c")
    assert venv.startswith("bootstrap: WARNING this kernel runs in a virtual environment at "
                           "/teamspace/studios/this_studio/.venv") and "\n" not in venv
    other = bootstrap.lightning_env_line({"CONDA_DEFAULT_ENV": "mine"}, "/c", "/c")
    assert "the conda env 'mine'" in other
    old = bootstrap.python_problem((3, 10), {"LIGHTNING_CLOUD_SPACE_ID": "s1"})
    assert old.startswith("this kernel runs Python 3.10, the project needs 3.11 or newer; fix: "
                          "start a new Studio") and "\n" not in old
    for runtime, fix in [("modal", "Modal's default image is unpinned"),
                         ("lightning", "base conda env `cloudspace`")]:
        line = bootstrap.torch_problem(runtime, version=lambda name: "2.2.1+cu121")
        assert line.startswith("this kernel has torch 2.2.1+cu121; the project needs torch 2.3")
        assert fix in line and "\n" not in line
        assert bootstrap.torch_problem(runtime, version=lambda name: "2.9.0") is None


def test_kaggle_models_are_found_at_their_depth(tmp_path, monkeypatch):
    """/kaggle/input/models/<owner>/<model>/<framework>/<variation>/<version>/, deeper than
    datasets (/kaggle/input/datasets/<owner>/<slug>/)."""
    monkeypatch.setenv("TA_KAGGLE_ROOT", str(tmp_path))
    inputs = tmp_path / "input"
    model = inputs / "models/someone/mshnet/pytorch/default/2"
    dataset = inputs / "datasets/someone/sirst"
    for path in (model, dataset, inputs / "models/someone/mshnet/pytorch/default/1"):
        path.mkdir(parents=True)
    roots = input_roots("kaggle")
    assert model in roots and dataset in roots
    assert inputs / "models/someone/mshnet" not in roots


def test_kaggle_pushes_carry_no_pinned_image(tmp_path):
    """A pinned image in a push makes a TPU request run on the CPU image (kaggle-cli#1197): the
    builder writes none, and the sweep drops any a notebook or metadata file brings."""
    from lib.cli.sweep.kaggle import unpinned

    for path in sorted((ROOT / "notebooks").glob("kaggle_*/kernels/*/kernel-metadata.json")):
        assert "docker_image" not in json.loads(path.read_text()), path
    for path in sorted((ROOT / "notebooks").glob("kaggle_*/*.ipynb")):
        assert "dockerImageVersionId" not in nbformat.read(path, 4).metadata["kaggle"], path
    nb = nbformat.read(ROOT / "notebooks/kaggle_tpu/fashion_mnist.ipynb", 4)
    nb.metadata["kaggle"]["dockerImageVersionId"] = 31040
    meta = {"id": "me/x", "machine_shape": "TpuV5E8", "docker_image": "gcr.io/kaggle-images/x"}
    assert unpinned(meta, nb) == ["docker_image", "metadata.kaggle.dockerImageVersionId"]
    assert "docker_image" not in meta and "dockerImageVersionId" not in nb.metadata["kaggle"]
    assert meta["machine_shape"] == "TpuV5E8" and unpinned(meta, nb) == []

