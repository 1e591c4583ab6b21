"""The workload contract: what a workload is, written down once.

A workload NAME is two files, and nothing else in the repository names it:

    notebooks_src/NAME.py   the notebook (jupytext percent format): a cell tagged `parameters`
                            of plain literals, then the cells a reader sees, calling the module
    lib/workloads/NAME.py   the module; its docstring's first line is the workload's title, and
                            its `WORKLOAD = Workload(...)` is its public face:

    config     its `lib.training.config.RunConfig` subclass: one field per parameter (`LR` -> `lr`),
               `validate()` for its own checks, and the class settings `WORKLOAD` (= NAME),
               `BATCH_SIZES` (default batch per device, per accelerator), `COMPILE_AUTO`
               (whether COMPILE = "auto" compiles, per device type), `GRID` (OUT_DIR holds one
               run folder per grid cell instead of one run) and `SCHEDULE_SPANS_EPOCHS`.
    datasets   datasets(s) -> (train_set, test_set, info): the data in `s.data_dir`; with
               SAMPLE_DATA the offline sample, written there first in the data's real format.
    train      train(s) -> history: the task (model, loss, optimiser, metrics: a
               `lib.training.loop.Task`) trained by `s.fit`, resuming from OUT_DIR's newest
               checkpoint.
               It is what `lib.launch.launch` runs on every device; a GRID workload's notebook
               trains its cells with it.
    headline   the metric a run ends with, as metrics.jsonl names it ("test_accuracy"): what
               `train-anywhere run`, `report` and `sweep` print.
    summary    GRID workloads only: summary(out_dir, cfg) -> str, the results of every run in
               OUT_DIR (cfg None: all of them); `report` and `sweep` print it.
    tiny       parameters that make a SMOKE run on SAMPLE_DATA smaller still, for the lanes
               that run every notebook through XLA on a CPU (tests/test_image_lanes.py).
    demo       True for the one workload `make demo` runs (lib.cli.demo).

The module imports no torch (nor torchvision, tonic, snntorch, numpy or matplotlib) when it is
imported, and neither do its config's checks (`from_params`, `validate`): the command line
validates a run's parameters with `get(NAME).config`, and the notebook builder reads its
fields' types and choices, in processes that never train, where importing torch alone takes
seconds. So the module's top imports the config's pieces (lib.training.config, lib.base, the
torch-free names a check needs: lib.data.catalog, lib.losses.warmup, lib.runtime.lif_path),
and the functions that read data, build the task, train or draw import torch, the readers,
the models and the session where they run (annotations name them under `if TYPE_CHECKING:`).
tests/test_workload_contract.py imports every workload in one fresh process and names any of
those modules it then finds loaded.

`names()` finds workloads by listing this package (no import), `get(NAME)` imports one, and
`card(NAME)` reads what `report` needs (headline, GRID, where `summary` lives) from the module's
source without importing it (`report` on a finished run imports no workload): `headline` is a
string literal, `GRID` a literal in the config's class body, and a GRID workload's `summary` is
imported from a module that imports no torch (`lib.study.figures.summary`); `get` refuses a
module where the card and the face disagree.
`train-anywhere new NAME` writes a workload that follows this contract (lib/cli/new.py).
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Workload:
    """A workload's public face (see the module docstring for each field's contract)."""

    config: type  # a lib.training.config.RunConfig subclass whose WORKLOAD is the module's name
    datasets: Callable[[Any], tuple]
    train: Callable[[Any], list[dict]]
    headline: str
    summary: Callable[[Path, Any], str] | None = None
    tiny: dict[str, Any] = field(default_factory=dict)
    demo: bool = False

    @property
    def name(self) -> str:
        return self.config.WORKLOAD

    @property
    def grid(self) -> bool:
        """True when OUT_DIR holds one run folder per grid cell (the sweep's cells share it)."""
        return bool(self.config.GRID)


def names(package: Path = PACKAGE) -> list[str]:
    """Every workload: the modules of this package, or of lib/workloads in another copy of the
    repository (found without importing them)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(package)])
                  if not m.name.startswith("_"))


def title(name: str) -> str:
    """The first line of lib/workloads/NAME.py's docstring (read without importing it)."""
    doc = ast.get_docstring(ast.parse((PACKAGE / f"{name}.py").read_text())) or name
    return doc.strip().splitlines()[0].rstrip(".")


@dataclass(frozen=True)
class Card:
    """What `report` reads of a workload without importing it (see the module docstring)."""

    name: str
    headline: str | None  # None: not a literal in the source (get() refuses such a module)
    grid: bool
    summary: str | None  # "module:function" of a GRID workload's summary, imported from there

    def summarise(self) -> Callable[[Path, Any], str]:
        """The summary function, imported from its own module (not the workload's)."""
        module, _, function = (self.summary or "").partition(":")
        if not function:
            return get(self.name).summary
        return getattr(importlib.import_module(module), function)


@functools.cache
def card(name: str, package: Path | None = None) -> Card:
    """The card of lib/workloads/NAME.py (of `package`), read from its source (nothing is
    imported)."""
    tree = ast.parse(((package or PACKAGE) / f"{name}.py").read_text())
    call = next((node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "WORKLOAD" for t in node.targets)
                 and isinstance(node.value, ast.Call)), None)
    kwargs = {k.arg: k.value for k in call.keywords} if call else {}
    headline = kwargs.get("headline")
    headline = headline.value if isinstance(headline, ast.Constant) else None
    config = call.args[0].id if call and call.args and isinstance(call.args[0], ast.Name) else ""
    grid = False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == config:
            for item in node.body:
                if (isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant)
                        and any(getattr(t, "id", None) == "GRID" for t in item.targets)):
                    grid = bool(item.value.value)
    summary = kwargs.get("summary")
    return Card(name, headline, grid, _imported_from(tree, summary.id)
                if isinstance(summary, ast.Name) else None)


def _imported_from(tree: ast.Module, name: str) -> str | None:
    """"module:function" when the module binds `name` by `from module import function`."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return f"{node.module}:{alias.name}"
    return None


def get(name: str) -> Workload:
    """The `WORKLOAD` of lib/workloads/NAME.py, checked against the contract."""
    if name not in names():
        raise LookupError(f"no workload {name!r}: lib/workloads/{name}.py does not exist")
    module = importlib.import_module(f"{__name__}.{name}")
    face = getattr(module, "WORKLOAD", None)
    if not isinstance(face, Workload):
        raise TypeError(f"lib/workloads/{name}.py must define WORKLOAD = Workload(...) "
                        "(see lib/workloads/__init__.py)")
    if face.name != name:
        raise TypeError(f"lib/workloads/{name}.py: its config's WORKLOAD is {face.name!r}; "
                        f"expected {name!r} (the module's name)")
    if face.grid and face.summary is None:
        raise TypeError(f"lib/workloads/{name}.py: a GRID workload needs summary=")
    _check_card(name, face)
    return face


def _check_card(name: str, face: Workload) -> None:
    """The card read from the source says what the imported face says (see the module
    docstring: `report` trusts the card)."""
    c = card(name)
    where = f"lib/workloads/{name}.py"
    if c.headline != face.headline:
        raise TypeError(f"{where}: write headline= as a string literal in WORKLOAD = "
                        f"Workload(...) (read without importing the module); found "
                        f"{c.headline!r}, the face says {face.headline!r}")
    if c.grid != face.grid:
        raise TypeError(f"{where}: write GRID = True in the body of the config class named "
                        "first in WORKLOAD = Workload(...) (read without importing the module)")
    if face.grid and c.summary != f"{face.summary.__module__}:{face.summary.__name__}":
        raise TypeError(f"{where}: a GRID workload's summary must be imported (`from MODULE "
                        "import summary`) from a module that imports no torch, so `report` "
                        f"reads it without the workload; found {c.summary!r}")


def demo() -> str:
    """The workload `make demo` runs: the one whose WORKLOAD says demo=True."""
    chosen = [n for n in names() if get(n).demo]
    if len(chosen) != 1:
        raise LookupError(f"expected one workload with demo=True, found {chosen}")
    return chosen[0]
