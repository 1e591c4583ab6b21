"""Carrying a run between platforms without notebooks: the batch the experiment decides, a
checkpoint written on another kind of device, and `train-anywhere carry`'s checks (the whole
journey through the stand-ins: tests/test_carry_journey.py)."""

from __future__ import annotations

import dataclasses
import io
import json
from unittest import mock

import pytest
import torch

from lib import session
from lib.base import durable
from lib.base.errors import ConfigError
from lib.cli import carry
from lib.cli.params import UsageError
from lib.launch import launch
from lib.runs import identity as experiment
from lib.training import batch
from lib.training.loop import Backend, _restore
from lib.workloads import fashion_mnist
from lib.workloads.fashion_mnist import FashionConfig
from tests.test_train import CPU, make_task, strip, train
from tests.unchanged import assert_unchanged, snapshot


def recorded_run(folder, global_batch, **params):
    """A run folder that trained with `global_batch` (config.json and one epoch record)."""
    cfg = FashionConfig(platform="colab_t4", epochs=2, **params)
    folder.mkdir(parents=True)
    experiment.record(folder, cfg.to_dict(), cfg.identity(global_batch))
    (folder / "metrics.jsonl").write_text('{"epoch": 1}\n')
    return folder


def start(platform, folder, monkeypatch, **params):
    for name in ("TA_CPU_DEVICES", "KAGGLE_KERNEL_RUN_TYPE", "COLAB_RELEASE_TAG"):
        monkeypatch.delenv(name, raising=False)
    return session.start(FashionConfig(platform=platform, device="cpu", epochs=2,
                                       out_dir=str(folder), **params), runtime="local")


def test_the_run_decides_the_batch_on_every_platform(tmp_path, monkeypatch, capsys):
    """A run started with 256 on one T4 continues with 256 in all: 256 here, 128 x 2 on the
    T4 x2 notebook (two processes), and its experiment is not 'changed'."""
    run = recorded_run(tmp_path / "run", 256)
    assert start("local", run, monkeypatch).batch_size == 256  # local's default is 128
    monkeypatch.setenv("TA_CPU_DEVICES", "2")
    s = session.start(FashionConfig(platform="kaggle_t4x2", device="cpu", epochs=2,
                                    out_dir=str(run)), runtime="local")
    assert (s.batch_size, s.devices, s.global_batch) == (128, 2, 256)
    assert "global batch 256 kept: 128 per step, on 2 devices" in capsys.readouterr().out
    # BATCH_SIZE set by hand is the user's: a changed global batch is refused as before.
    monkeypatch.delenv("TA_CPU_DEVICES")
    with pytest.raises(Exception, match=r"BATCH_SIZE x devices \(global batch\) 256 -> 64"):
        start("local", run, monkeypatch, batch_size=64)
    # A new run (RESUME "new") takes this platform's default.
    assert start("local", run, monkeypatch, resume="new").batch_size == 128


def test_a_global_batch_the_devices_cannot_split_trains_on_those_that_can(tmp_path,
                                                                          monkeypatch, capsys):
    run = recorded_run(tmp_path / "run", 255)
    monkeypatch.setenv("TA_CPU_DEVICES", "2")
    s = session.start(FashionConfig(platform="kaggle_t4x2", device="cpu", epochs=2,
                                    out_dir=str(run)), runtime="local")
    assert (s.batch_size, s.devices, s.global_batch) == (255, 1, 255)
    assert ("the global batch 255 does not split evenly over 2 devices: training on 1 of them"
            in capsys.readouterr().out)


def test_a_global_batch_a_device_cannot_hold_is_accumulated_not_refused(tmp_path):
    """A Kaggle TPU run's 1024 continued where a step holds 2 x 128 (a Mac's default):
    256 per step x 4, the global batch kept; what a session found on this very device is
    where the next one starts; a MICRO_BATCH that does not divide is one line."""
    run = recorded_run(tmp_path / "run", 1024)
    cfg = FashionConfig(platform="local", epochs=2, out_dir=str(run))
    plan = batch.decide(cfg, "mps", "Apple MPS", 1, run)
    assert plan.line() == "global batch 1024 kept: 256 per step x 4 accumulated, on 1 device"
    assert batch.decide(cfg, "cpu", "the CPU", 1, run).accumulation == 1  # no limit there
    rows = [{"micro_batch": 64, "micro_batch_found": True, "micro_batch_on": "Apple MPS"},
            {"micro_batch": 32, "micro_batch_found": True, "micro_batch_on": "Tesla T4"}]
    (run / "sessions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert batch.decide(cfg, "mps", "Apple MPS", 1, run).micro == 64
    assert batch.decide(cfg, "mps", "another Mac", 1, run).micro == 256
    fixed = dataclasses.replace(cfg, micro_batch=128)
    assert batch.decide(fixed, "mps", "Apple MPS", 1, run).accumulation == 8
    with pytest.raises(ConfigError) as info:
        batch.decide(dataclasses.replace(cfg, micro_batch=100), "cpu", "the CPU", 1, run)
    assert str(info.value).startswith(
        "MICRO_BATCH=100 does not divide the 1024 samples each device takes per step (global "
        "batch 1024 over 1 device(s)); expected one of [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, "
        "1024];")


# A checkpoint from another kind of device -------------------------------------------------
CUDA_ONLY = "Attempting to deserialize object on a CUDA device"


def save_as_if_on(location, state, path):
    """torch.save `state` to `path` (its completion marker renewed) as a session whose
    tensors lived on `location` writes it: the real serializer, every storage tagged
    `location` (`torch.serialization.location_tag`, what it records for a tensor on that
    device; torch.load puts it back there unless told `map_location`). Each tag a new string,
    as torch's own are: the archive is then byte for byte the one torch.save writes for the
    same tensors on that device (compared on an H200, torch 2.11)."""
    buffer = io.BytesIO()
    with mock.patch("torch.serialization.location_tag",
                    lambda storage: "".join(location.partition(":"))):
        torch.save(state, buffer)
    path.write_bytes(buffer.getvalue())
    durable.mark(path, buffer.getvalue())


def as_if_written_on_cuda(path):
    """Rewrite a CPU checkpoint as a CUDA fp16 session could leave one: every tensor stored
    on cuda:0, a GradScaler's state and a 'cuda' RNG state (one per GPU, as
    torch.cuda.get_rng_state_all() gives), plus an 'mps' one."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    state["scaler"] = {"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                       "growth_interval": 2000, "_growth_tracker": 7}
    state["rng"]["cuda"] = [torch.randint(0, 255, (16,), dtype=torch.uint8) for _ in range(2)]
    state["rng"]["mps"] = torch.randint(0, 255, (16,), dtype=torch.uint8)
    save_as_if_on("cuda:0", state, path)


def stored_on(path) -> set[str]:
    """The device locations a checkpoint's tensors are stored with (torch.load hands each
    storage's tag to a `map_location` callable)."""
    seen = set()
    torch.load(path, weights_only=True, map_location=lambda storage, location:
               seen.add(location) or storage)
    return seen


@pytest.fixture
def cpu_only(monkeypatch):
    """This machine as CI and a Mac are: no CUDA (torch.load refuses cuda storages here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_cuda_checkpoint_resumes_on_the_cpu_and_continues_the_epoch_sequence(tmp_path,
                                                                              cpu_only):
    """Epoch 1 'on a T4' (its checkpoint made so: tensors on cuda:0), epoch 2 here: the scaler
    state is dropped and the GPU/MPS RNG states skipped, in one line; the records equal an
    uninterrupted two-epoch run (CPU generator and the seeded data order restored)."""
    _, whole = train(tmp_path / "whole", 2)
    train(tmp_path / "moved", 1)
    (ckpt,) = (tmp_path / "moved" / "checkpoints").glob("ckpt-*.pt")
    as_if_written_on_cuda(ckpt)
    assert stored_on(ckpt) == {"cuda:0"}
    lines = []
    from lib.runs import folder as run_mod

    original = run_mod.RunFolder.log
    run_mod.RunFolder.log = lambda self, message: lines.append(message)
    try:
        _, resumed = train(tmp_path / "moved", 2)
    finally:
        run_mod.RunFolder.log = original
    said = [line for line in lines if "another kind of device" in line]
    assert said == ["checkpoint from another kind of device, resumed on cpu: its GradScaler "
                    "state dropped (fp32 on cpu needs none); its cuda and mps RNG state skipped "
                    "(no such device here; dropout goes on from this device's generator, the "
                    "data order is the seeded one)"]
    assert strip(resumed) == strip(whole)


def notebook_session(folder, epochs, monkeypatch):
    """`session.start` as the Fashion-MNIST T4 notebook calls it, SMOKE on the sample, where
    it finds no GPU (DEVICE "auto" falls back to the CPU)."""
    for name in ("TA_CPU_DEVICES", "KAGGLE_KERNEL_RUN_TYPE", "COLAB_RELEASE_TAG"):
        monkeypatch.delenv(name, raising=False)
    cfg = FashionConfig(platform="colab_t4", epochs=epochs, smoke=True, sample_data=True,
                        smoke_batches=1, data_dir=str(folder.parent / "data"),
                        out_dir=str(folder))
    return session.start(cfg, runtime="local")


def test_a_checkpoint_stored_on_cuda0_resumes_through_the_notebooks_calls(tmp_path, cpu_only,
                                                                        monkeypatch, capsys):
    """The T4 notebook's checkpoint with every tensor stored on cuda:0, continued on a machine
    without CUDA by what the notebook runs (`session.start`, `launch(fashion_mnist.train)`):
    the checkpoint loader maps it to the CPU, the run resumes at epoch 2 and ends where an
    uninterrupted run ends. The file itself does not load here without `map_location`."""
    whole = launch(fashion_mnist.train, notebook_session(tmp_path / "whole", 2, monkeypatch))
    launch(fashion_mnist.train, notebook_session(tmp_path / "run", 1, monkeypatch))
    (ckpt,) = (tmp_path / "run" / "checkpoints").glob("ckpt-*.pt")
    as_if_written_on_cuda(ckpt)
    assert stored_on(ckpt) == {"cuda:0"}
    with pytest.raises(RuntimeError, match=CUDA_ONLY):
        torch.load(ckpt, weights_only=True)
    capsys.readouterr()
    resumed = launch(fashion_mnist.train, notebook_session(tmp_path / "run", 2, monkeypatch))
    said = capsys.readouterr().out
    assert f"resumed from {ckpt} at epoch 1, batch 0" in said, said
    assert "checkpoint from another kind of device, resumed on cpu" in said, said
    assert [r["epoch"] for r in resumed] == [1, 2]
    assert strip(resumed) == strip(whole)


def test_a_checkpoint_without_a_scaler_starts_one_where_fp16_needs_it(tmp_path):
    train(tmp_path / "run", 1)
    (ckpt,) = (tmp_path / "run" / "checkpoints").glob("ckpt-*.pt")
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    fp16 = dataclasses.replace(CPU, precision=dataclasses.replace(CPU.precision, scaler=True))
    backend = Backend(fp16)
    lines = []
    _restore(make_task(), backend, state, lines.append)
    assert lines == ["checkpoint from another kind of device, resumed on cpu: a new GradScaler "
                     "started (the checkpoint was written without one)"]
    state["scaler"] = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                       "growth_interval": 2000, "_growth_tracker": 3}
    _restore(make_task(), backend, state, lines.append)
    assert backend.scaler.get_scale() == 1024.0  # used where this precision scales


# train-anywhere carry's checks -------------------------------------------------------------
def test_carry_refuses_a_folder_without_a_complete_checkpoint_and_leaves_cut_copies(tmp_path):
    train(tmp_path / "run", 2)
    run = tmp_path / "run"
    with pytest.raises(UsageError, match="is not a run folder: no config.json"):
        carry.check(run)
    (run / "config.json").write_text(json.dumps({"lr": 1.0}))  # from before identities
    with pytest.raises(UsageError, match="records no experiment"):
        carry.check(run)
    cfg = FashionConfig(platform="local", epochs=2)
    (run / "config.json").write_text(json.dumps({"experiment": cfg.identity(32)}))
    newest, older = sorted((run / "checkpoints").glob("ckpt-*.pt"), reverse=True)
    newest.write_bytes(newest.read_bytes()[:100])  # a copy cut short: its marker disagrees
    found = carry.check(run)
    assert found.runs == [(run, 2, older.name)] and found.incomplete == [newest]
    drive = tmp_path / "drive"
    (drive / "MyDrive").mkdir(parents=True)
    line = carry.to_colab(run, drive)
    target = drive / "MyDrive" / "train-anywhere" / "runs" / "fashion_mnist"
    assert line == (f"moved the fashion_mnist run (2 epochs, newest complete checkpoint "
                    f"{older.name}) from {run} to {target}; 1 incomplete checkpoint copies left "
                    "behind; the Colab notebook resumes it.")
    assert (target / "checkpoints" / older.name).is_file()
    assert not (target / "checkpoints" / newest.name).exists()
    kept, source = snapshot(drive), snapshot(run)
    with pytest.raises(UsageError, match="already holds a run; nothing there is overwritten"):
        carry.to_colab(run, drive)
    assert_unchanged(kept, drive)
    assert_unchanged(source, run)
    older.unlink()
    with pytest.raises(UsageError, match="holds no complete checkpoint"):
        carry.check(run)


def test_carry_to_colab_without_a_drive_says_where_and_how(tmp_path):
    train(tmp_path / "run", 1)
    cfg = FashionConfig(platform="local", epochs=1)
    (tmp_path / "run" / "config.json").write_text(json.dumps({"experiment": cfg.identity(32)}))
    line = carry.to_colab(tmp_path / "run")
    assert "belongs on Google Drive at MyDrive/train-anywhere/runs/fashion_mnist" in line
    assert "\n" not in line


def test_carry_to_kaggle_creates_the_private_dataset_then_versions_it(tmp_path, monkeypatch):
    """Through the real client against the loopback stand-in: the first carry creates the
    dataset (folders uploaded as zips, unpacked by 'Kaggle' into the same layout), the next
    one adds a version holding the newer checkpoint."""
    from tests.fakes.kaggle_server import FakeKaggle
    from tests.test_carry_journey import kaggle_env

    for name, value in kaggle_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    run = tmp_path / "run"
    train(run, 1)
    cfg = FashionConfig(platform="local", epochs=2)
    (run / "config.json").write_text(json.dumps({"experiment": cfg.identity(32)}))
    with FakeKaggle(tmp_path / "kaggle-side") as server:
        first = carry.to_kaggle(run, "tester/my-run-folder")
        train(run, 2)
        again = carry.to_kaggle(run, "tester/my-run-folder")
        versions = server.datasets["tester/my-run-folder"]
    assert "(1 epoch, newest complete checkpoint ckpt-e0001-b000000.pt)" in first
    assert "new private dataset tester/my-run-folder" in first
    assert "(2 epochs, newest complete checkpoint ckpt-e0002-b000000.pt)" in again
    assert "new version of tester/my-run-folder" in again
    assert len(versions) == 2
    assert sorted(p.name for p in (versions[1] / "checkpoints").iterdir()) == sorted(
        p.name for p in (run / "checkpoints").iterdir())
    assert experiment.read_config(versions[1])["experiment"] == cfg.identity(32)
    with pytest.raises(UsageError, match="not owner/slug"):
        carry.to_kaggle(run, "tester/short")
