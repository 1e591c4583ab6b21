"""build_notebooks.py: per-platform header, bootstrap, metadata, badges, determinism, --check."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import build_notebooks as bn
from lib.notebooks import badges, edits, render
from lib.runtime.platforms import PLATFORMS

ROOT = Path(__file__).resolve().parent.parent
CFG = {"repository": "someone/fork", "branch": "dev", "kaggle_user": "someone",
       "version": "0.1.0"}
SOURCE = ROOT / "notebooks_src" / "fashion_mnist.py"


def rendered(platform):
    return nbformat.reads(render.render(SOURCE, PLATFORMS[platform], CFG), as_version=4)


@pytest.fixture
def project(tmp_path):
    """A copy of what the builder reads, to break on purpose."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "images.toml", tmp_path / "images.toml")
    shutil.copytree(ROOT / "notebooks_src", tmp_path / "notebooks_src")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "lib" / "workloads", tmp_path / "lib" / "workloads")
    return tmp_path


@pytest.mark.parametrize("platform,accelerator,gpu_type", [
    ("colab_t4", "GPU", "T4"), ("colab_tpu", "TPU", "V5E1")])
def test_colab_metadata(platform, accelerator, gpu_type):
    meta = rendered(platform).metadata
    assert meta["accelerator"] == accelerator
    assert meta["colab"] == {"provenance": [], "gpuType": gpu_type}
    assert meta["kernelspec"]["name"] == "python3" and "kaggle" not in meta


def test_kaggle_metadata_and_kernel_push_file():
    meta = rendered("kaggle_p100").metadata
    assert meta["kaggle"]["accelerator"] == "nvidiaTeslaP100"
    assert meta["kaggle"]["isInternetEnabled"] is True and "accelerator" not in meta
    push = json.loads(render.kernel_metadata("fashion_mnist", PLATFORMS["kaggle_p100"], CFG))
    assert push["machine_shape"] == "NvidiaTeslaP100" and push["enable_gpu"] is True
    assert push["id"] == "someone/fashion-mnist-kaggle-p100"
    assert push["code_file"] == "../../fashion_mnist.ipynb"


@pytest.mark.parametrize("platform,shape,gpu", [
    ("kaggle_t4x2", "NvidiaTeslaT4", True), ("kaggle_tpu", "TpuV5E8", False)])
def test_multi_device_kaggle_platforms(platform, shape, gpu):
    push = json.loads(render.kernel_metadata("fashion_mnist", PLATFORMS[platform], CFG))
    assert push["machine_shape"] == shape
    assert (push["enable_gpu"], push["enable_tpu"]) == (gpu, not gpu)
    assert rendered(platform).metadata["kaggle"]["isGpuEnabled"] is gpu


def test_local_notebook_has_no_hosted_metadata():
    meta = rendered("local").metadata
    assert set(meta) == {"kernelspec", "language_info", edits.RECORD}


def test_the_record_names_the_source_platform_and_every_cell_in_order():
    nb = rendered("colab_t4")
    record = nb.metadata[edits.RECORD]
    assert record["source"] == "notebooks_src/fashion_mnist.py" and record["platform"] == "colab_t4"
    assert record["cells"] == [f"{c.id} {edits.cell_hash(c)}" for c in nb.cells]
    # what a user writes counts, what running it adds does not
    cell = next(c for c in nb.cells if c.metadata.get("tags") == ["parameters"])
    ran = nbformat.from_dict({**cell, "execution_count": 3, "metadata": {
        **cell.metadata, "scrolled": True}, "outputs": [nbformat.v4.new_output(
            "stream", text="1\n")]})
    assert edits.cell_hash(ran) == edits.cell_hash(cell)
    assert edits.cell_hash({**cell, "source": cell.source + "\n"}) == edits.cell_hash(cell)
    assert edits.cell_hash({**cell, "source": cell.source + " "}) != edits.cell_hash(cell)
    assert edits.cell_hash({**cell, "metadata": {"tags": []}}) != edits.cell_hash(cell)


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_header_bootstrap_and_parameters(platform):
    nb = rendered(platform)
    header = nb.cells[0]
    assert "notebooks_src/fashion_mnist.py" in header.source
    assert PLATFORMS[platform].title in header.source
    params = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    assert f'PLATFORM = "{platform}"' in nb.cells[params[0]].source
    # The bootstrap follows the parameters (papermill injects its cell between them) and
    # reads PLATFORM there: the platform is written once, so `-p PLATFORM` moves both.
    boot = nb.cells[params[0] + 1]
    # Folded in every front end: the first line is the title Colab's form view shows.
    assert boot.source.startswith("# @title Bootstrap: ")
    assert boot.metadata["jupyter"] == {"source_hidden": True}
    runtime = PLATFORMS[platform].runtime
    assert (boot.metadata.get("cellView") == "form") is (runtime == "colab")
    assert (boot.metadata.get("_kg_hide-input") is True) is (runtime == "kaggle")
    form = {"cellView": "form"} if runtime == "colab" else {}  # Colab: the parameters' form
    assert nb.cells[params[0]].metadata == {"tags": ["parameters"], **form}
    assert all(c.metadata in ({}, {"tags": ["parameters"], **form}) for c in nb.cells
               if c is not boot)
    assert boot.source.endswith("_runtime = bootstrap.start(PLATFORM, _root, _project, _how, "
                                'globals().get("TRACKERS"))')
    # Short to read: it finds or clones the project; the rest is lib/bootstrap.py's `start`.
    assert len(boot.source.splitlines()) <= 60
    assert not any(f"\"{name}\"" in boot.source for name in PLATFORMS)
    assert '{"repository": "someone/fork", "ref": "dev", "version": "0.1.0"}' in boot.source
    # No UPPER_CASE global: the config cell takes every such name as a parameter.
    assert not re.search(r"^[A-Z][A-Z0-9_]* *=", boot.source, re.MULTILINE)
    assert all(c.get("outputs", []) == [] and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code")
    assert nb.nbformat == 4 and nb.nbformat_minor == 5
    nbformat.validate(nb)


def test_badges_point_at_the_configured_fork():
    colab = rendered("colab_t4").cells[0].source
    assert ("https://colab.research.google.com/github/someone/fork/blob/dev/notebooks/colab_t4/"
            "fashion_mnist.ipynb") in colab
    kaggle = rendered("kaggle_p100").cells[0].source
    assert ("https://kaggle.com/kernels/welcome?src=https://github.com/someone/fork/blob/dev/"
            "notebooks/kaggle_p100/fashion_mnist.ipynb") in kaggle
    table = badges.badge_table(["fashion_mnist"], CFG)
    runtimes = [p.runtime for p in PLATFORMS.values()]
    assert table.count("colab-badge.svg") == runtimes.count("colab")
    assert table.count("open-in-kaggle.svg") == runtimes.count("kaggle") >= 3
    head = [p.runtime for title in table.splitlines()[0].split(" | ")[1:]
            for p in PLATFORMS.values() if p.title == title.strip(" |")]
    order = ["colab", "kaggle", "studiolab", "sagemaker", "paperspace", "lightning", "modal",
             "local"]
    assert head == sorted(head, key=order.index), head
    assert head[-1] == "local" and "sagemaker" in head, head


def test_the_other_clouds_badges_open_the_fork():
    """Studio Lab imports the GitHub blob URL; Paperspace's "Run on Gradient" reads github.com
    as console.paperspace.com/github; paid SageMaker has no badge: a link to the file."""
    lab = rendered("studiolab_t4").cells[0].source
    assert ("[![Open In SageMaker Studio Lab](https://studiolab.sagemaker.aws/studiolab.svg)]"
            "(https://studiolab.sagemaker.aws/import/github/someone/fork/blob/dev/notebooks/"
            "studiolab_t4/fashion_mnist.ipynb)") in lab
    gradient = rendered("paperspace_gpu").cells[0].source
    assert ("[![Run on Gradient](https://assets.paperspace.io/img/gradient-badge.svg)]"
            "(https://console.paperspace.com/github/someone/fork/blob/dev/notebooks/"
            "paperspace_gpu/fashion_mnist.ipynb)") in gradient
    paid = rendered("sagemaker_gpu").cells[0].source
    assert paid.startswith("[SageMaker Studio / notebook instance](notebooks/sagemaker_gpu/")
    table = badges.badge_table(["fashion_mnist"], CFG)
    assert table.count("studiolab.svg") == table.count("gradient-badge.svg") == 1


def test_lightning_and_modal_badges_open_the_fork():
    """Lightning: the URL-encoded blob URL as `repo_url`; Modal: the blob URL after
    /notebooks/new/ (modal-projects/training-gym links its notebooks so)."""
    studio = rendered("lightning_studio").cells[0].source
    assert studio.startswith(
        "[![Open In Studio](https://pl-bolts-doc-images.s3.us-east-2.amazonaws.com/app-2/"
        "studio-badge.svg)](https://lightning.ai/new?repo_url=https%3A%2F%2Fgithub.com%2F"
        "someone%2Ffork%2Fblob%2Fdev%2Fnotebooks%2Flightning_studio%2Ffashion_mnist.ipynb)")
    modal = rendered("modal").cells[0].source
    assert modal.startswith(
        "[![Open in Modal](https://modal-cdn.com/open-in-modal.svg)](https://modal.com/"
        "notebooks/new/https://github.com/someone/fork/blob/dev/notebooks/modal/"
        "fashion_mnist.ipynb)")
    for platform in ("lightning_studio", "modal"):
        assert set(rendered(platform).metadata) == {"kernelspec", "language_info", edits.RECORD}
    table = badges.badge_table(["fashion_mnist"], CFG)
    assert table.count("studio-badge.svg") == table.count("open-in-modal.svg") == 1


def test_rendering_is_byte_stable():
    for platform in PLATFORMS.values():
        assert render.render(SOURCE, platform, CFG) == render.render(SOURCE, platform, CFG)


def test_check_is_clean_on_the_committed_tree():
    assert bn.stale_files(ROOT) == []


def test_check_names_stale_missing_and_orphaned_files(project):
    assert bn.stale_files(project) == []
    (project / "notebooks/colab_t4/fashion_mnist.ipynb").unlink()
    stale = project / "notebooks/kaggle_p100/fashion_mnist.ipynb"  # its cells, another kernel
    stale.write_text(stale.read_text().replace('"display_name": "Python 3"', '"display_name": "x"'))
    (project / "notebooks/local/old.ipynb").write_text("{}")
    autosave = project / "notebooks/local/.ipynb_checkpoints/fashion_mnist-checkpoint.ipynb"
    autosave.parent.mkdir()
    autosave.write_text("{}")  # JupyterLab's, once a user opens a notebook: not an orphan
    # the copies a build keeps of a user's notebook (git ignores them): not orphans either
    (project / "notebooks/local/fashion_mnist.edited.ipynb").write_text("{}")
    (project / "notebooks/local/mshnet.executed-2.ipynb").write_text("{}")
    problems = bn.stale_files(project)
    render = ": `python build_notebooks.py` renders it"
    assert f"notebooks/colab_t4/fashion_mnist.ipynb: missing{render}" in problems
    assert f"notebooks/kaggle_p100/fashion_mnist.ipynb: stale{render}" in problems
    assert ("notebooks/local/old.ipynb: not generated from any source: remove it (`rm "
            "notebooks/local/old.ipynb`)") in problems
    assert len(problems) == 3
    # the summary names the command of each kind found, and no other
    assert bn.summary(bn.findings(project)) == (
        "3 generated file(s) to see to: `python build_notebooks.py` renders the 2 stale or "
        "missing; `rm` the 1 not generated from any source")


def test_editing_the_source_makes_check_fail(project):
    src = project / "notebooks_src/fashion_mnist.py"
    src.write_text(src.read_text().replace("EPOCHS = 14", "EPOCHS = 15"))
    problems = bn.stale_files(project)
    assert len([p for p in problems if ": stale: " in p]) == len(PLATFORMS)


def test_check_command_exit_codes():
    ok = subprocess.run([sys.executable, "build_notebooks.py", "--check"], cwd=ROOT,
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_source_without_platform_parameter_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("# %% tags=[\"parameters\"]\nEPOCHS = 1\n")
    with pytest.raises(SystemExit, match="PLATFORM = ..."):
        render.render(bad, PLATFORMS["colab_t4"], CFG)


def test_platforms_as_tested_is_the_image_manifest(project):
    """README's table of hosted images comes from images.toml, the one place pins are written."""
    readme = (project / "README.md").read_text()
    table = readme.split("<!-- images:start -->")[1].split("<!-- images:end -->")[0]
    assert "| Colab TPU | 3.13 | 2.9.0 / 0.24.0 | torch_xla 2.9.0, jax 0.7.2; TPU v5e-1" in table
    manifest = project / "images.toml"
    manifest.write_text(manifest.read_text().replace('torch_xla = "2.8.0"', 'torch_xla = "2.8.1"'))
    assert bn.stale_files(project) == ["README.md: stale: `python build_notebooks.py` renders it"]
    assert "torch_xla 2.8.1; TPU v5e-8" in render.images_table(manifest)


def test_the_table_names_the_notebooks_a_lane_runs_where_it_runs_some(tmp_path):
    """A lane that runs some of a platform's notebooks (images.toml `workloads`, or
    `platform_workloads` for one platform) says which: the table is what the lanes test."""
    manifest = tmp_path / "images.toml"
    manifest.write_text('''
[images.a]
title = "A"
platforms = ["p1", "p2"]
python = "3.12"
accelerators = "none"
source = "s"
read = "2026-11"
platform_workloads = { p1 = ["w1"] }
[images.a.pins]
torch = "2.8.0"
[images.b]
title = "B"
platforms = ["p3"]
python = "3.12"
accelerators = "none"
source = "s"
read = "2026-11"
workloads = ["w1", "w2"]
[images.b.pins]
torch = "2.8.0"
''')
    rows = render.images_table(manifest).splitlines()[2:]
    assert "| `p1` (w1), `p2` |" in rows[0] and "| `p3` (w1, w2) |" in rows[1]


def test_the_retired_p100_is_said_beside_its_badge_and_in_its_notebook():
    head = badges.badge_table(["fashion_mnist"], CFG).splitlines()[0]
    assert "| Kaggle P100 (retired on Kaggle: runs on a T4) |" in head
    assert "Tesla P100; retired on Kaggle: runs on a T4" in rendered("kaggle_p100").cells[0].source
    assert "retired" not in rendered("kaggle_t4x2").cells[0].source
