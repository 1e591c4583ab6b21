"""Run a workload's training function on every device of the machine, from a notebook.

    history = launch(fashion_mnist.train, s)

One device: the function runs in the notebook's process. Several GPUs (Kaggle T4 x2):
`torchrun --standalone` starts one process per GPU running `python -m lib.launch`, so CUDA
is never initialised in a process that is then forked. Several TPU chips (Kaggle TPU
v5e-8): `torch_xla.launch` with fork. The function must live in a module (not a notebook
cell) so that child processes can import it; the history comes back via `metrics.jsonl`.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from lib.runs.records import read_jsonl
from lib.runtime.distributed import Dist, from_torchrun, init_ddp, shutdown
from lib.session import Session, start

TrainFn = Callable[[Session], list]


def _name(fn: TrainFn) -> str:
    module = getattr(fn, "__module__", "__main__")
    if module == "__main__" or "<locals>" in fn.__qualname__:
        raise ValueError(
            f"launch() needs a training function importable by child processes; "
            f"{fn.__qualname__!r} is defined in {module}. Move it into a module under lib/ "
            "(e.g. lib/workloads/<workload>.py) and pass that function."
        )
    return f"{module}:{fn.__qualname__}"


def _resolve(name: str) -> TrainFn:
    module, qualname = name.split(":")
    return getattr(importlib.import_module(module), qualname)


def _config_spec(s: Session) -> dict:
    """The config a worker process rebuilds its session from: this session's run folder,
    already resolved (RESUME applied once, here), and the runtime detected here."""
    cls = type(s.cfg)
    params = dict(s.cfg.to_dict(), out_dir=str(s.out_dir), resume="auto")
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "params": params,
            "runtime": s.runtime}


def _session_from_spec(spec: dict, dist: Dist) -> Session:
    cfg = _resolve(spec["class"])(**spec["params"])
    # the launching session carried any attached run over already
    return start(cfg, runtime=spec["runtime"], dist=dist, announce=False, grid=False,
                 carry=False)


def launch(train_fn: TrainFn, s: Session, nprocs: int | None = None,
           spawn: bool | None = None) -> list[dict]:
    """Train on `nprocs` processes (default: every device the platform may use here).

    With one process the function runs right here unless `spawn` asks for the launcher
    anyway (tests use it to run the multi-process path at world size 1).
    """
    n = nprocs or s.devices
    if not (n > 1 if spawn is None else spawn):
        return train_fn(s)
    name = _name(train_fn)
    s.out_dir.mkdir(parents=True, exist_ok=True)
    if s.choice.type == "xla":
        from lib.runtime import xla

        print(f"launching {n} XLA process(es) (torch_xla.launch, fork)")
        xla.launch(_xla_worker, args=(name, _config_spec(s)))
    else:
        _torchrun(name, s, n)
    return read_jsonl(s.out_dir / "metrics.jsonl")


def _torchrun(name: str, s: Session, n: int) -> None:
    spec = s.out_dir / "launch.json"
    spec.write_text(json.dumps({"train": name, "config": _config_spec(s)}, indent=2))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={n}", "-m", "lib.launch", str(spec)]
    print(f"launching {n} processes: torchrun --standalone --nproc_per_node={n} "
          f"-m lib.launch {spec}")
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    # Relay the ranks' output line by line: a notebook's stdout is not a file descriptor.
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        for line in proc.stdout:
            print(line, end="")
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun exited with code {proc.returncode}; the ranks' output "
                           "is above.")


def _xla_worker(index: int, name: str, spec: dict) -> None:
    from lib.runtime import xla

    dist = Dist(rank=xla.ordinal(), world_size=xla.world_size(), kind="xla")
    _resolve(name)(_session_from_spec(spec, dist))


def _torchrun_worker(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    dist = from_torchrun()
    s = _session_from_spec(spec["config"], dist)
    init_ddp(dist, s.choice.type)
    try:
        _resolve(spec["train"])(s)
    finally:
        shutdown(dist)


if __name__ == "__main__":
    _torchrun_worker(sys.argv[1])
