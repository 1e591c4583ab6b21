"""The generated bootstrap cell runs the library it was rendered with, wherever it starts.

A small notebook rendered by build_notebooks.py (parameters, the real bootstrap cell, one
cell that says which `lib` it imported) runs through papermill in an empty folder, as a
fresh Colab/Kaggle runtime would; its `git clone` is served from this checkout through
`url.<base>.insteadOf` (tests/served_repo.py), so nothing touches the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import nbformat
import papermill
import pytest

import lib
from lib.notebooks import render
from lib.runtime.platforms import PLATFORMS, storage
from tests.notebook_run import ROOT, stream_text
from tests.served_repo import ServedRepo, git

pytestmark = pytest.mark.notebook
CFG = {"repository": "train-anywhere/train-anywhere", "branch": "main",
       "kaggle_user": "train-anywhere", "version": lib.__version__}
PROBE = '''\
# %% tags=["parameters"]
PLATFORM = "local"
SMOKE = False

# %%
import lib
print("lib imported from", json.dumps(str(Path(lib.__file__).resolve().parent.parent)))
'''


def render_probe(folder: Path, platform: str = "colab_t4") -> Path:
    src = folder / "probe_src" / "probe.py"
    src.parent.mkdir(parents=True)
    src.write_text(PROBE.replace("import lib\n", "import json\nimport lib\n"))
    notebook = folder / "probe.ipynb"
    notebook.write_text(render.render(src, PLATFORMS[platform], CFG))
    return notebook


@pytest.fixture
def served(tmp_path):
    return ServedRepo(tmp_path / "github")


def run(notebook: Path, cwd: Path, env: dict, **parameters) -> nbformat.NotebookNode:
    """papermill `notebook` with the kernel in `cwd`; raises PapermillExecutionError."""
    out = notebook.with_name(f"{notebook.stem}-out.ipynb")
    with mock.patch.dict(os.environ, env):  # the kernel inherits it
        papermill.execute_notebook(str(notebook), str(out), parameters=parameters, cwd=str(cwd),
                                   progress_bar=False, kernel_name="python3")
    return nbformat.read(out, as_version=4)


def imported_from(nb) -> Path:
    line = next(ln for ln in stream_text(nb).splitlines() if ln.startswith("lib imported from"))
    return Path(json.loads(line.split("from ", 1)[1]))


def bootstrap_error(tmp_path, notebook, cwd, env) -> list[str]:
    """Run expecting the bootstrap to refuse; the error output's lines as the user sees them."""
    with pytest.raises(papermill.PapermillExecutionError) as err:
        run(notebook, cwd, env)
    assert err.value.ename == "BootstrapError"
    out = nbformat.read(notebook.with_name(f"{notebook.stem}-out.ipynb"), as_version=4)
    errors = [o for c in out.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert len(errors) == 1
    return errors[0]["traceback"]


def test_a_fresh_folder_clones_the_rendered_ref_and_runs_it(tmp_path, served):
    notebook, empty = render_probe(tmp_path), tmp_path / "content"
    empty.mkdir()
    nb = run(notebook, empty, served.env)
    clone = empty / "train-anywhere"
    assert imported_from(nb) == clone.resolve()
    assert git("rev-parse", "HEAD", cwd=clone) == served.head()
    text = stream_text(nb)
    assert (f"bootstrap: train-anywhere {lib.__version__} at commit {served.head()[:12]} from "
            f"train-anywhere/train-anywhere@main (cloned) at {clone.resolve()}") in text


def test_on_kaggle_the_clone_lands_on_scratch_not_in_the_output(tmp_path, served):
    """/kaggle/working is what a version keeps as its output (20 GB, kaggle.com/docs/notebooks):
    a fresh Kaggle kernel starts there, and the clone goes to the scratch role instead."""
    kaggle = tmp_path / "kaggle"
    working = kaggle / "working"
    working.mkdir(parents=True)
    env = {**served.env, "KAGGLE_KERNEL_RUN_TYPE": "Batch", "TA_KAGGLE_ROOT": str(kaggle)}
    nb = run(render_probe(tmp_path, "kaggle_t4x2"), working, env)
    with mock.patch.dict(os.environ, {"TA_KAGGLE_ROOT": str(kaggle)}):
        clone = storage("kaggle").scratch / "train-anywhere"
    assert clone.is_relative_to(kaggle) and not clone.is_relative_to(working)
    assert imported_from(nb) == clone.resolve()
    assert git("rev-parse", "HEAD", cwd=clone) == served.head()
    assert [p.name for p in working.iterdir()] == []
    assert f"(cloned) at {clone.resolve()}" in stream_text(nb)


def test_a_clone_at_another_commit_is_moved_to_the_rendered_ref(tmp_path, served):
    notebook, folder = render_probe(tmp_path), tmp_path / "content"
    folder.mkdir()
    run(notebook, folder, served.env)
    old = served.head()
    new = served.commit("a newer main", {"NEWS.txt": "newer\n"})
    nb = run(notebook, folder, served.env)
    clone = folder / "train-anywhere"
    assert git("rev-parse", "HEAD", cwd=clone) == new != old
    assert (clone / "NEWS.txt").is_file()
    assert f"at commit {new[:12]} from train-anywhere/train-anywhere@main (moved from " \
           f"{old[:12]})" in stream_text(nb)
    # Run again: nothing to move.
    assert "@main (already there)" in stream_text(run(notebook, folder, served.env))


def test_a_clone_with_local_changes_is_refused_in_one_line(tmp_path, served):
    notebook, folder = render_probe(tmp_path), tmp_path / "content"
    folder.mkdir()
    run(notebook, folder, served.env)
    served.commit("a newer main", {"NEWS.txt": "newer\n"})
    edited = folder / "train-anywhere" / "lib" / "__init__.py"
    edited.write_text(edited.read_text() + "# my edit\n")
    lines = bootstrap_error(tmp_path, notebook, folder, served.env)
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(f"BootstrapError: the clone at {folder.resolve()}/train-anywhere "
                               "has local changes, so it cannot be moved to main")
    assert "stash" in lines[0]
    assert edited.read_text().endswith("# my edit\n")  # nothing of the user's was lost


def test_a_library_of_another_version_is_refused(tmp_path, served):
    init = (ROOT / "lib" / "__init__.py").read_text()
    served.commit("version 9.9.9", {
        "lib/__init__.py": init.replace(f'"{lib.__version__}"', '"9.9.9"')})
    notebook, folder = render_probe(tmp_path), tmp_path / "content"
    folder.mkdir()
    lines = bootstrap_error(tmp_path, notebook, folder, served.env)
    assert len(lines) == 1
    assert (f"this notebook was rendered for train-anywhere {lib.__version__}, but the library "
            f"at {folder.resolve()}/train-anywhere is 9.9.9") in lines[0]


def test_a_clone_that_fails_says_what_it_tried_and_how_to_run_offline(tmp_path):
    notebook, folder = render_probe(tmp_path), tmp_path / "content"
    folder.mkdir()
    nowhere = {"GIT_CONFIG_COUNT": "1",
               "GIT_CONFIG_KEY_0": f"url.{(tmp_path / 'offline').as_uri()}/.insteadOf",
               "GIT_CONFIG_VALUE_0": "https://github.com/"}
    lines = bootstrap_error(tmp_path, notebook, folder, nowhere)
    assert len(lines) == 1
    assert lines[0].startswith("BootstrapError: `git clone --quiet --depth 1 --branch main "
                               "https://github.com/train-anywhere/train-anywhere.git")
    assert "To run without the network, start the notebook inside your train-anywhere " \
           "checkout (papermill: --cwd <checkout>/notebooks/<platform>)" in lines[0]


def test_the_platform_is_the_parameter_so_p_platform_moves_the_bootstrap_too(tmp_path, served):
    notebook, folder = render_probe(tmp_path, "colab_t4"), tmp_path / "content"
    folder.mkdir()
    nb = run(notebook, folder, served.env, PLATFORM="kaggle_tpu")
    text = stream_text(nb)
    assert "Kaggle TPU v5e-8 notebook on the local runtime" in text
    assert "Colab T4" not in text.split("bootstrap: ", 1)[1]


def test_papermill_inject_input_path_finds_the_checkout(tmp_path):
    """papermill --inject-input-path (the Python API's equivalent): no clone, no network."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    notebook = render_probe(tmp_path)
    offline = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "url.file:///nonexistent/.insteadOf",
               "GIT_CONFIG_VALUE_0": "https://github.com/"}
    inside = ROOT / "notebooks" / "local" / "fashion_mnist.ipynb"
    nb = run(notebook, folder, offline, PAPERMILL_INPUT_PATH=str(inside))
    assert imported_from(nb) == ROOT
    assert f"from the checkout at {ROOT}" in stream_text(nb)
    assert not (folder / "train-anywhere").exists()


def test_papermill_from_another_folder_runs_the_checkout_it_was_given(tmp_path):
    """Issue 14: `papermill /path/to/repo/notebooks/... out.ipynb` run from elsewhere, offline."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    notebook = ROOT / "notebooks" / "local" / "fashion_mnist.ipynb"
    env = dict(os.environ, GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="url.file:///nonexistent/.insteadOf",
               GIT_CONFIG_VALUE_0="https://github.com/", OMP_NUM_THREADS="1")
    papermill_cli = Path(sys.executable).with_name("papermill")
    out = subprocess.run(
        [str(papermill_cli), str(notebook), "out.ipynb", "-p", "SMOKE", "True", "-p",
         "SAMPLE_DATA", "True", "-p", "EPOCHS", "1", "-p", "OUT_DIR", str(folder / "run"),
         "-p", "DATA_DIR", str(folder / "data")],
        cwd=folder, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    text = stream_text(nbformat.read(folder / "out.ipynb", as_version=4))
    assert f"from the checkout at {ROOT}" in text
    assert not (folder / "train-anywhere").exists()
    assert (folder / "run" / "metrics.jsonl").is_file()
