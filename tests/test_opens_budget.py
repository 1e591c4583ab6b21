"""The budget of issue 24, counted (not timed): after the first epoch, each workload's
training loader opens at most 16 files per epoch, its two workers included."""

import pytest
import torch

from bench import bench_opens, opens


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raw")
    bench_opens._prepare_raw(folder)
    return folder


def _opens_after_the_first_epoch(raw, tmp_path, name, before=False):
    build, _ = bench_opens.WORKLOADS[name]
    loader = build(raw, tmp_path, before)
    counts, _ = bench_opens._epochs(loader, 3)
    return counts


@pytest.mark.parametrize("name", list(bench_opens.WORKLOADS))
def test_each_workload_opens_at_most_16_files_an_epoch_after_the_first(raw, tmp_path, name):
    torch.set_num_threads(1)
    counts = _opens_after_the_first_epoch(raw, tmp_path, name)
    assert max(counts[1:]) <= bench_opens.OPENS_BUDGET, counts


@pytest.mark.parametrize("name", ["mamba_spike", "mshnet"])
def test_the_old_layouts_open_a_file_per_item_every_epoch(raw, tmp_path, name):
    """The count sees what the budget is about: one file per recording (HDF5, opened in C)
    or per image and mask, every epoch."""
    opens.install(h5py_too=True)
    counts = _opens_after_the_first_epoch(raw, tmp_path, name, before=True)
    assert min(counts[1:]) >= 32, counts
