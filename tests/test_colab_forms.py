"""The Colab notebooks' parameters as a Colab form (lib/notebooks/render.py `colab_form`): a
`# @title` line, one valid `# @param` annotation per parameter (a drop-down for a closed list),
each parameter's explanation kept, the cell shown as its form (cellView "form"); the values
are the source's, and papermill's injected cell still overrides them. Every other platform's
notebook keeps the plain cell. No kernel: the cells are Python, run here with `exec`."""

import ast
import io
import json
import re
import tokenize

import jupytext
import nbformat
import papermill.iorw
import papermill.parameterize
import pytest

from lib.notebooks import render, to_source
from lib.runtime.platforms import PLATFORMS
from tests.test_builder import CFG, ROOT

WORKLOADS = sorted(p.stem for p in (ROOT / "notebooks_src").glob("*.py"))
# Colab's field types (its forms example notebook: integer, number, boolean, string, raw, a
# list of options) and the Python values each takes.
FIELD = {"integer": (int,), "number": (int, float), "boolean": (bool,), "string": (str,),
         "raw": (object,)}
PARAM = re.compile(r'^(?P<code>[A-Z][A-Z0-9_]* = .+?)  # @param (?P<spec>\[.*\]|\{type:"(?P<type>'
                   r'[a-z]+)"\})$')


def params_cell(nb):
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return cell


def source_cell(workload):
    nb = jupytext.read(ROOT / "notebooks_src" / f"{workload}.py", fmt="py:percent")
    return params_cell(nb).source


def rendered(workload, platform):
    text = render.render(ROOT / "notebooks_src" / f"{workload}.py", PLATFORMS[platform], CFG)
    return nbformat.reads(text, as_version=4)


def values(source: str) -> dict:
    namespace = {}
    exec(source, namespace)  # noqa: S102 - the project's own parameters cell
    return {k: v for k, v in namespace.items() if k.isupper()}


def comments(source: str) -> dict[str, str]:
    """NAME -> the explanation its line carries in the source."""
    found = {tok.start[0]: tok.string.lstrip("#").strip() for tok in
             tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT}
    return {line.split("=")[0].strip(): found[i] for i, line in
            enumerate(source.splitlines(), start=1) if i in found and "=" in line}


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("platform", ["colab_t4", "colab_tpu"])
def test_the_colab_parameters_cell_is_a_form_with_each_explanation(workload, platform):
    cell = params_cell(rendered(workload, platform))
    assert cell.metadata == {"tags": ["parameters"], "cellView": "form"}
    lines = cell.source.splitlines()
    assert lines[0].startswith("# @title ")
    source = source_cell(workload)
    expected = dict(values(source), PLATFORM=platform)
    assert values(cell.source) == expected  # the same values, and valid Python
    explained = comments(source)
    annotated = {}
    for before, line in zip(lines, lines[1:], strict=False):
        if line.startswith("PLATFORM = "):  # written by the builder: not a field of the form
            assert "@param" not in line
            continue
        if not re.match(r"[A-Z]", line):
            continue
        match = PARAM.match(line)
        assert match, line
        name = line.split(" = ")[0]
        value = expected[name]
        assert ast.literal_eval(match["code"].split(" = ", 1)[1]) == value
        if match["type"]:
            assert isinstance(value, FIELD[match["type"]]), (line, value)
            assert not (match["type"] in ("integer", "number") and isinstance(value, bool))
        else:  # a drop-down: its options are the closed list, the value one of them
            options = json.loads(match["spec"])
            assert value in options and all(isinstance(o, str) for o in options), line
        assert before == f"# @markdown `{name}`: {explained[name]}", (before, line)
        annotated[name] = match["spec"]
    assert set(annotated) == set(expected) - {"PLATFORM"}
    # The closed choices are drop-downs, None-able and list parameters take any literal.
    assert json.loads(annotated["DEVICE"]) == ["auto", "cuda", "xla", "mps", "cpu"]
    assert json.loads(annotated["RESUME"]) == ["auto", "new", "require"]
    assert annotated["TRACKERS"] == annotated["OUT_DIR"] == '{type:"raw"}'
    assert annotated["SMOKE"] == '{type:"boolean"}'
    assert annotated["EPOCHS"] == '{type:"integer"}'


def test_a_workloads_own_closed_list_is_a_drop_down():
    lines = params_cell(rendered("mamba_spike", "colab_t4")).source.splitlines()
    assert 'DATASET = "nmnist"  # @param ["nmnist", "dvsgesture", "cifar10dvs"]' in lines
    lines = params_cell(rendered("mshnet", "colab_t4")).source.splitlines()
    assert 'WARMUP_RULE = "official"  # @param ["official", "paper"]' in lines


@pytest.mark.parametrize("workload", ["fashion_mnist", "optimizer_study"])
def test_papermill_still_overrides_the_form(workload, tmp_path):
    """papermill's own loading and parameterisation of the Colab notebook: its cell follows
    the form and wins; the form keeps its tag and stays first (`train-anywhere run -p` runs
    papermill too)."""
    path = tmp_path / f"{workload}.ipynb"
    path.write_text(render.render(ROOT / "notebooks_src" / f"{workload}.py", PLATFORMS["colab_t4"],
                              CFG))
    nb = papermill.iorw.load_notebook_node(str(path))
    done = papermill.parameterize.parameterize_notebook(
        nb, {"EPOCHS": 3, "DEVICE": "cpu", "TRACKERS": ["wandb"], "SMOKE": True})
    at = next(i for i, c in enumerate(done.cells) if "parameters" in c.metadata.get("tags", []))
    assert "injected-parameters" in done.cells[at + 1].metadata["tags"]
    assert done.cells[at].metadata["cellView"] == "form"
    namespace = values(done.cells[at].source + "\n" + done.cells[at + 1].source)
    assert (namespace["EPOCHS"], namespace["DEVICE"], namespace["TRACKERS"],
            namespace["SMOKE"]) == (3, "cpu", ["wandb"], True)


@pytest.mark.parametrize("platform", sorted(p for p in PLATFORMS
                                            if PLATFORMS[p].runtime != "colab"))
def test_every_other_platform_keeps_the_plain_cell(platform):
    cell = params_cell(rendered("fashion_mnist", platform))
    source = source_cell("fashion_mnist")
    assert cell.metadata == {"tags": ["parameters"]}
    assert "@param" not in cell.source and "@title" not in cell.source
    assert cell.source.splitlines()[1:] == source.splitlines()[1:]  # all but PLATFORM's line


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_form_taken_out_again_is_the_plain_cell(workload):
    """lib.notebooks.render.plain_parameters undoes colab_form: what carry-back writes to the
    source from a Colab notebook is the plain cell, each explanation its line's comment."""
    form = params_cell(rendered(workload, "colab_t4")).source
    plain = params_cell(rendered(workload, "local")).source.replace(
        'PLATFORM = "local"', 'PLATFORM = "colab_t4"')
    assert "@param" in form and render.plain_parameters(form) == plain
    assert render.plain_parameters(plain) == plain


def test_a_value_set_in_colabs_form_carries_back_as_a_plain_line():
    """EPOCHS set to 3 in the form (Colab rewrites the value, keeps the annotation): carried
    back, the source's line is `EPOCHS = 3` with its explanation, no annotation."""
    from pathlib import Path

    nb = rendered("fashion_mnist", "colab_t4")
    cell = params_cell(nb)
    cell.source = cell.source.replace('EPOCHS = 14  # @param {type:"integer"}',
                                      'EPOCHS = 3  # @param {type:"integer"}')
    src = ROOT / "notebooks_src" / "fashion_mnist.py"
    source, carried, problems = to_source.carry_plan(nb, src, PLATFORMS["colab_t4"], CFG,
                                              Path("notebooks_src/fashion_mnist.py"))
    assert problems == [] and len(carried) == 1
    (new,) = [c for c in source.cells if "parameters" in c.metadata.get("tags", [])]
    assert new.source == source_cell("fashion_mnist").replace(
        "EPOCHS = 14  # passes", "EPOCHS = 3  # passes")
