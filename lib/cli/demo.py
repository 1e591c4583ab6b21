"""`make demo`: `train-anywhere run` of the demo workload on a small offline sample, into ./demo.

The demo workload is the one whose contract says `demo=True` (lib/workloads; the
Fashion-MNIST quickstart). A thin use of the command line (lib/cli/main.py): the local notebook
picks CUDA, MPS or the CPU by itself. `python -m lib.cli.demo --real --epochs 14` trains on the
real dataset (downloaded into ./data on first use); that is `train-anywhere run WORKLOAD -p
EPOCHS 14 ...`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lib import workloads
from lib.cli.main import main as cli_main
from lib.cli.params import ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", action="store_true", help="the real dataset, not the sample")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "demo"))
    args = parser.parse_args(argv)
    sample = str(not args.real)
    # never one folder for both: the sample run and the real one are two experiments
    out = Path(args.out) / ("sample" if not args.real else "real")
    return cli_main(["run", workloads.demo(), "-p", "SAMPLE_DATA", sample, "-p", "SMOKE", sample,
                     "-p", "EPOCHS", str(args.epochs), "-p", "DATA_DIR", str(ROOT / "data"),
                     "--out", str(out)])


if __name__ == "__main__":
    raise SystemExit(main())
