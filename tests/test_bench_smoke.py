"""The benchmark modules at tiny sizes: the structure of what they return, never timings."""

import math
import sys

import pytest
import torch

from bench import __main__ as suite
from bench import bench_compile, bench_gpu, bench_loop, bench_pipeline, bench_suite, bench_xla
from bench.common import ROOT, median
from lib.runtime.platforms import PLATFORMS

# The benchmarks' own smoke runs (notebooks, compile, loops): make test, not test-quick.
pytestmark = pytest.mark.slow


def positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_loop_rows_have_every_variant_and_ratios_to_the_bare_loop(tmp_path):
    res = bench_loop.run(steps=2, batch=16, repeats=2, devices=["cpu"], folder=tmp_path)
    rows = res["rows"]
    assert [r["variant"] for r in rows] == list(bench_loop.VARIANTS)
    bare = rows[0]
    for row in rows:
        assert positive(row["samples_per_s"]) and positive(row["wall_s"])
        assert len(row["runs_samples_per_s"]) == 2
        # the ratio is taken within each repeat, then the median (of two: their mean)
        pairs = [x / b for x, b in zip(row["runs_samples_per_s"], bare["runs_samples_per_s"],
                                        strict=True)]
        assert row["pair_ratios"] == pytest.approx(pairs)
        assert row["ratio"] == pytest.approx(sum(pairs) / 2)
        assert 0 <= row["test_accuracy"] <= 1
    assert bare["ratio"] == 1
    assert [r["loader"] for r in res["loaders"]][0] == "torch DataLoader"
    assert all(positive(r["ms_per_batch"]) for r in res["loaders"])
    assert "| cpu | fit |" in bench_loop.report(res)


def test_fit_in_the_benchmark_really_wrote_a_run_folder(tmp_path):
    train, test = bench_loop.datasets(tmp_path, 2, 16)
    acc, wall, cpu = bench_loop.lib_fit(train, test, 16, 1, 0, bench_loop.choice_for("cpu"),
                                        tmp_path / "run")
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1
    assert (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    assert list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))
    assert 0 <= acc <= 1 and positive(wall) and cpu > 0


def test_pipeline_row_of_fashion_and_missing_modules_reported(tmp_path, monkeypatch):
    monkeypatch.setitem(bench_pipeline.WORKLOADS, "future", ("lib.data.not_yet", None))
    res = bench_pipeline.run(["fashion_mnist", "future"], tmp_path, n_batches=2, steps=1,
                             batches={"fashion_mnist": 32}, framing_repeats=0)
    (row,) = res["rows"]
    assert row["workload"] == "fashion_mnist" and row["batch"] == 32 and row["batches"] == 2
    for key in ("load_ms", "step_ms", "loader_samples_per_s"):
        assert positive(row[key]), key
    assert row["load_over_step"] == pytest.approx(row["load_ms"] / row["step_ms"])
    assert row["loader_samples_per_s"] == pytest.approx(32 / row["load_ms"] * 1e3)
    assert row["starved"] == (row["load_ms"] > row["step_ms"])
    assert res["missing"] == ["future: lib.data.not_yet is not there yet"]
    assert res["framing"] is None
    assert "not measured: future" in bench_pipeline.report(res)


def test_time_steps_times_every_step_after_the_warm_up():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    batches = [(torch.randn(3, 4), torch.tensor([0, 1, 0]))]
    times = bench_pipeline.time_steps(model, torch.nn.functional.cross_entropy, opt, batches, 3)
    assert len(times) == 3 and all(positive(t) for t in times)


def test_event_framing_cold_and_cached(tmp_path):
    res = bench_pipeline.framing(tmp_path, repeats=1, counts=(300, 2000), batch=16)
    assert [r["events"] for r in res["rows"]] == [300, 2000]
    for row in res["rows"]:
        assert row["recordings"] == 40 and row["batch"] == 16
        assert positive(row["cold_ms"]) and positive(row["cached_ms"])
        assert row["speedup"] == pytest.approx(row["cold_ms"] / row["cached_ms"])
    # the recordings really have the asked-for number of events (before Denoise)
    one = tmp_path / "events2000" / "sample" / "NMNIST" / "Train" / "0" / "00000.bin"
    assert one.stat().st_size == 5 * 2000
    text = bench_pipeline.report({"rows": [], "missing": [], "framing": res})
    assert "| 2,000 | 40 | 16 |" in text and f"{res['target']:.0f}x" in text


def test_xla_section_without_the_environment_says_not_measured(tmp_path):
    res = bench_xla.measure_in_subprocess(python=tmp_path / "no-python")
    assert res == {"status": bench_xla.NO_XLA}
    assert bench_xla.report(res) == bench_xla.NO_XLA


def test_xla_module_in_an_environment_without_torch_xla_fails_clearly():
    from lib.runtime.xla import installed

    if installed():
        pytest.skip("this environment has torch_xla")
    res = bench_xla.measure_in_subprocess(python=sys.executable, steps=1)
    assert res["status"].startswith("failed (exit 1)")
    assert "needs torch_xla" in res["status"]


@pytest.mark.xla
def test_xla_rows_in_the_xla_environment():
    pytest.importorskip("torch_xla")
    res = bench_xla.measure_in_subprocess(python=sys.executable, steps=2, batch=8, epochs=2)
    assert res["status"] == "measured", res["status"]
    eager, *xla_rows = res["rows"]
    assert eager["device"] == "cpu" and [r["device"] for r in xla_rows] == ["xla", "xla"]
    for row in res["rows"]:
        assert positive(row["steps_per_s"]) and positive(row["first_epoch_steps_per_s"])
        assert row["ratio"] == pytest.approx(row["steps_per_s"] / eager["steps_per_s"])
    for row in xla_rows:
        assert len(row["compiles_per_epoch"]) == 2 and row["compiles_epoch1"] > 0


def test_render_and_check_timings_on_a_copy():
    res = bench_suite.time_render(repeats=1)
    expected = len(list((ROOT / "notebooks_src").glob("*.py"))) * len(PLATFORMS)
    assert res["notebooks"] == expected
    assert [r["task"] for r in res["rows"]][1] == "build_notebooks.py --check"
    assert all(positive(r["seconds"]) and len(r["runs"]) == 1 for r in res["rows"])


def test_a_smoke_notebook_reports_its_cell_time_and_the_kernels_peak_memory(tmp_path,
                                                                           monkeypatch):
    # The peak is of the processes the notebook's process waited for: a real kernel, as a user's
    # is, whatever PYTHONPATH this suite runs under (a forked one is the zygote's child).
    monkeypatch.setenv("TA_REAL_KERNEL", "1")
    (row,) = bench_suite.time_notebooks(tmp_path, [("local", "fashion_mnist")])
    assert row["status"] == "ok", row
    assert 0 < row["cell_seconds"] < row["seconds"]  # wall time adds the kernel's start
    assert 150 < row["peak_mb"] < 8000  # a kernel that imported torch, measured in MB
    assert row["target"] in ("meets", "misses")


def test_a_notebook_that_cannot_run_is_a_failed_row_not_a_crash(tmp_path):
    (row,) = bench_suite.time_notebooks(tmp_path, [("colab_t4", "no_such_workload")])
    assert row["status"].startswith("failed") and positive(row["seconds"])


def _tiny_case():
    from lib.models.cnn import CNN, CNNConfig

    return bench_gpu.StepCase(
        "tiny", "fashion_mnist", lambda: CNN(CNNConfig(width=4, hidden=8)),
        lambda n: (torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))),
        torch.nn.functional.cross_entropy, lambda p: torch.optim.SGD(p, lr=0.1))


def test_gpu_step_measurement_on_the_cpu():
    row = bench_gpu.measure_step(_tiny_case(), 4, torch.device("cpu"), steps=2, warmup=1)
    assert row["peak_memory_mb"] is None  # only CUDA reports it
    assert positive(row["step_ms"]) and positive(row["gflop_per_step"])
    assert row["samples_per_s"] == pytest.approx(4 / (row["step_ms"] / 1e3))
    assert row["achieved_tflops"] == pytest.approx(
        row["gflop_per_step"] / 1e3 / (row["step_ms"] / 1e3))


def test_flops_scale_with_the_batch_and_peaks_are_known_for_the_platform_gpus():
    case = _tiny_case()
    assert bench_gpu.step_flops(case, 8) == pytest.approx(8 * bench_gpu.step_flops(case, 1))
    assert bench_gpu.peak_tflops("Tesla T4", torch.float16) == 65.0
    assert bench_gpu.peak_tflops("Tesla P100-PCIE-16GB", None) == 9.3
    assert bench_gpu.peak_tflops("Some Future GPU", torch.float16) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU report")
def test_gpu_section_without_cuda_says_unmeasured():
    res = bench_gpu.run(cases=[_tiny_case()])
    assert res["status"] == bench_gpu.NO_GPU
    assert res["rows"][0]["batch"] == 256  # Fashion-MNIST's default on a T4
    assert positive(res["rows"][0]["gflop_per_step"])
    assert bench_gpu.report(res).startswith("unmeasured: no GPU")


def test_main_writes_the_report_with_machine_summary_and_linked_figures(tmp_path, monkeypatch):
    monkeypatch.setitem(suite.EXTERNAL, "scan", ("bench_not_written", "Scan"))
    monkeypatch.setattr(bench_gpu, "_cases", lambda: [_tiny_case()])
    out = tmp_path / "B.md"
    argv = ["--quick", "--only", "loop", "scan", "gpu", "--out", str(out), "--figures",
            str(tmp_path / "figs")]
    assert suite.main(argv) == 0
    text = out.read_text()
    assert "## Machine" in text and f"| torch | {torch.__version__} |" in text
    assert "not measured: bench/bench_not_written.py is not there yet." in text
    assert "of the bare loop's samples/s" in text  # the summary line of the loop target
    assert "![loop overhead](figs/loop.png)" in text
    assert (tmp_path / "figs" / "loop.png").stat().st_size > 0
    if not torch.cuda.is_available():
        assert "- GPU: unmeasured: no GPU" in text


def test_suite_report_names_the_notebooks_it_did_not_execute():
    res = {"repeats": 1, "rows": [{"task": "render", "seconds": 1.0}],
           "executions": [{"platform": "colab_t4", "workload": "fashion_mnist", "seconds": 30.0,
                           "status": "ok"}], "not_executed": ["mshnet"]}
    text = bench_suite.report(res)
    assert "The fashion_mnist notebooks in smoke mode" in text and "30 s in all" in text
    assert "Not executed in this run: the mshnet notebooks." in text


def test_mamba_spike_bench_counts_both_paths_and_pairs_round_five_with_now():
    from bench import bench_mamba_spike

    res = bench_mamba_spike.run(batch=1, frames=4, repeats=2, cuda=False)  # CUDA path: a
    assert len(res["ratios"]) == 2 and all(positive(r) for r in res["ratios"])  # test of its own
    # round five records each step of each layer: more ops than the fused op
    assert res["round five ops"] > res["portable ops"] > 0
    assert "round five / now" in bench_mamba_spike.report(res)


def test_device_data_bench_counts_host_work_before_and_after(tmp_path):
    from bench import bench_device_data

    row = bench_device_data.measure("cifar10", tmp_path, batch=16, n=1, repeats=1)
    assert positive(row["before_ms"]) and positive(row["after_host_ms"]) and row["ops"] > 0
    needs = bench_device_data.demand([row])
    assert {d["gpu"] for d in needs} == set(bench_device_data.GPUS)
    assert all(positive(d["gpu_samples_s"]) and positive(d["after"]) for d in needs)


def _tiny_compile_case(workload, batch, frames):
    """bench_compile.build's contract, with a model that compiles in seconds."""
    torch.manual_seed(0)
    b = batch or 4
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return (model, lambda p: torch.optim.SGD(p, lr=0.1), torch.randn(b, 8),
            torch.randint(0, 3, (b,)), torch.nn.functional.cross_entropy, f"MLP, batch {b}")


def test_compile_bench_on_the_cpu_device_pairs_eager_and_compiled_rounds(monkeypatch, capsys):
    monkeypatch.setattr(bench_compile, "build", _tiny_compile_case)
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    threads = str(torch.get_num_threads())
    bench_compile.main(["--device", "cpu", "--workloads", "fashion_mnist", "--steps", "1",
                        "--repeats", "2", "--batch", "6", "--threads", threads])
    out = capsys.readouterr().out
    assert f"CPU, {threads} thread(s)" in out and "2 paired rounds of 1 steps" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("| fashion_mnist |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "MLP, batch 6"  # --batch reached the model
    ratios = [float(r) for r in cells[5].split()]
    assert len(ratios) == 2 and float(cells[4]) == pytest.approx(median(ratios), abs=0.01)
    eager_loss, compiled_loss = map(float, cells[8].split(" / "))
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-4)  # same weights, same batch


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message")
def test_compile_bench_on_cuda_without_a_gpu_says_so_in_one_line():
    with pytest.raises(SystemExit, match="--device cuda: torch sees no CUDA device.*--device cpu"):
        bench_compile.main(["--device", "cuda"])


def test_compile_bench_on_a_gpu_takes_the_platform_batch_sizes(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    cuda = type("Choice", (), {"type": "cuda"})()
    assert bench_compile.default_batch("cifar10", cuda) == 128  # the study's global batch
    assert bench_compile.default_batch("mshnet", cuda) == 8  # MSHNet's on a 16 GB GPU
    assert bench_compile.default_batch("mshnet", bench_compile.device_choice("cpu")) is None


def test_accumulation_bench_times_every_split_of_one_global_batch():
    from bench import bench_accumulation

    rows = bench_accumulation.run(["cpu"], steps=1, repeats=1, global_batch=8)
    cnn = [r for r in rows if r["model"] == "Fashion-MNIST CNN"]
    assert [(r["accumulation"], r["micro"], r["auto"]) for r in cnn] == [
        (1, 8, False), (2, 4, False), (4, 2, False), (8, 1, False), (1, 8, True)]
    assert cnn[0]["ratio"] == 1.0 and all(r["s_per_sample"] > 0 for r in cnn)
    assert "| the CPU (fp32) | Fashion-MNIST CNN | 8 | 8 | 1 |" in bench_accumulation.table(rows)


def test_plan_bench_rows_at_a_tiny_size():
    from bench import bench_plan

    rows = bench_plan.planning(3, milp_s=0.5)
    assert [r["cells"] for r in rows] == [3] * 4 and rows[0]["ratio"] == 1.0
    # the search keeps the best plan it found: never later than the one list schedule
    assert float(rows[1]["finish_h"]) <= float(rows[0]["finish_h"]) + 1e-9
    assert all(r["search"].startswith("MILP alone") for r in rows[2:])
    # By hand: 3 runs of 200 epochs, a run on one platform at a time. No plan beats the three
    # fastest lanes at once, the TPU (25 s an epoch, one at a time) and the lab's two (30 s):
    # 600 epochs / (144 + 2 x 120 an hour) = 1.5625 h (shown rounded: 1.56); two runs on the
    # lab and one on the TPU, one session each, finish in 200 x 30 s = 1.67 h.
    for r in rows:
        assert float(r["finish_h"]) >= 1.56 and int(r["sessions"]) >= 3, r
        assert r is rows[0] or float(r["bound_h"]) <= float(r["finish_h"]), r
    assert float(rows[1]["finish_h"]) <= 1.67, rows[1]
    # the planner equals an exhaustive search on these 4 small cases (tests/test_plan.py)
    assert bench_plan.quality(4) == {"cases": 4, "equal": 4, "worst_ratio": 1.0}


def test_spiking_bench_rows_count_ops_inside_the_fused_op(monkeypatch):
    """bench_spiking at a tiny size: every variant, the baseline's ratio 1, and the portable
    path counted inside its op, fewer than the loop it replaced."""
    from bench import bench_spiking
    from lib.kernels import LIF_PATH_ENV

    monkeypatch.setenv(LIF_PATH_ENV, "auto")  # the bench sets it per variant: restored after

    res = bench_spiking.run(batch=1, frames=4, repeats=1, step=False, triton=False,
                            memory=False)
    rows = {r["variant"]: r for r in res["rows"]}
    assert list(rows) == list(bench_spiking.VARIANTS)
    assert rows["snntorch loop"]["ratio"] == 1 and all(positive(r["cpu_s_median"])
                                                      for r in rows.values())
    assert rows["portable"]["frontend_ops"] < rows["snntorch loop"]["frontend_ops"]
    assert all(r["saved_bytes"] > 0 for r in rows.values())
    assert "portable" in bench_spiking.report(res)
