"""docs/your-own-experiment.md, followed as written: in a copy of the repository, every edit
block is applied and every command is run, in the guide's order, and each must succeed."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from lib.runs.records import read_jsonl
from tests.user_repo import ROOT, copy_repository, heavy_imports, run

GUIDE = ROOT / "docs" / "your-own-experiment.md"
# a fenced block, and the `<!-- guide: replace FILE FIRST[..LAST] -->` line before it, if any
BLOCK = re.compile(r"(?:<!-- guide: replace (\S+) (\w+)(?:\.\.(\w+))? -->\n)?"
                   r"```(bash|python)\n(.*?)```", re.S)


def steps(text: str) -> list[tuple]:
    """(kind, payload) in order: ("run", argv) per command, ("edit", (file, first, last,
    code)) per marked python block; unmarked python blocks are illustrations."""
    out = []
    for file, first, last, lang, body in BLOCK.findall(text):
        if lang == "bash":
            out += [("run", shlex.split(line, comments=True)) for line in body.splitlines()
                    if shlex.split(line, comments=True)]
        elif file:
            out.append(("edit", (file, first, last or first, body)))
    return out


def defined(node: ast.stmt) -> set[str]:
    """The names a top-level statement defines (def, class, assignment, import; `__doc__`
    for the module's docstring)."""
    if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str):
        return {"__doc__"}
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def replace(path: Path, first: str, last: str, code: str) -> None:
    """Replace the top-level statements from the one defining `first` to the one defining
    `last` (decorators and all) by `code`."""
    text = path.read_text()
    body = ast.parse(text).body
    starts = [i for i, n in enumerate(body) if first in defined(n)]
    ends = [i for i, n in enumerate(body) if last in defined(n)]
    assert len(starts) == 1 and len(ends) == 1, (path.name, first, last)
    start, end = body[starts[0]], body[ends[0]]
    lines = text.splitlines(keepends=True)
    top = min([start.lineno, *(d.lineno for d in getattr(start, "decorator_list", []))])
    path.write_text("".join(lines[:top - 1]) + code + "".join(lines[end.end_lineno:]))


def test_every_command_is_a_step():
    found = steps(GUIDE.read_text())
    commands = [argv for kind, argv in found if kind == "run"]
    assert commands[0] == ["train-anywhere", "new", "my_mnist"]
    assert ["python", "build_notebooks.py"] in commands
    assert len([k for k, _ in found if k == "edit"]) >= 7


@pytest.mark.notebook
def test_the_guide_turns_the_script_into_a_workload(tmp_path):
    user = copy_repository(tmp_path / "clone")
    for kind, payload in steps(GUIDE.read_text()):
        if kind == "edit":
            file, first, last, code = payload
            replace(user / file, first, last, code)
            continue
        done = run(user, *payload)
        assert done.returncode == 0, (payload, done.stdout[-3000:], done.stderr[-3000:])
    history = read_jsonl(user / "runs" / "my_mnist_try" / "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2, 3]  # two epochs, then one more resumed
    assert all(r["device"] == "cpu" for r in history)
    assert len(read_jsonl(user / "runs" / "my_mnist_try" / "sessions.jsonl")) == 2  # sessions
    for platform in ("colab_t4", "colab_tpu", "kaggle_p100", "kaggle_t4x2", "kaggle_tpu",
                     "local"):
        assert (user / "notebooks" / platform / "my_mnist.ipynb").exists()
    found = heavy_imports(user)  # the guide's module keeps the contract's import rule
    assert "my_mnist" in found and not any(found.values()), found
