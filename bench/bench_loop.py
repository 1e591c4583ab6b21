"""Loop overhead: lib's `fit` against a bare PyTorch loop (same model, data, seed, batch size).

Run: ``python -m bench.bench_loop [--steps 20 --repeats 5 --profile]``.

The workload is the Fashion-MNIST notebook's: its CNN, Adadelta, StepLR and cross-entropy at
batch 128, on the learnable sample written in the real IDX layout. An epoch here is a real
Fashion-MNIST epoch: 468 training batches (60,000 images, the short last batch dropped) and
10,000 test images. fit's per-epoch costs (checkpoint with fsync, best.pt, metrics.jsonl,
TensorBoard, log line) are ~0.1-0.4 s whatever the epoch's length: against a 30-step epoch they
cost ~10% (0.89 measured), against a real one well under 1%. `--steps 30` still measures that.

Both sides are timed end to end (loaders built, every epoch trained and evaluated, the
scheduler stepped); `fit` also draws its progress bar and logs (into a buffer). Variants run
interleaved in rotating order; ratios are medians of the ratios within a repeat.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from bench.common import FIGURES, captured, markdown_table, median, save_figure, timed
from lib.data import fashion
from lib.data.common import make_loader
from lib.runs.folder import RunFolder
from lib.runtime.device import DeviceChoice, choose_device, probe
from lib.runtime.platforms import get_platform
from lib.training.loop import fit
from lib.workloads.fashion_mnist import FashionConfig, build_task

BATCH, STEPS, SEED = 128, 468, 1  # a real epoch: 60,000 // 128 steps
REPEATS = 5  # run-to-run noise here is ~+-4%: five pairs put the median within ~2%
VARIANTS = ("bare", "fit")
PLATFORM_OF = {"cpu": "colab_t4", "cuda": "colab_t4", "mps": "local"}


def bare_loop(model, optimizer, scheduler, train_set, test_set, batch: int, epochs: int,
              seed: int, choice: DeviceChoice) -> float:
    """pytorch/examples-style: shuffle, step, evaluate, decay the lr. Returns test accuracy."""
    device, dtype = choice.torch_device, choice.precision.dtype
    scaler = torch.amp.GradScaler(choice.type) if choice.precision.scaler else None
    kw = dict(num_workers=choice.num_workers, pin_memory=choice.pin_memory,
              persistent_workers=choice.num_workers > 0)
    train = DataLoader(train_set, batch, shuffle=True, drop_last=True,
                       generator=torch.Generator().manual_seed(seed), **kw)
    test = DataLoader(test_set, batch, **kw)
    amp = torch.autocast(choice.type, dtype=dtype) if dtype is not None else nullcontext()
    for _ in range(epochs):
        model.train()
        for x, y in train:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with amp:
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        model.eval()
        correct, loss_sum = torch.zeros((), device=device), torch.zeros((), device=device)
        with torch.no_grad(), amp:
            for x, y in test:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                out = model(x)
                loss_sum += F.cross_entropy(out, y, reduction="sum").float()
                correct += (out.argmax(1) == y).sum()
        scheduler.step()
    return float(correct) / len(test_set)


def choice_for(kind: str) -> DeviceChoice:
    return choose_device(kind, get_platform(PLATFORM_OF[kind]), environ={})


def lib_fit(train_set, test_set, batch: int, epochs: int, seed: int, choice: DeviceChoice,
            out_dir: Path) -> tuple[float, float, float]:
    """Run `fit` in a fresh run folder; (test accuracy, wall s, CPU s) of loaders + fit."""
    torch.manual_seed(seed)
    cfg = FashionConfig(platform=PLATFORM_OF[choice.type], seed=seed, epochs=epochs)
    task, model_cfg = build_task(cfg, choice.torch_device)

    def go():
        train = make_loader(train_set, batch, choice, train=True, seed=seed)
        test = make_loader(test_set, batch, choice, train=False, seed=seed)
        run = RunFolder(out_dir, cfg.WORKLOAD, model_cfg, session_hours=12.0)
        history = fit(task, train, test, choice, run, epochs)
        run.close()
        return history[-1]["test_accuracy"]

    with captured():
        return timed(go)


def bare(train_set, test_set, batch: int, epochs: int, seed: int,
         choice: DeviceChoice) -> tuple[float, float, float]:
    """The bare loop on the same model, optimiser and schedule; (accuracy, wall s, CPU s)."""
    torch.manual_seed(seed)
    cfg = FashionConfig(platform=PLATFORM_OF[choice.type], seed=seed, epochs=epochs)
    task, _ = build_task(cfg, choice.torch_device)
    return timed(bare_loop, task.model, task.optimizer, task.scheduler, train_set, test_set,
                 batch, epochs, seed, choice)


def one_run(variant: str, data, batch: int, epochs: int, choice: DeviceChoice) -> dict:
    train_set, test_set = data
    if variant == "bare":
        acc, wall, cpu = bare(train_set, test_set, batch, epochs, SEED, choice)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-loop-") as out:
            acc, wall, cpu = lib_fit(train_set, test_set, batch, epochs, SEED, choice,
                                     Path(out))
    samples = epochs * (len(train_set) // batch) * batch
    return {"samples_per_s": samples / wall, "wall_s": wall, "cpu_s": cpu,
            "test_accuracy": acc}


def datasets(folder: Path, steps: int, batch: int):
    """The Fashion sample with `steps` training batches and a sixth as many test images."""
    n_train = steps * batch
    n_test = max(batch // 2, n_train // 6)
    root = fashion.write_sample(folder / f"fashion-{n_train}-{n_test}", n_train, n_test)
    return fashion.load(root, True, download=False), fashion.load(root, False, download=False)


def loader_ms(train_set, batch: int, choice: DeviceChoice) -> list[dict]:
    """Milliseconds per batch of one epoch through each loader, with no training step."""
    plain = DataLoader(train_set, batch, shuffle=True, drop_last=True,
                       generator=torch.Generator().manual_seed(SEED))
    rows = []
    for name in ("torch DataLoader", "lib make_loader"):
        loader = plain if name.startswith("torch") else make_loader(
            train_set, batch, choice, train=True, seed=SEED)
        _, wall, _ = timed(lambda loader=loader: sum(1 for _ in loader))
        rows.append({"loader": name, "ms_per_batch": 1e3 * wall / len(loader)})
    return rows


def compare(choice: DeviceChoice, data, warm, batch: int, epochs: int, repeats: int) -> dict:
    """Every variant once per repeat, in rotating order; a variant's ratio to the bare loop is
    the median over repeats of its run against the bare run next to it in time.

    On a shared cloud machine (the 2-core CPU that wrote BENCHMARKS.md) a whole run gets up to
    ~5% faster or slower from one minute to the next, CPU time with it (so it is not time
    stolen by other processes). The two runs of a repeat see nearly the same machine; a
    ratio of medians across repeats would not."""
    for variant in VARIANTS:  # imports (TensorBoard), allocator and caches warm up here
        one_run(variant, warm, batch, 1, choice)
    runs = {v: [] for v in VARIANTS}
    for r in range(repeats):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[: r % len(VARIANTS)]
        for variant in order:
            runs[variant].append(one_run(variant, data, batch, epochs, choice))
    rows, base = [], runs[VARIANTS[0]]
    for variant in VARIANTS:
        mine = runs[variant]
        med = {k: median([x[k] for x in mine]) for k in mine[0]}
        pairs = [x["samples_per_s"] / b["samples_per_s"] for x, b in zip(mine, base, strict=True)]
        rows.append({"device": choice.type, "variant": variant, **med,
                     "runs_samples_per_s": [x["samples_per_s"] for x in mine],
                     "pair_ratios": pairs, "ratio": median(pairs),
                     "cpu_ratio": median([b["cpu_s"] / x["cpu_s"]
                                          for x, b in zip(mine, base, strict=True)])})
    return {"device": choice.type, "precision": choice.precision.name, "rows": rows}


def available_devices() -> list[str]:
    p = probe()
    return ["cpu"] + (["cuda"] if p.cuda else []) + (["mps"] if p.mps else [])


def run(steps: int = STEPS, batch: int = BATCH, epochs: int = 1, repeats: int = REPEATS,
        devices: list[str] | None = None, folder: Path | None = None) -> dict:
    """Every variant on every device; rows carry samples/s and the ratio to the bare loop."""
    with tempfile.TemporaryDirectory(prefix="bench-loop-data-") as tmp:
        folder = Path(folder or tmp)
        data, warm = datasets(folder, steps, batch), datasets(folder, 2, batch)
        results = [compare(choice_for(kind), data, warm, batch, epochs, repeats)
                   for kind in devices or available_devices()]
        loaders = loader_ms(data[0], batch, choice_for("cpu"))
    rows = [row for res in results for row in res["rows"]]
    return {"batch": batch, "steps": steps, "epochs": epochs, "repeats": repeats,
            "train_samples": steps * batch, "test_samples": len(data[1]), "rows": rows,
            "loaders": loaders}


def report(res: dict, figure: str | None = None) -> str:
    rows = [dict(r, pairs=" ".join(f"{x:.3f}" for x in r["pair_ratios"])) for r in res["rows"]]
    table = markdown_table(rows, [
        ("device", "device"), ("variant", "loop"), ("samples_per_s", "samples/s (median)"),
        ("ratio", "ratio to bare"), ("pairs", "ratio in each repeat"),
        ("cpu_ratio", "ratio by CPU time"),
        ("wall_s", "wall s"), ("test_accuracy", "test accuracy")])
    loaders = markdown_table(res["loaders"], [("loader", "loader (CPU, no step)"),
                                              ("ms_per_batch", "ms per batch")])
    text = [f"Fashion CNN, batch {res['batch']}, {res['steps']} steps + "
            f"{res['test_samples']} test images per epoch, {res['epochs']} epoch(s) per run, "
            f"{res['repeats']} repeats, each running every loop once (rotating order); "
            "samples/s is the median over repeats, the ratio the median of the ratios within "
            "a repeat.", "", table, "", loaders]
    if figure:
        text += ["", f"![loop overhead]({figure})"]
    return "\n".join(text)


def plot(res: dict, folder: Path = FIGURES) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.8))
    labels = [f"{r['device']}: {r['variant']}" for r in res["rows"]]
    for i, row in enumerate(res["rows"]):
        ax.barh(i, row["samples_per_s"], color="tab:gray" if row["variant"] == "bare" else
                "tab:blue", alpha=0.7)
        ax.plot(row["runs_samples_per_s"], [i] * len(row["runs_samples_per_s"]), "k.")
    ax.set(yticks=range(len(labels)), yticklabels=labels, xlabel="training samples/s")
    ax.invert_yaxis()
    ax.set_title("fit vs bare loop (bars: median, dots: runs)", fontsize=9)
    return save_figure(fig, "loop", folder)


def profile(steps: int = STEPS, batch: int = BATCH, top: int = 15) -> str:
    """cProfile of one `fit` run, by cumulative time."""
    with tempfile.TemporaryDirectory(prefix="bench-loop-prof-") as tmp:
        train_set, test_set = datasets(Path(tmp), steps, batch)
        prof = cProfile.Profile()
        prof.enable()
        lib_fit(train_set, test_set, batch, 1, SEED, choice_for("cpu"), Path(tmp) / "run")
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="fit vs a bare PyTorch loop")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--profile", action="store_true", help="cProfile one fit run instead")
    args = parser.parse_args(argv)
    if args.profile:
        print(profile(args.steps, args.batch))
        return
    print(report(run(args.steps, args.batch, repeats=args.repeats)))


if __name__ == "__main__":
    main()
