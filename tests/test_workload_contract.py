"""Every workload keeps the contract (lib/workloads/__init__.py), and no code outside a
workload's own files names it: the front ends find workloads through the contract."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lib import workloads
from lib.cli import params
from lib.runtime.platforms import PLATFORMS
from tests.user_repo import heavy_imports

ROOT = Path(__file__).resolve().parent.parent
NAMES = workloads.names()
PENDING: set[str] = set()  # no file outside a workload names one


def test_workloads_are_found_without_a_list():
    assert len(NAMES) >= 4
    assert sorted(p.stem for p in (ROOT / "notebooks_src").glob("*.py")) == NAMES
    assert params.workloads() == NAMES
    assert workloads.demo() in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_workload_keeps_the_contract(name):
    face = workloads.get(name)
    assert face.name == name and workloads.title(name)
    assert callable(face.datasets) and callable(face.train)
    assert face.headline.startswith("test_")
    assert (face.summary is not None) == face.grid
    cell = {p.name for p in params.parameters(name)}
    assert cell <= set(face.config.parameter_names()), cell - set(face.config.parameter_names())
    assert set(face.tiny) <= set(face.config.parameter_names())
    for platform in PLATFORMS:  # a default batch on every platform, from the workload itself
        cfg = face.config.from_params({"PLATFORM": platform, **face.tiny, "BATCH_SIZE": None})
        assert cfg.resolved_batch_size() > 0


def test_importing_a_workload_and_checking_its_parameters_loads_no_torch():
    """The contract's import rule: `get(NAME)` and its config's checks, as the command line and
    the notebook builder use them, load none of torch, numpy and the other heavy libraries
    (every workload in one fresh process: each one's list names what it loaded first)."""
    found = heavy_imports(ROOT)
    assert list(found) == ["lib.workloads", *NAMES], found
    loaded = {name: modules for name, modules in found.items() if modules}
    assert not loaded, (f"heavy modules loaded by importing or checking a workload (the "
                        f"contract, lib/workloads/__init__.py, allows none): {loaded}")


@pytest.mark.parametrize("name", NAMES)
def test_the_card_read_from_the_source_says_what_the_imported_face_says(name):
    """`report` trusts the card (read without importing torch): it must match the face."""
    card, face = workloads.card(name), workloads.get(name)
    assert (card.headline, card.grid) == (face.headline, face.grid)
    assert (card.summarise() is face.summary) if face.grid else card.summary is None


@pytest.mark.parametrize("change, refusal", [
    (("from lib.study.figures import summary  # its own", "def summary(out_dir, cfg=None):\n"
      "    return ''  # defined in the workload's module, which imports torch\n#"),
     "summary must be imported"),
    (('headline="test_accuracy",\n                    summary', 'headline=HEADLINE,\n'
      '                    summary'), "write headline= as a string literal"),
    (("    GRID = True", "    GRID = 1 > 0"), "write GRID = True in the body")])
def test_a_workload_whose_card_disagrees_with_its_face_is_refused(change, refusal, tmp_path,
                                                                   monkeypatch):
    """A copy of the study's module with its card made unreadable: get() names the fix."""
    import importlib
    import sys

    source = (ROOT / "lib" / "workloads" / "optimizer_study.py").read_text()
    assert change[0] in source
    package = tmp_path / "workloads"
    package.mkdir()
    source = source.replace(change[0], change[1])
    (package / "optimizer_study.py").write_text(
        source.replace("import Workload\n", "import Workload\nHEADLINE = 'test_accuracy'\n"))
    workloads.get("optimizer_study")  # the real one imported, so that it is put back after
    monkeypatch.setattr(workloads, "optimizer_study", workloads.optimizer_study)
    monkeypatch.setattr(workloads, "PACKAGE", package)
    workloads.card.cache_clear()
    monkeypatch.delitem(sys.modules, "lib.workloads.optimizer_study")
    monkeypatch.setattr(workloads, "__path__", [str(package)])
    try:
        with pytest.raises(TypeError, match=refusal):
            importlib.invalidate_caches()
            workloads.get("optimizer_study")
    finally:
        workloads.card.cache_clear()
        sys.modules.pop("lib.workloads.optimizer_study", None)


def _names_in_code(path: Path) -> set[str]:
    """Workload names written as string literals in `path` (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and n.value in NAMES and id(n) not in docs}


def test_no_code_outside_a_workload_names_one():
    files = [ROOT / "build_notebooks.py", *sorted((ROOT / "lib").rglob("*.py"))]
    own = {ROOT / "lib" / "workloads" / f"{n}.py" for n in NAMES}
    found = {str(f.relative_to(ROOT)): _names_in_code(f) for f in files if f not in own}
    assert {f for f, names in found.items() if names} <= PENDING, found


def test_report_takes_the_headline_from_the_workload_the_folder_records(tmp_path):
    import json

    from lib.cli.sweep.report import report
    from lib.runs.records import write_jsonl

    records = [{"epoch": 1, "train_loss": 1.0, "test_loss": 0.9, "test_Pd": 0.25,
                "test_mIoU": 0.5, "device": "cpu"}]
    write_jsonl(tmp_path / "metrics.jsonl", records)
    # no config.json: a first guess (Pd is recorded in %, as shown)
    assert "| run | epochs | best test_Pd | last epoch |" in report(tmp_path)
    assert "| . | 1 | 0.25% (epoch 1) | 0.25% | cpu |" in report(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"experiment": {"workload": "mshnet"}}))
    table = report(tmp_path)
    assert "| run | epochs | best test_mIoU | last epoch |" in table
    assert "| . | 1 | 0.50% (epoch 1) | 0.50% | cpu |" in table
