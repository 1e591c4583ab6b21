"""XLA on the CPU (torch_xla, PJRT_DEVICE=CPU) against eager CPU: steps/s and compilations.

Run in the XLA environment: ``PJRT_DEVICE=CPU .venv-xla/bin/python -m bench.bench_xla``.
The suite (`python -m bench`) runs it that way in a subprocess and reads the JSON line it
prints with ``--json``; without `.venv-xla` the section says it was not measured.

The Fashion-MNIST task goes through lib's `fit` (as the TPU notebook does) for a few epochs
of `steps` batches on the sample: eager CPU fp32 (the baseline, same process), XLA with the
TPU notebook's bf16 autocast, and XLA in fp32. Epoch 1 includes graph compilation; later
epochs must compile nothing (static shapes), and their median steps/s is the steady rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.common import FIGURES, ROOT, markdown_table, median, run_python, save_figure, set_threads

XLA_PYTHON = ROOT / ".venv-xla" / "bin" / "python"
NO_XLA = "not measured: no XLA environment (create it with `make install-xla`)"


def _choices() -> list[tuple[str, object]]:
    from lib.runtime.device import Precision, Probe, choose_device
    from lib.runtime.platforms import get_platform

    cpu = choose_device("cpu", get_platform("colab_tpu"), Probe(), environ={})
    xla = choose_device("xla", get_platform("colab_tpu"), Probe(xla_installed=True), environ={})
    xla32 = dataclasses.replace(xla, precision=Precision(None, scaler=False))
    return [("eager CPU, fp32", cpu), ("XLA CPU, bf16 (TPU notebook)", xla),
            ("XLA CPU, fp32", xla32)]


def _fit_history(choice, root: Path, out: Path, batch: int, epochs: int) -> list[dict]:
    import torch

    from lib.data import fashion
    from lib.data.common import make_loader
    from lib.runs.folder import RunFolder
    from lib.training.loop import fit
    from lib.workloads.fashion_mnist import FashionConfig, build_task

    torch.manual_seed(0)
    cfg = FashionConfig(platform="colab_tpu", epochs=epochs)
    task, model_cfg = build_task(cfg, choice.torch_device)
    train = make_loader(fashion.load(root, True, False), batch, choice, train=True, seed=0)
    test = make_loader(fashion.load(root, False, False), batch, choice, train=False, seed=0)
    run = RunFolder(out, cfg.WORKLOAD, model_cfg, tensorboard=False, progress=False)
    return fit(task, train, test, choice, run, epochs)


def _row(label: str, history: list[dict], batch: int, compiles_before: int) -> dict:
    steps = [r["samples_per_s"] / batch for r in history]
    row = {"variant": label, "device": history[0]["device"], "first_epoch_steps_per_s": steps[0],
           "steps_per_s": median(steps[1:]) if len(steps) > 1 else steps[0]}
    if "xla_compiles" in history[0]:
        counts = [compiles_before] + [r["xla_compiles"] for r in history]
        per_epoch = [b - a for a, b in zip(counts, counts[1:], strict=False)]
        row.update(compiles_epoch1=per_epoch[0], compiles_later=sum(per_epoch[1:]),
                   compiles_per_epoch=per_epoch)
    return row


def run(steps: int = 10, batch: int = 32, epochs: int = 3) -> dict:
    """Rows (variant, steps/s in epoch 1 and steady, compilations) and ratios to eager CPU."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    from lib.data import fashion
    from lib.runtime import xla

    # The device first: the autograd engine sizes its device queues at the first backward,
    # and an XLA backward after an eager one fails an internal assert otherwise.
    xla.device()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-xla-") as tmp:
        root = fashion.write_sample(Path(tmp) / "data", steps * batch, 2 * batch)
        for i, (label, choice) in enumerate(_choices()):
            before = xla.compile_count() if choice.type == "xla" else 0
            history = _fit_history(choice, root, Path(tmp) / f"run{i}", batch, epochs)
            rows.append(_row(label, history, batch, before))
    for row in rows:
        row["ratio"] = row["steps_per_s"] / rows[0]["steps_per_s"]
    import torch

    return {"rows": rows, "steps": steps, "batch": batch, "epochs": epochs,
            "torch": torch.__version__, "xla_device": xla.device_type()}


def measure_in_subprocess(python: Path = XLA_PYTHON, timeout: float = 900, **kwargs) -> dict:
    """`run(**kwargs)` in the XLA environment; {"status": ...} when it is missing or fails."""
    if not Path(python).exists():
        return {"status": NO_XLA}
    args = ["-m", "bench.bench_xla", "--json"]
    for key, value in kwargs.items():
        args += [f"--{key}", str(value)]
    out = run_python(args, python, env={"PJRT_DEVICE": "CPU"}, timeout=timeout)
    lines = out["stdout"].strip().splitlines()
    if out["returncode"] != 0 or not lines or not lines[-1].startswith("{"):
        tail = (out["stderr"] or out["stdout"]).strip().splitlines()[-3:]
        return {"status": f"failed (exit {out['returncode']}): {' / '.join(tail)}"}
    return dict(json.loads(lines[-1]), status="measured", seconds=out["seconds"])


def report(res: dict, figure: str | None = None) -> str:
    if res.get("status", "measured") != "measured":
        return res["status"]
    table = markdown_table(res["rows"], [
        ("variant", "variant"), ("first_epoch_steps_per_s", "steps/s, epoch 1 (compiling)"),
        ("steps_per_s", "steps/s, later epochs (median)"), ("ratio", "ratio to eager CPU"),
        ("compiles_epoch1", "compilations, epoch 1"),
        ("compiles_later", "compilations, later epochs")])
    text = [f"torch {res['torch']} + torch_xla on PJRT device {res['xla_device']}; Fashion CNN "
            f"through `fit`, batch {res['batch']}, {res['steps']} steps per epoch, "
            f"{res['epochs']} epochs (compilations include the evaluation graphs).", "", table]
    if figure:
        text += ["", f"![xla]({figure})"]
    return "\n".join(text)


def plot(res: dict, folder: Path = FIGURES) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.2))
    rows = res["rows"]
    y = range(len(rows))
    ax.barh([i - 0.2 for i in y], [r["first_epoch_steps_per_s"] for r in rows], 0.4,
            label="epoch 1")
    ax.barh([i + 0.2 for i in y], [r["steps_per_s"] for r in rows], 0.4, label="later epochs")
    ax.set(yticks=list(y), yticklabels=[r["variant"] for r in rows], xlabel="steps/s")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    return save_figure(fig, "xla", folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="XLA on CPU vs eager CPU")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: default)")
    parser.add_argument("--json", action="store_true", help="print one JSON line last")
    args = parser.parse_args(argv)
    from lib.runtime import xla

    if not xla.installed():
        sys.exit(f"bench.bench_xla needs torch_xla: run it with {XLA_PYTHON} "
                 "(create that environment with `make install-xla`).")
    set_threads(args.threads)
    res = dict(run(args.steps, args.batch, args.epochs), status="measured")
    print(report(res))
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
