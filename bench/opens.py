"""How many files a loader opens: `sys.addaudithook` on Python's "open" event, counted in the
loader's process and in its DataLoader workers together.

The count lives in shared memory made before any worker starts (`install()`), so forked
workers add to the same number. HDF5 opens files in C, out of the audit hook's sight:
`install(h5py_too=True)` makes h5py's file opens raise the same audit event, so a
one-HDF5-file-per-item cache is counted too (the "before" rows of bench/bench_opens.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys

_state: dict = {"counter": None}


def _hook(event: str, args) -> None:
    if event == "open" and (counter := _state["counter"]) is not None:
        with counter.get_lock():
            counter.value += 1


def _audited(func):
    def opened(name, *args, **kwargs):
        sys.audit("open", name, "h5py", 0)
        return func(name, *args, **kwargs)
    opened.audited = True
    return opened


def install(h5py_too: bool = False) -> None:
    """Start counting in this process and in every worker forked from it later (once)."""
    if _state["counter"] is None:
        _state["counter"] = multiprocessing.get_context("fork").Value("q", 0)
        sys.addaudithook(_hook)
    if h5py_too:
        import h5py

        if not getattr(h5py.h5f.open, "audited", False):
            h5py.h5f.open = _audited(h5py.h5f.open)


class Count:
    n = 0


@contextlib.contextmanager
def counting(h5py_too: bool = False):
    """`with counting() as c: ...` then `c.n` opens happened inside, workers included."""
    install(h5py_too)
    counter, result = _state["counter"], Count()
    start = counter.value
    try:
        yield result
    finally:
        result.n = counter.value - start
