"""The library's import graph: no circles, and the layering of lib/ (README, "The library's
layout") as rules. Every `import` in lib/ (at any depth, lazy ones inside functions too) is
read with `ast`; circles are the graph's strongly connected components (Tarjan's algorithm, a
few lines, so the check needs nothing beyond the standard library). A rule is changed on
purpose, in its own commit, never to make an import pass."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PENDING: set[frozenset[str]] = set()  # no circle is allowed (issue 24 removed the last two)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module and package in lib/."""
    out = {}
    for path in sorted((root / "lib").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports (the nearest known prefix)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [{"a", "b", "c"}]


def circle_lines(graph: dict[str, set[str]]) -> list[str]:
    """One line per import circle not PENDING, naming its modules."""
    return [f"an import circle: {', '.join(sorted(c))}" for c in circles(graph)
            if frozenset(c) not in PENDING]


def test_lib_has_no_import_circle():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    # the checker reads lazy and package imports: the CLI's sweep and the sweep's params
    assert "lib.cli.sweep" in graph["lib.cli.main"] and "lib.cli.params" in graph["lib.cli.sweep"]
    found = circle_lines(graph)
    assert not found, found


# --- The layering: which part of lib/ may import which (a part: a folder, or a module at the
# top). Lower parts never import higher ones; the command line never loads the session, the
# loop or the device modules (it runs notebooks in their own kernels and reads run folders).
LAYERS: dict[str, set[str]] = {
    "base": set(),  # errors, atomic, durable, faults, progress: nothing from lib
    "runtime": {"base"},  # where am I, what hardware, how many processes
    "runs": {"base", "runtime"},  # what a run leaves on disk
    # fused ops (torch, triton, XLA's loop through lib.runtime.xla): the spiking recurrence
    "kernels": {"base", "runtime"},
    "models": {"base", "kernels"},
    "losses": {"base"},
    "data": {"base", "runtime"},
    "training": {"base", "runtime", "runs", "data", "models", "losses"},
    "plots": {"base", "data"},
    "study": {"base", "runs", "training", "data", "plots"},
    "session": {"base", "runtime", "runs", "data", "training"},
    "launch": {"base", "runtime", "runs", "session"},
    # `train-anywhere measure`'s steps, in a process the command line starts (lib/measure.py)
    "measure": {"base", "runtime", "runs", "training", "session", "workloads", "cli"},
    "workloads": {"base", "runtime", "runs", "data", "models", "losses", "training", "study",
                  "plots", "session", "launch"},
    "bootstrap": {"base", "runtime"},  # found by path before anything is installed
    "cli": {"base", "runs", "runtime", "plots", "workloads"},
    "notebooks": {"runtime", "workloads"},  # the renderer: notebooks/ from notebooks_src/
    "__main__": {"cli"},
    "lib": set(),
}
# Modules of an allowed part that a part still must not import.
FORBIDDEN: dict[str, set[str]] = {
    "cli": {"lib.runtime.device", "lib.runtime.xla", "lib.runtime.distributed",
            "lib.runtime.compile", "lib.session", "lib.launch", "lib.training.loop"},
}
# Within a part: only `lib.workloads`' contract (its __init__) for the command line and
# the renderer.
ONLY_PACKAGE = {("cli", "workloads"), ("notebooks", "workloads")}


def part(name: str) -> str:
    """The layer a dotted module name belongs to: lib's folder, or its top-level module."""
    pieces = name.split(".")
    return pieces[1] if len(pieces) > 1 else "lib"


def violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import against LAYERS / FORBIDDEN, naming importer and imported."""
    out = []
    for name, targets in sorted(graph.items()):
        mine = part(name)
        for target in sorted(targets):
            if any(other.startswith(target + ".") for other in targets):
                continue  # `from lib.x import y`: judged by lib.x.y, named once
            theirs = part(target)
            if theirs == mine or target == "lib":  # `import lib` (its version) is fine
                continue
            if theirs not in LAYERS.get(mine, set()):
                allowed = sorted(LAYERS.get(mine, set()))
                out.append(f"{name} imports {target}: {mine}/ may import "
                           + (f"only {allowed}" if allowed else "nothing from lib"))
            elif target in FORBIDDEN.get(mine, set()):
                out.append(f"{name} imports {target}, which {mine}/ must never load")
            elif (mine, theirs) in ONLY_PACKAGE and target != f"lib.{theirs}":
                out.append(f"{name} imports {target}: {mine}/ may use only lib.{theirs} itself")
    return out


def graph_of(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


MAX_LINES = 400  # a module longer than this holds two concerns: split it by concern


def test_no_module_of_lib_is_longer_than_the_ceiling():
    long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "lib").rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split each by concern): {long}"


def test_every_part_of_lib_has_a_layer():
    assert {part(name) for name in modules()} <= set(LAYERS)


def test_lib_follows_its_layers():
    found = violations(graph_of())
    assert not found, "\n".join(found)


# One planted import per rule the README's layout table states (the rule, then the plant).
PLANTED = [
    # "base/: leaf helpers importing nothing from lib"
    ("lib/base/atomic.py", "from lib.runtime import device", "lib.base.atomic imports "
     "lib.runtime.device: base/ may import nothing from lib"),
    # "a part imports only parts above it in this table": one below it
    ("lib/runs/records.py", "from lib.plots import save", "lib.runs.records imports "
     "lib.plots: runs/ may import only ['base', 'runtime']"),
    # ... and of those only what its row holds: models/ are plain nn.Modules (no device)
    ("lib/models/cnn.py", "from lib.runtime.device import choose_device", "lib.models.cnn "
     "imports lib.runtime.device: models/ may import only ['base', 'kernels']"),
    # "cli/: ... never loads the session, the loop or the device": a part, and a module
    ("lib/cli/sweep/report.py", "    from lib import session", "lib.cli.sweep.report imports "
     "lib.session: cli/ may import only"),
    ("lib/cli/execute.py", "from lib.runtime.device import probe", "lib.cli.execute imports "
     "lib.runtime.device, which cli/ must never load"),
    ("lib/cli/carry.py", "from lib.runtime import distributed", "lib.cli.carry imports "
     "lib.runtime.distributed, which cli/ must never load"),
    # "workloads/: ... (the contract: __init__.py)": the command line and the renderer
    ("lib/cli/params.py", "from lib.workloads.mshnet import MSHNetRunConfig",
     "lib.cli.params imports lib.workloads.mshnet: cli/ may use only lib.workloads itself"),
    ("lib/notebooks/render.py", "from lib.workloads import fashion_mnist", "lib.notebooks."
     "render imports lib.workloads.fashion_mnist: notebooks/ may use only lib.workloads itself"),
    # "notebooks/: ... loaded by no notebook": what a notebook starts
    ("lib/session.py", "from lib.notebooks import render", "lib.session imports "
     "lib.notebooks.render: session/ may import only"),
    # no import circle, even within one part (where no layer rule looks)
    ("lib/base/faults.py", "from lib.base import atomic", "an import circle: lib.base.atomic, "
     "lib.base.faults"),
]


def findings(root: Path) -> list[str]:
    """What the checks above say of the lib/ under `root`: each import against the layers,
    each circle."""
    graph = graph_of(root)
    return violations(graph) + circle_lines(graph)


@pytest.fixture(scope="module")
def lib_copy(tmp_path_factory):
    """A copy of lib/, clean as the real one (each test plants in it, then puts it back)."""
    import shutil

    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(ROOT / "lib", root / "lib")
    assert findings(root) == []
    return root


@pytest.mark.parametrize("where, line, expected", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_import_against_the_layers_fails_naming_it(lib_copy, where, line, expected):
    """A copy of lib/ with one import against the rules: the check names it, and only it."""
    path = lib_copy / where
    text = path.read_text()
    path.write_text(text + f"\n\ndef _planted():\n    {line.strip()}\n")
    try:
        found = findings(lib_copy)
    finally:
        path.write_text(text)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_planted_torch_import_in_the_bootstrap_is_found(lib_copy):
    """"bootstrap.py: ... imports no torch": a copy of lib/ whose bootstrap imports torch
    (through a module of lib its layer allows, as a slip would) fails the check the real one
    passes (test_the_bootstrap_imports_no_torch)."""
    path = lib_copy / "lib" / "bootstrap.py"
    text = path.read_text()
    path.write_text(text + "\nfrom lib.runtime import device_state  # noqa\n")
    try:
        assert "torch" in _modules_after("import lib.bootstrap", cwd=lib_copy)
    finally:
        path.write_text(text)


def _modules_after(code: str, cwd: Path = ROOT) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                          "print(json.dumps(sorted(sys.modules)))"], cwd=cwd, check=True,
                         capture_output=True, text=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_the_bootstrap_imports_no_torch():
    """PYTORCH_ENABLE_MPS_FALLBACK works only if set before torch is imported."""
    assert "torch" not in _modules_after("import lib.bootstrap")


def test_the_command_line_reads_a_finished_run_without_torch(tmp_path, monkeypatch):
    """`train-anywhere report` on the folder a real SMOKE run left (session.start and
    fashion_mnist.train, as the notebook calls them: config.json naming the workload, its
    card read for the headline) in a process where torch cannot be imported at all."""
    from lib import session
    from lib.launch import launch
    from lib.workloads import fashion_mnist
    from lib.workloads.fashion_mnist import FashionConfig

    for name in ("TA_CPU_DEVICES", "KAGGLE_KERNEL_RUN_TYPE", "COLAB_RELEASE_TAG"):
        monkeypatch.delenv(name, raising=False)
    run = tmp_path / "run"
    cfg = FashionConfig(platform="local", epochs=1, smoke=True, sample_data=True,
                        smoke_batches=1, data_dir=str(tmp_path / "data"), out_dir=str(run))
    (record,) = launch(fashion_mnist.train, session.start(cfg, runtime="local"))
    assert json.loads((run / "config.json").read_text())["experiment"]["workload"] == (
        "fashion_mnist")
    # torch poisoned: any import of it raises, even one a caller would catch; the cards
    # `report` reads, counted
    code = ("import contextlib, io, sys\nsys.modules['torch'] = None\n"
            "import lib.workloads as w\nread, card = [], w.card\n"
            "w.card = lambda name: read.append(name) or card(name)\n"
            "from lib.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    rc = main(['report', {str(run)!r}])\n"
            "print(rc, read)\nprint(out.getvalue())")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("0 ['fashion_mnist']\n"), done.stdout
    # the card's headline (test_accuracy, in percent), the one epoch's score
    percent = f"{100 * record['test_accuracy']:.2f}%"
    assert "test_accuracy" in done.stdout and percent in done.stdout, done.stdout
