"""A notebook's edited cells carried back into its source, notebooks_src/<workload>.py.

A cell is carried when it maps one to one onto a source cell (the record in
lib.notebooks.edits says which) that is unchanged there since the notebook was rendered; the
generated header and bootstrap cells never are, and PLATFORM stays the build's. jupytext reads
and writes the source; an edit that cannot be carried is one line naming its cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jupytext
import nbformat

from lib.notebooks.badges import ROOT, settings
from lib.notebooks.edits import RECORD, cell_hash, matched_cells, record_of
from lib.notebooks.render import PLATFORM_LINE, plain_parameters, render
from lib.runtime.platforms import PLATFORMS, Platform


def _rel(path: Path, root: Path) -> Path:
    path = path.resolve()
    return path.relative_to(root) if path.is_relative_to(root) else path


def _label(n: int, cell) -> str:
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return f"cell {n} ({first if len(first) <= 40 else first[:40].rsplit(' ', 1)[0] + '...'!r})"


def write_source(src: Path, nb) -> str:
    """`nb` as percent text, written by jupytext, under `src`'s own header (jupytext's YAML
    block, kept as it is: no version lines added), so a carried cell is the only change."""
    old = src.read_text()
    fmt = {"extension": ".py", "format_name": "percent", "notebook_metadata_filter": "-all"}
    body = jupytext.writes(jupytext.reads(old, fmt="py:percent"), fmt=fmt)
    if not old.endswith(body):  # the source is not as jupytext writes it: jupytext's header
        return jupytext.writes(nb, fmt="py:percent")
    return old[:len(old) - len(body)] + jupytext.writes(nb, fmt=fmt)


def _carried(cell, old, problems: list[str], label: str, platform_line: str):
    """`cell` (a notebook's) as the source cell replacing `old`: the parameters cell keeps the
    source's PLATFORM line; the source's cell metadata is kept, the notebook's tags taken."""
    text = cell.source
    if "parameters" in old.metadata.get("tags", []):
        text = plain_parameters(text)  # a Colab form's annotations stay out of the source
        mine = PLATFORM_LINE.search(text)
        if mine is None:
            problems.append(f"{label}: the parameters cell lost its `PLATFORM = ...` line: put "
                            "it back, then carry again")
            return None
        if mine.group(0) != platform_line:
            problems.append(f"{label}: PLATFORM is written into each notebook by the build: "
                            "that line is not carried, the rest of the cell is")
        theirs = PLATFORM_LINE.search(old.source).group(0)
        text = PLATFORM_LINE.sub(lambda _: theirs, text, count=1)
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell.cell_type]
    new = make(text, metadata={k: v for k, v in old.metadata.items() if k != "tags"})
    if cell.get("metadata", {}).get("tags"):
        new.metadata["tags"] = list(cell.metadata["tags"])
    return new


def _rendered_notebook(notebook: Path, root: Path) -> tuple[Any, Path, Platform]:
    """(the notebook, its source, its platform), or one line saying what is wrong."""
    path = notebook.resolve()
    if not path.is_file() or path.suffix != ".ipynb":
        raise SystemExit(f"--carry-back {notebook}: no such notebook; expected a notebook "
                         "this project rendered, notebooks/<platform>/<workload>.ipynb")
    try:
        nb = jupytext.read(path)
    except (ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--carry-back {notebook}: not a notebook nbformat can read "
                         f"({type(exc).__name__}); open it in Jupyter and save it, or carry "
                         "the edits by hand") from None
    rec = nb.metadata.get(RECORD, {})
    workload = Path(rec.get("source", path.name.split(".")[0])).stem
    name = rec.get("platform", path.parent.name)
    if name not in PLATFORMS:
        raise SystemExit(f"--carry-back {notebook}: {name!r} is no platform: expected a "
                         "notebook this project rendered, notebooks/<platform>/<workload>.ipynb "
                         f"with <platform> one of {', '.join(PLATFORMS)}")
    src = root / "notebooks_src" / f"{workload}.py"
    if not src.is_file():
        raise SystemExit(f"--carry-back {notebook}: there is no notebooks_src/{workload}.py to "
                         "carry it into: expected a notebook this project rendered, "
                         "notebooks/<platform>/<workload>.ipynb")
    return nb, src, PLATFORMS[name]


def carry_plan(nb, src: Path, platform: Platform, cfg: dict, src_rel: Path):
    """(the source with `nb`'s edits carried, [(source cell index, label)] carried, one line
    per edit not carried). A cell is carried when it maps one to one onto a source cell that
    is unchanged there since `nb` was rendered; the generated cells never are."""
    fresh = nbformat.reads(render(src, platform, cfg), as_version=4)
    record = record_of(nb, lambda: render(src, platform, cfg, legacy=True))
    params = next(i for i, c in enumerate(fresh.cells) if "parameters" in c.metadata.get(
        "tags", []))
    generated = {fresh.cells[0].id: "header", fresh.cells[params + 1].id: "bootstrap"}
    to_source = {c.id: k for k, c in enumerate(c for c in fresh.cells if c.id not in generated)}
    now = {c.id: cell_hash(c) for c in fresh.cells}
    platform_line = PLATFORM_LINE.search(fresh.cells[params].source).group(0)
    source, carried, problems = jupytext.read(src, fmt="py:percent"), [], []
    matched = matched_cells(nb, record)
    for n, (rid, cell) in enumerate(matched, 1):
        label = _label(n, cell)
        if rid is None:
            problems.append(f"{label}: added here, so it has no place in {src_rel}: add it "
                            "there by hand")
        elif cell_hash(cell) in (record[rid], now.get(rid)):  # unchanged, or the source's already
            continue
        elif rid in generated:
            problems.append(f"{label}: the generated {generated[rid]} cell is never carried: "
                            "undo the edit, or keep a copy and render afresh with --force")
        elif now.get(rid) != record[rid] or rid not in to_source:
            problems.append(f"{label}: {src_rel} changed this cell since the notebook was "
                            "rendered: carry the edit by hand")
        elif (new := _carried(cell, source.cells[to_source[rid]], problems, label,
                              platform_line)) is not None:
            source.cells[to_source[rid]] = new
            carried.append((to_source[rid], label))
    present = [rid for rid, _ in matched if rid]
    problems += [f"cell {rid}: deleted here; delete it from {src_rel} by hand (a deletion is "
                 "not carried)" for rid in record if rid not in present and rid in now]
    if present != [rid for rid in record if rid in present]:
        problems.append(f"cells were moved here: move them in {src_rel} by hand (a move is not "
                        "carried)")
    return source, carried, problems


def _checked_text(src: Path, source, carried: list, src_rel: Path) -> str:
    """`source` as `src`'s new text, once jupytext reads each carried cell back as it was
    carried and one cell is tagged 'parameters'; else one line, and nothing is written."""
    text = write_source(src, source)
    back = jupytext.reads(text, fmt="py:percent")
    for k, label in carried:
        if len(back.cells) != len(source.cells) or cell_hash(back.cells[k]) != cell_hash(
                source.cells[k]):
            raise SystemExit(f"{label}: {src_rel} would not read back as this cell (a `# %%` "
                             "line splits it?): nothing carried; carry it by hand")
    tagged = [c for c in back.cells if "parameters" in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise SystemExit(f"the carried cells leave {src_rel} with {len(tagged)} cells tagged "
                         "'parameters' (one expected): nothing carried; tag the parameters "
                         "cell again, then carry again")
    return text


def carry_back(notebook: Path, root: Path = ROOT) -> tuple[int, list[str]]:
    """Write the cells edited in `notebook` (a rendered notebook) into its source,
    notebooks_src/<workload>.py (carry_plan says which cells), saying so. Returns (cells
    carried, one line per edit not carried, each naming its cell, printed too); the caller
    renders every platform from the source when a cell was carried."""
    nb, src, platform = _rendered_notebook(notebook, root)
    src_rel, nb_rel = _rel(src, root), _rel(notebook, root)
    source, carried, problems = carry_plan(nb, src, platform,
                                           settings(root / "pyproject.toml"), src_rel)
    if carried:
        src.write_text(_checked_text(src, source, carried, src_rel))
        print(f"carried {len(carried)} cell(s) of {nb_rel} into {src_rel}: "
              + ", ".join(label for _, label in carried))
    for line in problems:
        print(line)
    if not carried:
        print(f"nothing carried: {nb_rel} has "
              + ("no edit that maps onto the source" if problems else "no edits"))
    return len(carried), problems
