"""Offline samples carry their generator's version: one left by an older generator on a user's
disk (DATA_DIR/sample survives updates) is written again, a current one is trusted."""

import pytest

from lib.data import events_sample, fashion, samples
from lib.data.cifar_sample import write_cifar_sample
from lib.data.irstd_sample import write_irstd_sample

WRITERS = {  # small samples, each in its real layout
    "fashion": lambda root: fashion.write_sample(root, n_train=20, n_test=10),
    "cifar": lambda root: write_cifar_sample(root, "cifar10", train_per_class=1,
                                             test_per_class=1),
    "nmnist": lambda root: events_sample.write_nmnist_sample(root, n_train=1, n_test=1),
    "dvsgesture": lambda root: events_sample.write_dvsgesture_sample(root, 1, 1),
    "irstd": lambda root: write_irstd_sample(root, n_train=2, n_test=1, size=32),
}


def _contents(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".synthetic-sample")}


@pytest.mark.parametrize("name", WRITERS)
def test_a_sample_of_an_older_generator_is_written_again(name, tmp_path):
    WRITERS[name](tmp_path)
    written = _contents(tmp_path)
    (marker,) = tmp_path.rglob(".synthetic-sample-v*")
    family = "events" if name in ("nmnist", "dvsgesture") else name
    assert marker.name == samples.marker(family)
    for path in written:  # what an older generator left
        path.write_bytes(b"old")
    WRITERS[name](tmp_path)  # the marker is current: the files are trusted as they are
    assert set(_contents(tmp_path).values()) == {b"old"}
    marker.rename(marker.with_name(".synthetic-sample-v1"))
    WRITERS[name](tmp_path)
    assert _contents(tmp_path) == written
    marker.unlink()  # no marker at all: a sample written before markers existed
    WRITERS[name](tmp_path)
    assert _contents(tmp_path) == written and marker.exists()


@pytest.mark.parametrize("writer,reader", [("cifar_sample", "cifar"),
                                           ("events_sample", "events"),
                                           ("irstd_sample", "irstd")])
def test_sample_writers_never_import_their_readers(writer, reader):
    """Imports go one way: a reader imports its writer (to write the sample), a writer imports
    neither its reader nor any module that imports it (shared names are in lib.data.classes)."""
    import ast
    from pathlib import Path

    import lib.data

    source = (Path(lib.data.__file__).parent / f"{writer}.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    assert f"lib.data.{reader}" not in imported, sorted(imported)
    assert not any(m.startswith("lib.data.") and m.split(".")[2] in ("cifar", "events", "irstd")
                   for m in imported), sorted(imported)
