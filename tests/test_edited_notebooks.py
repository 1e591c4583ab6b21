"""A user edits a generated notebook (and runs it, so it is saved with outputs), then renders:
the edit survives and is named, `--carry-back` writes it into the source and every platform's
notebook, `--force` keeps a copy, `--check` names a notebook with outputs and the command that
cleans it. Each test works in its own copy of the repository (tests/user_repo.py); no kernel
starts: JupyterLab's save is written with nbformat, as JupyterLab writes it."""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

import build_notebooks as bn
from lib.notebooks import badges, edits, render
from lib.runtime.platforms import PLATFORMS
from tests.user_repo import ROOT, copy_repository, git, run, snapshot, user_env

LOCAL = "notebooks/local/fashion_mnist.ipynb"
SOURCE = "notebooks_src/fashion_mnist.py"
TITLE = "# Fashion-MNIST quickstart"


# What the build and `make demo`'s render step read and write, and what git keeps out
CLONED = ("build_notebooks.py", "pyproject.toml", "README.md", "images.toml", "notebooks_src",
          "notebooks", "lib", "Makefile", "requirements/main.lock", ".gitignore",
          ".pre-commit-config.yaml")


@pytest.fixture
def user(tmp_path):
    """The user's clone, as they have it (the part of it a build reads)."""
    return copy_repository(tmp_path / "clone", *CLONED)


def save_from_jupyterlab(path: Path, edit=None) -> bytes:
    """What JupyterLab saves after `edit(cells)` and Run All: outputs, execution counts and its
    own metadata. Returns the bytes saved."""
    nb = nbformat.read(path, as_version=4)
    if edit:
        edit(nb.cells)
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = n + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"out {n}\n")]
        cell.metadata["execution"] = {"iopub.status.idle": "2026-01-01T00:00:00Z"}
    nb.metadata["language_info"].update(version="3.12.4", mimetype="text/x-python")
    nbformat.write(nb, path)
    return path.read_bytes()


def thirty_epochs(cells) -> None:
    """The issue's edit: EPOCHS 14 -> 30 in the parameters cell, and the title says so."""
    (params,) = [c for c in cells if c.metadata.get("tags") == ["parameters"]]
    params.source = params.source.replace("EPOCHS = 14", "EPOCHS = 30")
    (title,) = [c for c in cells if c.source.startswith(TITLE)]
    title.source = title.source.replace(TITLE, f"{TITLE}, thirty epochs", 1)


def cell_of(path: Path, start: str):
    """The one cell of the notebook at `path` whose source has a line starting with `start`."""
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if any(li.startswith(start) for li in c.source.splitlines())]
    return cell


def lines_naming(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines() if name in line]


def commands_in(line: str) -> list[list[str]]:
    """The commands a message tells the user to run (`python build_notebooks.py ...`)."""
    return [shlex.split(c) for c in re.findall(r"`(python build_notebooks\.py[^`]*)`", line)]


def test_an_edited_notebook_survives_a_build_and_is_named_in_one_line(user, capsys):
    """README: point the badges at a fork, run `python build_notebooks.py`. Every other
    notebook is rendered for the fork; the edited one is kept, byte for byte, and named."""
    notebook = user / LOCAL
    saved = save_from_jupyterlab(notebook, thirty_epochs)
    pyproject = user / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        'repository = "train-anywhere/train-anywhere"', 'repository = "someone/fork"'))
    done = run(user, "python", "build_notebooks.py")
    assert done.returncode == 0, done.stderr
    assert bn.main([], root=user) == 0  # and again: still kept, still said
    for out in (done.stdout, capsys.readouterr().out):
        assert notebook.read_bytes() == saved
        (line,) = lines_naming(out, LOCAL)
        assert line.startswith("kept 1 notebook(s) edited by hand as they are: " + LOCAL), line
        assert [c[2:] for c in commands_in(line)] == [["--carry-back", LOCAL], ["--force", LOCAL]]
    assert "someone/fork" in (user / "notebooks/colab_t4/fashion_mnist.ipynb").read_text()
    assert f" M {LOCAL}" in git(user, "status", "--porcelain").splitlines()  # git shows it too


def test_make_demo_keeps_the_edit_says_so_and_runs_the_demo(user, tmp_path):
    """`make demo` renders as `python build_notebooks.py` does, then runs the demo (here a
    stand-in for `python -m lib.cli.demo`, which trains: the render step is what is tested)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\nif [ "$1 $2" = "-m lib.cli.demo" ]; then echo "the demo ran on '
                      f'$(grep -o -m1 \'EPOCHS = [0-9]*\' {LOCAL})"; exit 0; fi\n'
                      f'exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    (venv / ".installed").touch()  # newer than the clone's pyproject.toml and lock: no install
    make = ["make", f"VENV={venv}"]
    assert subprocess.run([*make, "-q", "install"], cwd=user).returncode == 0
    notebook = user / LOCAL
    saved = save_from_jupyterlab(notebook, thirty_epochs)
    done = subprocess.run([*make, "demo"], cwd=user, env=user_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert notebook.read_bytes() == saved
    (kept,) = [line for line in lines_naming(done.stdout, LOCAL) if line.startswith("kept ")]
    assert "--carry-back " + LOCAL in kept
    lines = done.stdout.splitlines()
    assert lines.index(kept) < lines.index("the demo ran on EPOCHS = 30")


def test_carry_back_writes_the_edits_into_the_source_and_every_platform(user, capsys):
    notebook = user / LOCAL
    saved = save_from_jupyterlab(notebook, thirty_epochs)
    source_before = (user / SOURCE).read_text()
    done = run(user, "python", "build_notebooks.py", "--carry-back", LOCAL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"carried 2 cell(s) of {LOCAL} into {SOURCE}: ")
    # the two edited lines are the source's only change (jupytext's header kept as it was)
    diff = [line for line in difflib.unified_diff(
        source_before.splitlines(), (user / SOURCE).read_text().splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert diff == [f"-# {TITLE}", f"+# {TITLE}, thirty epochs",
                    "-EPOCHS = 14  # passes over the training set",
                    "+EPOCHS = 30  # passes over the training set"]
    for name in PLATFORMS:
        path = user / "notebooks" / name / "fashion_mnist.ipynb"
        params = render.plain_parameters(cell_of(path, "EPOCHS = ").source)  # Colab's: a form
        assert "EPOCHS = 30  # passes" in params and f'PLATFORM = "{name}"' in params, name
        assert cell_of(path, TITLE).source.startswith(f"{TITLE}, thirty epochs"), name
    # the notebook carried from holds the user's outputs and its cells are current: left as is
    assert notebook.read_bytes() == saved
    assert lines_naming(done.stdout, LOCAL)[-1].startswith("left 1 notebook(s) run in place")
    # byte-stable: a second render writes nothing
    before = snapshot(user / "notebooks")
    assert bn.main([], root=user) == 0 and "wrote" not in capsys.readouterr().out
    assert snapshot(user / "notebooks") == before and (user / SOURCE).read_text() != source_before


def test_check_names_a_notebook_run_in_place_and_the_command_that_cleans_it(user, capsys):
    """Outputs alone are no edit: a build leaves the notebook as it is (its cells are current:
    rendering it would only delete the outputs); --check fails naming it and the command that
    cleans it, which keeps the executed copy beside it (ignored by git)."""
    notebook = user / LOCAL
    saved = save_from_jupyterlab(notebook)
    assert bn.main([], root=user) == 0 and notebook.read_bytes() == saved
    (left,) = lines_naming(capsys.readouterr().out, LOCAL)
    assert left.startswith(f"left 1 notebook(s) run in place as they are (their cells are "
                           f"current: rendering would only delete the outputs): {LOCAL}. "), left
    assert bn.main(["--check"], root=user) == 1
    said = capsys.readouterr().out
    # the summary names what cleans it, not `python build_notebooks.py` (which leaves it)
    assert said.splitlines()[-1] == ("1 generated file(s) to see to: `python build_notebooks.py "
                                     "--force NOTEBOOK` cleans the 1 carrying outputs (keeping "
                                     "a copy)")
    (line,) = lines_naming(said, LOCAL)
    assert line.startswith(f"{LOCAL}: carries outputs (run in place): clean it with "), line
    (clean,) = commands_in(line)
    assert clean == ["python", "build_notebooks.py", "--force", LOCAL]
    cleaned = run(user, *clean)
    copy = "notebooks/local/fashion_mnist.executed.ipynb"
    assert cleaned.stdout.splitlines() == [f"wrote {LOCAL} (your executed notebook kept as {copy})"]
    assert (user / copy).read_bytes() == saved
    assert bn.stale_files(user) == []
    assert git(user, "status", "--porcelain") == ""  # clean, and the copy is not for committing


def test_a_run_whose_cells_are_out_of_date_is_rendered_and_the_run_kept(user, capsys):
    """Outputs in a notebook whose source changed since: the build must write it; the run is
    kept beside it first, under a new name each time."""
    notebook, src = user / LOCAL, user / SOURCE
    for n, copy in enumerate(["fashion_mnist.executed.ipynb", "fashion_mnist.executed-2.ipynb"]):
        saved = save_from_jupyterlab(notebook)
        src.write_text(src.read_text().replace(f"SEED = {n + 1} ", f"SEED = {n + 2} "))
        assert bn.main([], root=user) == 0
        rel = f"notebooks/local/{copy}"
        assert f"wrote {LOCAL} (your executed notebook kept as {rel})" in capsys.readouterr().out
        assert (user / rel).read_bytes() == saved
        assert f"SEED = {n + 2} " in cell_of(notebook, "SEED = ").source
        assert not edits.has_outputs(nbformat.read(notebook, as_version=4))
    assert bn.stale_files(user) == []


def test_force_keeps_the_edited_notebook_beside_it_which_can_still_be_carried_back(user,
                                                                                   capsys):
    notebook = user / LOCAL
    saved = save_from_jupyterlab(notebook, thirty_epochs)
    assert bn.main(["--force", str(notebook)], root=user) == 0
    copy = user / "notebooks/local/fashion_mnist.edited.ipynb"
    assert capsys.readouterr().out == (f"wrote {LOCAL} (your edited notebook kept as "
                                       f"{copy.relative_to(user)})\n")
    assert copy.read_bytes() == saved and bn.stale_files(user) == []
    assert bn.main(["--carry-back", str(copy)], root=user) == 0
    assert "EPOCHS = 30  #" in (user / SOURCE).read_text()
    assert "EPOCHS = 30  #" in cell_of(notebook, "EPOCHS = ").source
    assert copy.read_bytes() == saved  # the copy is the user's: never rendered over


def test_every_edit_that_cannot_be_carried_is_one_line_naming_its_cell(user, capsys):
    notebook, src = user / LOCAL, user / SOURCE

    def edit(cells):
        thirty_epochs(cells)
        params = cells[2]
        params.source = params.source.replace('PLATFORM = "local"', 'PLATFORM = "colab_t4"')
        cells[3].source += "\nprint('mine')"  # the generated bootstrap
        cells[5].source = "## Device, and the data"  # changed in the source too, below
        del cells[10]  # "## Results"
        cells.insert(8, nbformat.v4.new_code_cell("print('a cell of my own')"))

    saved = save_from_jupyterlab(notebook, edit)
    src.write_text(src.read_text().replace("# ## Device and data", "# ## Device and its data"))
    assert bn.main(["--carry-back", str(user / LOCAL)], root=user) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"carried 2 cell(s) of {LOCAL} into {SOURCE}: cell 2 ('# Fashion-MNIST "
                      "quickstart, thirty...'), cell 3 ('PLATFORM = \"colab_t4\"  # which "
                      "notebook...')")
    assert out[1:6] == [
        "cell 3 ('PLATFORM = \"colab_t4\"  # which notebook...'): PLATFORM is written into "
        "each notebook by the build: that line is not carried, the rest of the cell is",
        "cell 4 ('# @title Bootstrap: set up this runtime...'): the generated bootstrap cell "
        "is never carried: undo the edit, or keep a copy and render afresh with --force",
        f"cell 6 ('## Device, and the data'): {SOURCE} changed this cell since the notebook "
        "was rendered: carry the edit by hand",
        f"cell 9 (\"print('a cell of my own')\"): added here, so it has no place in {SOURCE}: "
        "add it there by hand",
        f"cell fashion_mnist-10: deleted here; delete it from {SOURCE} by hand (a deletion "
        "is not carried)"]
    text = src.read_text()
    assert "EPOCHS = 30  #" in text and 'PLATFORM = "local"  #' in text
    assert "# ## Device and its data" in text and "a cell of my own" not in text
    # what was not carried stays in the notebook, which the build then kept
    assert notebook.read_bytes() == saved
    assert out[-1].startswith(f"kept 1 notebook(s) edited by hand as they are: {LOCAL}.")


def split_the_config_cell(cells) -> None:
    cells[4].source += "\n# %%\nprint(1)"


def untag_the_parameters(cells) -> None:
    del cells[2].metadata["tags"]


@pytest.mark.parametrize("edit,said", [
    (split_the_config_cell,
     "cell 5 ('from lib.workloads.fashion_mnist import...'): notebooks_src/fashion_mnist.py "
     "would not read back as this cell (a `# %%` line splits it?): nothing carried"),
    (untag_the_parameters,
     "the carried cells leave notebooks_src/fashion_mnist.py with 0 cells tagged 'parameters' "
     "(one expected): nothing carried"),
])
def test_an_edit_jupytext_cannot_carry_faithfully_writes_nothing(user, edit, said):
    save_from_jupyterlab(user / LOCAL, edit)
    before = snapshot(user)
    with pytest.raises(SystemExit) as raised:
        bn.main(["--carry-back", str(user / LOCAL)], root=user)
    assert str(raised.value).startswith(said), raised.value
    assert snapshot(user) == before


def test_a_notebook_rendered_before_records_is_judged_by_the_previous_renderers_cells(user,
                                                                                      capsys):
    """No record: the notebook is compared with what the renderer before records wrote. As
    it wrote it: rendered (with a record now). Edited: kept, and it carries back."""
    notebook, cfg = user / LOCAL, badges.settings(user / "pyproject.toml")
    old = render.render(user / SOURCE, PLATFORMS["local"], cfg, legacy=True)
    assert edits.RECORD not in old and "the next build overwrites it" in old
    notebook.write_text(old)
    assert bn.main([], root=user) == 0
    assert capsys.readouterr().out == f"wrote {LOCAL}\n" and bn.stale_files(user) == []
    notebook.write_text(old)
    saved = save_from_jupyterlab(notebook, thirty_epochs)
    assert bn.main([], root=user) == 0
    assert notebook.read_bytes() == saved and "kept 1 notebook(s)" in capsys.readouterr().out
    assert bn.main(["--carry-back", str(user / LOCAL)], root=user) == 0
    assert "EPOCHS = 30  #" in (user / SOURCE).read_text()


def test_a_notebook_nbformat_cannot_read_is_kept_and_named(user, capsys):
    notebook = user / LOCAL
    notebook.write_text(notebook.read_text().replace('"cells": [', '<<<<<<< HEAD\n"cells": [', 1))
    saved = notebook.read_bytes()
    assert bn.main([], root=user) == 0 and notebook.read_bytes() == saved
    (kept,) = lines_naming(capsys.readouterr().out, LOCAL)  # no carry-back: nothing to read
    assert kept.startswith(f"kept {LOCAL} as it is: not a notebook nbformat can read: "), kept
    assert commands_in(kept) == [["python", "build_notebooks.py", "--force", LOCAL]]
    (line,) = lines_naming("\n".join(bn.stale_files(user)), LOCAL)
    assert line.startswith(f"{LOCAL}: not a notebook nbformat can read: ")
    assert f"`python build_notebooks.py --force {LOCAL}`" in line


KERNEL = "notebooks/kaggle_t4x2/kernels/fashion_mnist/kernel-metadata.json"


def test_a_kaggle_users_own_keys_in_kernel_metadata_survive_every_build(user, capsys):
    """A Kaggle user attaches a dataset and publishes (dataset_sources, is_private, a key the
    build never writes) in the kernel-metadata.json `kaggle kernels push` reads, saved in
    their editor's own layout. Builds keep those values; a new Kaggle user in pyproject.toml
    changes only the build's keys (id, linked to title); then the build is byte-stable."""
    path = user / KERNEL
    meta = json.loads(path.read_text())
    mine = {"dataset_sources": ["me/my-images"], "is_private": False, "keywords": ["gpu"]}
    path.write_text(json.dumps({**meta, **mine}))  # one line: not how the build writes it
    pyproject = user / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        'repository = "train-anywhere/train-anywhere"', 'repository = "someone/fork"'))
    assert bn.main([], root=user) == 0
    assert f"wrote {KERNEL}" in capsys.readouterr().out.splitlines()
    now = json.loads(path.read_text())
    assert {k: now[k] for k in mine} == mine
    assert now["id"] == "someone/fashion-mnist-kaggle-t4x2" != meta["id"]
    assert {k: v for k, v in now.items() if k not in mine and k != "id"} == {
        k: v for k, v in meta.items() if k not in mine and k != "id"}
    written = path.read_bytes()
    assert bn.main([], root=user) == 0 and path.read_bytes() == written
    assert bn.stale_files(user) == [] and "wrote" not in capsys.readouterr().out


def test_a_kernel_metadata_that_is_not_json_is_kept_named_and_copied_on_force(user, capsys):
    path = user / KERNEL
    path.write_text(path.read_text().replace('"dataset_sources": []',
                                             '"dataset_sources": ["me/a",]'))  # a stray comma
    saved = path.read_bytes()
    assert bn.main([], root=user) == 0 and path.read_bytes() == saved
    (kept,) = lines_naming(capsys.readouterr().out, KERNEL)
    assert kept.startswith(f"kept {KERNEL} as it is: not a JSON object (what `kaggle kernels "
                           "push` reads); fix it, or "), kept
    (line,) = lines_naming("\n".join(bn.stale_files(user)), KERNEL)
    assert line.startswith(f"{KERNEL}: not a JSON object (what `kaggle kernels push` reads): "
                           "fix it, or "), line
    (force,) = commands_in(line)
    assert force == ["python", "build_notebooks.py", "--force", KERNEL]
    done = run(user, *force)
    copy = KERNEL.replace("kernel-metadata.json", "kernel-metadata.edited.json")
    assert done.stdout.splitlines() == [f"wrote {KERNEL} (your file kept as {copy})"]
    assert (user / copy).read_bytes() == saved and json.loads(path.read_text())["id"]
    assert bn.stale_files(user) == []  # the copy is no stray file
    assert git(user, "status", "--porcelain") == ""  # nor one for git


@pytest.mark.parametrize("argv,said", [
    (["--carry-back", "notebooks/local/nothing_here.ipynb"],
     "--carry-back notebooks/local/nothing_here.ipynb: no such notebook; expected a notebook "
     "this project rendered, notebooks/<platform>/<workload>.ipynb"),
    (["--carry-back", "notebooks/nowhere/fashion_mnist.ipynb"],
     "--carry-back notebooks/nowhere/fashion_mnist.ipynb: 'nowhere' is no platform: expected a "
     "notebook this project rendered, notebooks/<platform>/<workload>.ipynb with <platform> "
     "one of colab_t4, "),
    (["--carry-back", "notebooks/local/mine.ipynb"],
     "--carry-back notebooks/local/mine.ipynb: there is no notebooks_src/mine.py to carry it "
     "into: expected a notebook this project rendered, notebooks/<platform>/<workload>.ipynb"),
    (["--force", "notebooks/local/mine.ipynb"],
     "--force notebooks/local/mine.ipynb: not a notebook this build renders; expected "
     "notebooks/<platform>/<workload>.ipynb of a source in notebooks_src/"),
])
def test_a_wrong_notebook_is_one_line_naming_it(user, argv, said, monkeypatch):
    monkeypatch.chdir(user)
    nowhere = user / "notebooks/nowhere"
    nowhere.mkdir()
    (nowhere / "fashion_mnist.ipynb").write_text(
        nbformat.writes(nbformat.v4.new_notebook()))  # a notebook without the build's record
    (user / "notebooks/local/mine.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    with pytest.raises(SystemExit) as raised:
        bn.main(argv, root=user)
    assert str(raised.value).startswith(said), raised.value
    assert "\n" not in str(raised.value)


def test_the_pre_commit_hook_is_the_renderers_check_and_stops_a_commit_with_outputs(user):
    """.pre-commit-config.yaml runs `build_notebooks.py --check` when a notebook, a source or
    what renders them is staged; here its command runs in the clone, a notebook with outputs
    staged, as pre-commit would run it."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (hook,) = [h for repo in config["repos"] for h in repo["hooks"]]
    assert hook["language"] == "system" and hook["pass_filenames"] is False
    for path in (LOCAL, SOURCE, "build_notebooks.py", "lib/runtime/platforms.py", "pyproject.toml"):
        assert re.search(hook["files"], path), path
    assert not re.search(hook["files"], "tests/test_builder.py")
    entry = shlex.split(hook["entry"])
    assert entry[0] == ".venv/bin/python" and entry[1:] == ["build_notebooks.py", "--check"]
    save_from_jupyterlab(user / LOCAL)
    git(user, "add", LOCAL)
    done = subprocess.run([sys.executable, *entry[1:]], cwd=user, env=user_env(),
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert f"`python build_notebooks.py --force {LOCAL}`" in lines_naming(done.stdout, LOCAL)[0]
    # the contributor guide installs it with the command the configuration names
    install = ".venv/bin/pip install pre-commit && .venv/bin/pre-commit install"
    assert install in (ROOT / ".pre-commit-config.yaml").read_text()
    assert install in (ROOT / "docs" / "guides" / "contributing.md").read_text()


def test_the_docs_say_what_to_edit_and_what_happens_to_an_edited_notebook():
    mac = (ROOT / "README.md").read_text().split("## On a Mac", 1)[1].split("\n## ", 1)[0]
    guide = (ROOT / "docs" / "guides" / "contributing.md").read_text()
    for text in (mac, guide):
        assert "notebooks_src/" in text and "--carry-back" in text and "--force" in text
    assert os.path.exists(ROOT / ".pre-commit-config.yaml")
