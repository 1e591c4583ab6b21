"""Counting aten ops with a dispatch counter (`TorchDispatchMode`), inside this package's ops.

On a GPU a small model's step costs about its op count times the launch cost, whatever its
FLOPs, so ops per step is what the fused kernels cut. A dispatch mode sees a custom op as one
call and not what runs inside it; `OpCount` runs the Python body of lib/kernels' ops under
itself, so a portable op counts its T-step loop, and a Triton op its torch ops plus the op
itself standing for its one kernel launch.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from lib.kernels.lif import IMPLEMENTATIONS


class OpCount(TorchDispatchMode):
    """`with OpCount() as ops: ...` then `ops.n` (all ops) and `ops.by_name` (per op name)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.by_name: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket.__name__)
        self.n += 1
        self.by_name[name] = self.by_name.get(name, 0) + 1
        if func.namespace == "train_anywhere" and name in IMPLEMENTATIONS:
            with self:  # the body's own ops come back here to be counted
                return IMPLEMENTATIONS[name](*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))
