"""Fused kernels for hot loops a model cannot avoid: the spiking front-end's recurrence over
time steps as one op (`lif_multistep`), with a reference loop, a portable path, Triton
kernels and an XLA loop behind one dispatch rule (lib/kernels/lif.py). Imports only torch,
triton, lib/base and (for XLA's loop) lib.runtime.xla.
"""

from lib.kernels.lif import LIF_PATH_ENV, PATHS, choose_path, lif_multistep
from lib.kernels.lif_reference import lif_reference

__all__ = ["LIF_PATH_ENV", "PATHS", "choose_path", "lif_multistep", "lif_reference"]
