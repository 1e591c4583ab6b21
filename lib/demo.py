"""`make demo`: run the Fashion-MNIST notebook headless on this machine's best device.

The local notebook picks CUDA, MPS or the CPU by itself. By default it trains on the
offline sample for one short epoch; `python -m lib.demo --real --epochs 14` trains on the
real dataset (downloaded into ./data on first use).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", action="store_true", help="the real dataset, not the sample")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "demo")
    args = parser.parse_args(argv)

    import papermill

    notebook = ROOT / "notebooks" / "local_mps" / "fashion_mnist.ipynb"
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_name = "real" if args.real else "sample"  # never one folder: they are two experiments
    params = {"SAMPLE_DATA": not args.real, "SMOKE": not args.real, "EPOCHS": args.epochs,
              "DATA_DIR": str(ROOT / "data"), "OUT_DIR": str(out / run_name)}
    executed = out / "fashion_mnist.ipynb"
    # The kernel's own start-up warnings (e.g. about its local TCP sockets) are not the
    # project's and a user cannot act on them: only its errors reach the console.
    papermill.execute_notebook(str(notebook), str(executed), parameters=params,
                               cwd=str(notebook.parent), progress_bar=False,
                               extra_arguments=["--IPKernelApp.log_level=ERROR"])
    lines = (out / run_name / "metrics.jsonl").read_text().splitlines()
    history = [json.loads(line) for line in lines]
    last = history[-1]
    data = "the real Fashion-MNIST" if args.real else (
        "the synthetic sample (garment-like shapes, not Fashion-MNIST; --real for the dataset)")
    print(f"\nFashion-MNIST demo: test accuracy {last['test_accuracy']:.4f} after "
          f"{last['epoch']} epoch(s) on {last['device']}, on {data}")
    print(f"  executed notebook  {executed}")
    print(f"  checkpoints        {out / run_name / 'checkpoints'}")
    print(f"  metrics            {out / run_name / 'metrics.jsonl'}")
    print(f"  plot               {out / run_name / 'curves.png'}")
    tb = out / run_name / "tb"
    print(f"  TensorBoard logs   {tb}  (tensorboard --logdir {tb})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
