"""GPU numbers: each workload's training step at its platform batch size and precision.

Run: ``python -m bench.bench_gpu`` (on a CUDA runtime: Colab T4, Kaggle P100/T4).

With CUDA, per workload: samples/s, peak memory and the fraction of the GPU's peak FLOP/s the
step reaches (FLOPs counted by `torch.utils.flop_counter`: matmuls and convolutions, forward
and backward; element-wise work such as Mamba's scan is not counted, so that fraction is a
lower bound). Inputs are synthetic tensors of the real shapes: the loader is measured by
`bench.bench_pipeline`. Without CUDA the section says so and reports only the FLOPs per step
(device-independent, counted on the meta device or on a one-sample CPU batch).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from bench.common import markdown_table, median, workload_batch

NO_GPU = "unmeasured: no GPU"
# Dense peak TFLOP/s from NVIDIA's datasheets: (fp16/bf16 tensor cores, fp32).
PEAK_TFLOPS = {"T4": (65.0, 8.1), "P100": (18.7, 9.3), "V100": (125.0, 15.7),
               "A100": (312.0, 19.5), "L4": (121.0, 30.3), "H100": (989.0, 67.0)}


@dataclass
class StepCase:
    """A workload's model, synthetic batch maker, loss and optimiser, and its batch key."""

    name: str
    key: str  # the workload name in lib.runtime.platforms' batch-size tables
    model: Callable[[], torch.nn.Module]
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable
    optimizer: Callable


def _cases() -> list[StepCase]:
    from lib.losses.sls import SLSLoss
    from lib.models.cnn import CNN
    from lib.models.mamba_spike import MambaSpike, MambaSpikeConfig
    from lib.models.mshnet import MSHNet
    from lib.models.resnet import CifarResNet18

    def labels(n):
        return torch.randint(0, 10, (n,))

    return [
        StepCase("fashion_mnist", "fashion_mnist", CNN,
                 lambda n: (torch.randn(n, 1, 28, 28), labels(n)), F.cross_entropy,
                 lambda p: torch.optim.Adadelta(p, lr=1.0)),
        StepCase("cifar10 ResNet-18", "optimizer_study", CifarResNet18,
                 lambda n: (torch.randn(n, 3, 32, 32), labels(n)), F.cross_entropy,
                 lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
        StepCase("mshnet 256 px", "mshnet", MSHNet,
                 lambda n: (torch.randn(n, 3, 256, 256),
                            (torch.rand(n, 1, 256, 256) > 0.995).float()), SLSLoss(0),
                 lambda p: torch.optim.Adagrad(p, lr=0.05)),
        StepCase("mamba_spike N-MNIST T=300", "mamba_spike",
                 lambda: MambaSpike(MambaSpikeConfig.preset("nmnist")),
                 lambda n: ((torch.rand(n, 300, 2, 34, 34) > 0.97).to(torch.uint8), labels(n)),
                 F.cross_entropy, lambda p: torch.optim.AdamW(p, lr=1e-3)),
    ]


def step_flops(case: StepCase, batch: int) -> float:
    """FLOPs of one forward + backward at `batch` (meta device; else one CPU sample x batch)."""
    try:
        with torch.device("meta"):
            model, (x, y) = case.model(), case.batch(batch)
        scale = 1
    except RuntimeError:
        model, (x, y) = case.model(), case.batch(1)
        scale = batch
    try:
        with FlopCounterMode(display=False) as counter:
            case.loss(model(x), y).backward()
    except RuntimeError:  # an op needs real values (e.g. .item()): count one CPU sample
        model, (x, y) = case.model(), case.batch(1)
        with FlopCounterMode(display=False) as counter:
            case.loss(model(x), y).backward()
        scale = batch
    return float(counter.get_total_flops() * scale)


def peak_tflops(gpu_name: str, dtype: torch.dtype | None) -> float | None:
    """The datasheet peak for this GPU at this precision, or None for an unknown GPU."""
    for key, (half, single) in PEAK_TFLOPS.items():
        if key in gpu_name:
            return half if dtype in (torch.float16, torch.bfloat16) else single
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_step(case: StepCase, batch: int, device: torch.device,
                 dtype: torch.dtype | None = None, steps: int = 10, warmup: int = 3) -> dict:
    """samples/s and ms of the step (median), peak memory (CUDA) and achieved TFLOP/s."""
    torch.manual_seed(0)
    model = case.model().to(device)
    opt = case.optimizer(model.parameters())
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    x, y = (t.to(device) for t in case.batch(batch))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = case.loss(model(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    step_s = median(times)
    flops = step_flops(case, batch)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return {"workload": case.name, "batch": batch, "step_ms": 1e3 * step_s,
            "samples_per_s": batch / step_s, "peak_memory_mb": peak,
            "gflop_per_step": flops / 1e9, "achieved_tflops": flops / step_s / 1e12}


def _platform_for(gpu_name: str):
    from lib.runtime.platforms import get_platform

    return get_platform("kaggle_p100" if "P100" in gpu_name else "colab_t4")


def run(steps: int = 10, cases: list[StepCase] | None = None) -> dict:
    """GPU rows when CUDA exists; otherwise the status and FLOPs per step (T4 batch sizes)."""
    from lib.runtime.device import choose_device

    cases = cases or _cases()
    if not torch.cuda.is_available():
        platform = _platform_for("")
        rows = [{"workload": c.name, "batch": workload_batch(c.key, platform.name),
                 "gflop_per_step": step_flops(c, workload_batch(c.key, platform.name)) / 1e9}
                for c in cases]
        return {"status": NO_GPU, "platform": platform.name, "rows": rows}
    name = torch.cuda.get_device_name(0)
    platform = _platform_for(name)
    choice = choose_device("cuda", platform, environ={})
    dtype = choice.precision.dtype
    peak = peak_tflops(name, dtype)
    rows = []
    for case in cases:
        row = measure_step(case, workload_batch(case.key, platform.name), torch.device("cuda"),
                           dtype, steps)
        row["fraction_of_peak"] = row["achieved_tflops"] / peak if peak else float("nan")
        rows.append(row)
    return {"status": "measured", "gpu": name, "platform": platform.name,
            "precision": choice.precision.name, "peak_tflops": peak, "rows": rows}


def report(res: dict) -> str:
    if res["status"] != "measured":
        return "\n".join([
            f"{res['status']}: samples/s, peak memory and fraction of peak FLOP/s need a CUDA "
            "device (run `make bench` on a GPU runtime). FLOPs per training step at the "
            f"{res['platform']} batch sizes, counted without running the step:", "",
            markdown_table(res["rows"], [("workload", "workload"), ("batch", "batch"),
                                         ("gflop_per_step", "GFLOP per step (fwd + bwd)")])])
    peak = f"{res['peak_tflops']:.1f} TFLOP/s" if res["peak_tflops"] else "unknown"
    return "\n".join([
        f"{res['gpu']}, {res['precision']} ({res['platform']} batch sizes); datasheet peak "
        f"{peak}. Synthetic inputs, median of the timed steps.", "",
        markdown_table(res["rows"], [
            ("workload", "workload"), ("batch", "batch"), ("samples_per_s", "samples/s"),
            ("step_ms", "ms/step"), ("peak_memory_mb", "peak memory MiB"),
            ("gflop_per_step", "GFLOP/step"), ("achieved_tflops", "TFLOP/s"),
            ("fraction_of_peak", "fraction of peak")])])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="training steps on the GPU")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    print(report(run(args.steps)))


if __name__ == "__main__":
    main()
