"""Compiled graphs travel with the run (lib/runs/compile_cache.py): a session on a fresh
machine loads the run's compile cache instead of compiling; a foreign, cut or corrupt cache
is ignored with one line; `carry` and `report` know it. The XLA side: test_xla_compile_cache.py.
"""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest
import torch

from bench.bench_compile_cache import session
from lib.cli import carry
from lib.runs import compile_cache
from lib.runs.compile_cache import InductorCache
from lib.runs.folder import RunFolder
from lib.training.loop import fit
from lib.workloads.fashion_mnist import FashionConfig
from tests.test_train import CPU, loaders, make_task, strip


@pytest.mark.slow  # three sessions, one compiling the CNN cold: make test, not test-quick
def test_a_session_on_a_fresh_machine_loads_the_runs_compiled_graphs(tmp_path):
    """Fashion-MNIST SMOKE, COMPILE = True: epoch 1 in one process, epoch 2 in another whose
    Inductor, Triton and temp folders are new and empty. The second compiles nothing (every
    FX graph a hit, no C++ library built) and computes what an eager session resumed from
    the same checkpoint computes."""
    run, eager = tmp_path / "run", tmp_path / "eager"
    first = session(run, 1)
    assert first["inductor"].get("fxgraph_cache_miss", 0) > 0 and first["cpp_builds"] > 0
    tag = json.loads((run / "compile-cache" / "inductor.json").read_text())
    assert tag["torch"] == torch.__version__ and tag["device"].startswith("cpu ")
    shutil.copytree(run, eager)
    second = session(run, 2)
    loaded = [ln for ln in second["lines"] if ln.startswith("compile cache")]
    assert len(loaded) == 1 and "loaded" in loaded[0], second["lines"]
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert second["inductor"]["fxgraph_cache_hit"] == first["inductor"]["fxgraph_cache_miss"]
    # The kernels' C++ libraries and Inductor's precompiled header came with the run.
    assert first["header_builds"] == 1 and second["header_builds"] == 0
    assert second["cpp_builds"] == 0
    print(f"\ncompile_seconds: first session {first['history'][0]['compile_seconds']:.1f}, "
          f"next on a fresh machine {second['history'][1]['compile_seconds']:.1f}")
    resumed = session(eager, 2, compiled=False)
    got, want = strip(second["history"])[1], strip(resumed["history"])[1]
    for key in ("train_loss", "test_loss", "test_accuracy"):
        assert got[key] == pytest.approx(want[key], rel=1e-4), key


def _planted(run, kind: str) -> None:
    """A cache that must not be loaded: `foreign` (another torch's tag), `cut` (bytes cut
    short), `garbage` (bytes torch cannot read, under a tag that matches them), `untagged`
    (a save killed before its tag), `older-ops` (compiled against other lib/kernels sources)."""
    folder = run / "compile-cache"
    folder.mkdir(parents=True)
    out = folder / "inductor.zip"
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("artifacts", b"\0" * 64 if kind == "garbage" else b"not torch's" * 10)
    data = out.read_bytes()
    here = compile_cache.inductor_identity("cpu")
    import hashlib

    tag = dict(here, kind="inductor", size=len(data), sha256=hashlib.sha256(data).hexdigest())
    if kind == "foreign":
        tag["torch"] = "2.13.0+cu128"
    if kind == "older-ops":  # compiled before the project's ops (lib/kernels) changed
        tag["ops"] = "0123456789ab"
    if kind == "cut":
        out.write_bytes(data[: len(data) // 2])
    if kind != "untagged":
        (folder / "inductor.json").write_text(json.dumps(tag))


REASONS = {"foreign": "made for another setup (torch 2.13.0+cu128 (here",
           "older-ops": "made for another setup (ops 0123456789ab (here",
           "cut": "do not match its tag's", "garbage": "torch could not read it",
           "untagged": "its tag is missing"}


@pytest.mark.parametrize("kind", sorted(REASONS))
def test_a_foreign_cut_or_unreadable_cache_is_ignored_in_one_line(tmp_path, kind):
    _planted(tmp_path, kind)
    lines = []
    assert InductorCache(tmp_path, "cpu", lines.append).load() is False
    assert len(lines) == 1 and "ignored" in lines[0] and REASONS[kind] in lines[0], lines
    assert "compiling afresh" in lines[0]


def _compiled_run(out, epochs, cache=True):
    task = make_task()
    task.model.compile()
    run = RunFolder(out, "toy", {"hidden": 16}, tensorboard=False, progress=False)
    if cache:
        run.compile_cache = InductorCache(out, "cpu", run.log)
        run.compile_cache.load()
    history = fit(task, *loaders(), CPU, run, epochs, compiled=True)
    run.close()
    return [{k: v for k, v in r.items() if k != "compile_seconds"} for r in strip(history)], \
        task.model


@pytest.mark.slow  # compiles a toy model through inductor
def test_a_run_with_a_planted_cache_computes_what_one_without_computes(tmp_path, capsys):
    """A cut cache: said once, the run's numbers and weights those of a run without one, and
    the next checkpoint leaves a cache that matches its tag and this torch."""
    plain, plain_model = _compiled_run(tmp_path / "plain", 2, cache=False)
    _planted(tmp_path / "planted", "cut")
    planted, planted_model = _compiled_run(tmp_path / "planted", 2)
    out = capsys.readouterr().out
    assert out.count("compile cache (inductor)") == 1 and "ignored" in out
    assert planted == plain
    for p, q in zip(planted_model.parameters(), plain_model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert compile_cache.problem(tmp_path / "planted", "inductor") is None
    tag = compile_cache.read_tag(tmp_path / "planted", "inductor")
    assert tag["torch"] == torch.__version__ and tag["graphs"] > 0


def _carried_run(folder, cache: str):
    """A trained run folder with config.json and a compile cache (`good` or `cut`)."""
    from tests.test_train import train

    train(folder, 1)
    cfg = FashionConfig(platform="local", epochs=1)
    (folder / "config.json").write_text(json.dumps({"experiment": cfg.identity(32)}))
    (folder / "metrics.jsonl").write_text('{"epoch": 1, "test_accuracy": 0.5}\n')
    _planted(folder, "cut" if cache == "cut" else "garbage")  # garbage: bytes match the tag
    return folder


def test_carry_moves_a_good_compile_cache_and_leaves_a_cut_one_behind(tmp_path):
    drive = tmp_path / "drive"
    (drive / "MyDrive").mkdir(parents=True)
    line = carry.to_colab(_carried_run(tmp_path / "good", "good"), drive)
    target = drive / "MyDrive" / "train-anywhere" / "runs" / "fashion_mnist"
    assert "; compile cache carried: inductor 0.0 MB (" in line and "\n" not in line
    assert (target / "compile-cache" / "inductor.zip").read_bytes() == (
        tmp_path / "good" / "compile-cache" / "inductor.zip").read_bytes()
    other = tmp_path / "drive2"
    (other / "MyDrive").mkdir(parents=True)
    line = carry.to_colab(_carried_run(tmp_path / "cut", "cut"), other)
    assert "; compile cache (inductor) left behind: " in line and "cut or corrupt" in line
    moved = other / "MyDrive" / "train-anywhere" / "runs" / "fashion_mnist"
    assert (moved / "checkpoints").is_dir() and not (moved / "compile-cache" / "inductor.zip"
                                                     ).exists()


def test_report_shows_the_compile_cache_size_and_tag(tmp_path, capsys):
    from lib.cli.main import main

    run = _carried_run(tmp_path / "run", "good")
    (run / "config.json").write_text(json.dumps({"WORKLOAD": "fashion_mnist", "EPOCHS": 1}))
    main(["report", str(run)])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("inductor "))
    assert f"torch {torch.__version__}" in line and "cpu " in line and " MB (" in line
    shutil.rmtree(run / "compile-cache")
    main(["report", str(run)])
    assert "compile cache" not in capsys.readouterr().out


def test_an_xla_cache_with_a_cut_or_missing_executable_is_not_trusted(tmp_path):
    """XlaCache's files are checked against the tag without torch_xla (carry, report, load)."""
    import hashlib

    xla = tmp_path / "compile-cache" / "xla"
    xla.mkdir(parents=True)
    files = {}
    for name, data in (("123", b"executable one"), ("456", b"executable two")):
        (xla / name).write_bytes(data)
        files[name] = [len(data), hashlib.sha256(data).hexdigest()]
    tag = {"kind": "xla", "torch": "2.9.0", "torch_xla": "2.9.0", "device": "xla TPU v5litepod-8",
           "size": 28, "files": files, "graphs": 2}
    (tmp_path / "compile-cache" / "xla.json").write_text(json.dumps(tag))
    assert compile_cache.problem(tmp_path, "xla") is None
    assert compile_cache.describe(tmp_path)[0].startswith("xla 0.0 MB (2 graphs; torch 2.9.0, "
                                                          "torch xla 2.9.0, xla TPU v5litepod-8")
    (xla / "456").write_bytes(b"executable")
    assert "456 does not match its tag" in compile_cache.problem(tmp_path, "xla")
    (xla / "456").unlink()
    assert "456 is missing" in compile_cache.problem(tmp_path, "xla")
