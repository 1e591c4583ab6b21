"""Collection rules shared by every test module."""

import importlib.util

# The XLA lane's modules import torch_xla; the main lane's environment has none, so it does
# not collect them at all (rather than report them as skipped). `make test-xla` runs them.
collect_ignore_glob = [] if importlib.util.find_spec("torch_xla") else ["test_xla_*.py"]
