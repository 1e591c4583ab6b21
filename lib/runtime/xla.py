"""Every torch_xla call of the project, imported lazily.

Machines without torch_xla never import it (it costs seconds and, without a TPU, logs that
it defaults to the CPU). Names are torch_xla 2.9's: `torch_xla.device()`, `torch_xla.sync()`,
`torch_xla.runtime.world_size()`; `xm.optimizer_step`, `xm.save`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os


def installed() -> bool:
    """True when torch_xla can be imported (no import happens here)."""
    return importlib.util.find_spec("torch_xla") is not None


class _NoJaxNotice(logging.Filter):
    """torch_xla 2.8's profiler Trace, which its ParallelLoader enters for every batch, logs
    'You are trying to use a feature that requires jax/pallas' each time when jax is absent
    (Kaggle's TPU image): nothing here uses jax, so that notice is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "requires jax/pallas" not in record.getMessage()


@functools.cache
def _tx():
    logging.getLogger().addFilter(_NoJaxNotice())  # torch_xla logs it through the root logger
    # Without this, the scalars 0 and 1 are baked into graphs as constants, so a learning
    # rate that decays from 1.0 compiles a new graph once it leaves 1.0.
    os.environ.setdefault("XLA_NO_SPECIAL_SCALARS", "1")
    import torch_xla  # noqa: F401  (registers the xla device)
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    return torch_xla, xm, xr


def device_type() -> str:
    """The PJRT device behind XLA ("TPU", "CPU", ...), or "" when it cannot start."""
    try:
        _, _, xr = _tx()
        return str(xr.device_type() or "")
    except (ImportError, RuntimeError, OSError):
        return ""


def device():
    torch_xla, _, _ = _tx()
    return torch_xla.device()


def sync() -> None:
    """Cut the lazy graph here and run it (the old `xm.mark_step()`)."""
    torch_xla, _, _ = _tx()
    torch_xla.sync()


def own_scalars(module) -> int:
    """Give each 0-dim buffer of `module` (BatchNorm's `num_batches_tracked`) a device buffer
    of its own, and run that; returns how many were given one.

    torch_xla sends equal scalars to the device as one shared buffer (its cache of scalar
    data), so right after `.to(device)` or loading a checkpoint, MSHNet's 40 counters are one
    input of the first training step's graph, and 40 separate inputs of every later step's,
    whose graph then compiles a second time (27 s of CPU for MSHNet, more on a TPU host). A
    clone each, run as one small graph, makes the first step's inputs those of every step.
    """
    torch_xla, _, _ = _tx()
    count = 0
    for sub in module.modules():
        for name, buf in sub._buffers.items():
            if buf is not None and buf.dim() == 0 and buf.device.type == "xla":
                sub._buffers[name] = buf.clone()
                count += 1
    if count:
        torch_xla.sync()
    return count


def optimizer_step(optimizer) -> None:
    """Step (all-reducing gradients across replicas first when there are several)."""
    _, xm, _ = _tx()
    xm.optimizer_step(optimizer)


def wrap_loader(loader, dev):
    """A loader that moves batches to the XLA device in a background thread."""
    import torch_xla.distributed.parallel_loader as pl

    return pl.MpDeviceLoader(loader, dev)




def world_size() -> int:
    _, _, xr = _tx()
    return xr.world_size()


def ordinal() -> int:
    _, _, xr = _tx()
    return xr.global_ordinal()




def all_reduce_sum(tensor):
    _, xm, _ = _tx()
    return xm.all_reduce(xm.REDUCE_SUM, tensor)




def init_cache(path, readonly: bool = False) -> bool:
    """Make torch_xla keep its compiled executables in `path` (its persistent cache), read
    only for `readonly`; False when it cannot any more (it has compiled in this process)."""
    torch_xla, _, xr = _tx()
    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return False
    xr.initialize_cache(str(path), readonly=readonly)
    return True


def cache_dir():
    """The folder of this process's persistent cache (`init_cache`), or None."""
    from pathlib import Path

    path = os.environ.get("XLA_PERSISTENT_CACHE_PATH")
    return Path(path) if path else None


def cache_failures() -> int:
    """Executables in the persistent cache that this client could not load (torch_xla then
    compiles them; its CPU client loads none: "Deserializing serialized executable not
    supported")."""
    import torch_xla.debug.metrics as met

    return int(met.counter_value("PersistentCacheDeserializeFailure") or 0)


def cache_identity() -> dict:
    """What an executable in the persistent cache is only valid for: torch, torch_xla and
    libtpu versions and the device kind (the PJRT device and the TPU type the VM names, e.g.
    "TPU v5litepod-8", which also says how many chips). Read without starting the runtime:
    a process that starts it cannot fork the per-chip workers (`launch`)."""
    import importlib.metadata
    import platform

    import torch

    torch_xla, _, _ = _tx()
    try:
        libtpu = importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        libtpu = None
    kind = " ".join(filter(None, ["xla", device_type() or "?",
                                  os.environ.get("TPU_ACCELERATOR_TYPE")]))
    return {"torch": torch.__version__, "torch_xla": torch_xla.__version__,
            "python": ".".join(platform.python_version_tuple()[:2]),
            "libc": " ".join(platform.libc_ver()).strip() or platform.system(),
            "device": kind + (f", libtpu {libtpu}" if libtpu else "")}


def scan(fn, init, xs, pure: bool = False):
    """torch_xla's `scan` (`torch_xla.experimental.scan.scan`, modelled on `jax.lax.scan`):
    `fn(carry, x_t) -> (carry, y_t)` over the leading dimension of the tensors in `xs`,
    returning (the last carry, the y_t stacked); one XLA While op whose body is traced once by
    AOTAutograd (so `fn` must be traceable: no custom autograd Function inside), with autograd
    through it. Gradients reach tensors passed in `init` or `xs`, not ones `fn` closes over.
    `pure`: `fn` depends on its arguments only, so its traced graphs are kept (keyed on `fn`
    and the shapes) and reused by later calls instead of tracing again."""
    _tx()
    import inspect

    from torch_xla.experimental.scan import scan as xla_scan

    if "is_fn_pure" not in inspect.signature(xla_scan).parameters:  # before it was added
        return xla_scan(fn, init, xs)
    return xla_scan(fn, init, xs, is_fn_pure=pure)


def compile_count() -> int:
    """Cumulative XLA graph compilations in this process (proof that shapes are static)."""
    return metric_counts()["compiles"]


def metric_counts() -> dict:
    """torch_xla's cumulative counts in this process: `compiles` and `compile_s` (CompileTime's
    samples and accumulator: the PJRT client's compile, not the tracing before it), and
    `transfers` (TransferFromDeviceTime's samples: one per device-to-host transfer, however
    many tensors it moves)."""
    import torch_xla.debug.metrics as met

    compile_data = met.metric_data("CompileTime") or (0, 0, [])
    transfer_data = met.metric_data("TransferFromDeviceTime") or (0, 0, [])
    return {"compiles": int(compile_data[0]), "compile_s": compile_data[1] / 1e9,
            "transfers": int(transfer_data[0])}


# A host read of a 0-dim tensor (`.item()`, `float(t)`): torch_xla runs it through its CPU
# fallback and lists it with the fallback ops, but it is a device-to-host transfer (counted by
# TransferFromDeviceTime), not an op XLA lacks.
_HOST_READ = "aten::_local_scalar_dense"


def fallback_ops() -> list[str]:
    """The aten ops this process has run on the CPU because torch_xla has no lowering for them
    (`torch_xla.debug.metrics.executed_fallback_ops()`, e.g. ["aten::histc"]), sorted; each
    call copies its inputs to the host, runs eagerly and sends the result back, cutting the
    graph there. Empty when every op lowered. `.item()`'s host read is left out (a transfer,
    not a missing op)."""
    import torch_xla.debug.metrics as met

    return sorted(op for op in met.executed_fallback_ops() if op != _HOST_READ)


@contextlib.contextmanager
def counting_compiles(report):
    """`report(n)` with the graphs compiled inside the block (compilation happens at the
    sync that needs the graph, so a block that syncs has compiled its graphs when it ends)."""
    before = compile_count()
    yield
    report(compile_count() - before)


def launch(fn, args=(), start_method: str = "fork") -> None:
    """Run `fn(index, *args)` in one process per XLA device of this host.

    fork, so that the parent notebook's state need not be pickled.
    """
    torch_xla, _, _ = _tx()
    torch_xla.launch(fn, args=args, start_method=start_method)
