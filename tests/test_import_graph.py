"""The library's import graph has no circles: every `import` in lib/ (at any depth, lazy ones
inside functions too) read with `ast`; circles are the graph's strongly connected components
(Tarjan's algorithm, a few lines, so the check needs nothing beyond the standard library)."""

from __future__ import annotations

import ast
from pathlib import Path

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


def test_lib_has_no_import_circle():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert "lib.sweep" in graph["lib.cli"] and "lib.params" in graph["lib.sweep"]  # it reads
    found = [frozenset(c) for c in circles(graph)]
    assert set(found) <= PENDING, [sorted(c) for c in found if c not in PENDING]
