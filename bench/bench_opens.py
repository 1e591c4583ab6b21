"""Data where it is fast: files opened per epoch, and epoch time on the Drive stand-in / local.

    python -m bench.bench_opens            # every workload, before and after (~3 minutes)
    python -m bench.bench_opens --quick    # fewer epochs

For each workload's training loader, on its offline sample, the epochs after the first are
run twice: with what the loader reads each epoch on local disk, and on the Drive stand-in
(tests/drive_fuse.py: FUSE, 20 ms a metadata operation, 32 MB/s, the published Colab values
it cites). Opens are counted with `sys.addaudithook` on "open" in the loader's process and
its two workers (`bench.opens`; h5py's C-level opens raise the same event here).

- before: mamba_spike reads tonic's one-HDF5-file-per-recording cache (the layout before
  `lib.data.packed`); mshnet reads each image and mask file every epoch.
- after: mamba_spike reads the packed shards through a memory map; mshnet decodes the bytes
  read once when the dataset was made. fashion_mnist and optimizer_study already kept their
  images in memory (`DeviceLoader`): one row each, the same before and after.

Budget (issue 24): <= 16 opens per epoch after the first; Drive epoch <= 1.25 x local.
The epoch here is the loader alone, no model step: the ratio is the data side's worst case
(a training step per batch would add the same time to both and shrink it).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from bench import opens
from bench.common import captured, markdown_table, median
from lib.data import cifar as cifar_data
from lib.data import events, fashion, irstd
from lib.data.common import make_loader
from lib.data.on_device import Augment, DeviceLoader, images_and_labels
from tests.drive_fuse import mounted

OPENS_BUDGET, RATIO_BUDGET = 16, 1.25
WORKERS = 2  # Colab's and Kaggle's DataLoader workers (lib/runtime/platforms.py)


class _Choice:  # a GPU notebook's loader settings (lib.runtime.device.DeviceChoice)
    num_workers, pin_memory, worker_start = WORKERS, False, None


class _ReadEveryEpoch(irstd.IRSTDDataset):
    """IRSTD as it was: each image and mask read from its file on every access."""

    def __getitem__(self, i):
        image, mask = irstd.load_pair(self.images[i], self.masks[i], self.mask_threshold)
        image, mask = (irstd.train_transform(image, mask, self.base_size, self.crop_size)
                       if self.augment else irstd.eval_transform(image, mask, self.base_size))
        return irstd.to_tensors(image, mask)


def _fashion(raw: Path, place: Path, before: bool):
    shutil.copytree(raw / "sample", place / "sample", dirs_exist_ok=True)
    train, _, _ = fashion.build_datasets(place, sample=True)
    return DeviceLoader(*images_and_labels(train), 64, torch.device("cpu"), train=True,
                        seed=0, mean=(fashion.MEAN,), std=(fashion.STD,))


def _study(raw: Path, place: Path, before: bool):
    shutil.copytree(raw / "sample", place / "sample", dirs_exist_ok=True)
    train, _, _ = cifar_data.build_datasets("cifar10", place, sample=True)
    mean, std = cifar_data.STATS["cifar10"]
    return DeviceLoader(*images_and_labels(train), 64, torch.device("cpu"), train=True,
                        seed=0, mean=mean, std=std, augment=Augment(padding=4, flip=True))


def _mamba_spike(raw: Path, place: Path, before: bool):
    """Recordings on scratch (`raw`); the frame cache, what each epoch reads, at `place`."""
    import tonic

    train, _, _ = events.build_datasets("nmnist", raw, sample=True, n_time_bins=300,
                                        cache_dir=place / "cache")
    if before:
        train = tonic.DiskCachedDataset(train.dataset, cache_path=str(place / "hdf5"),
                                        transform=events.FramesToTensor(), target_transform=int)
        for i in range(len(train)):  # the first epoch: frame and write one file each
            train[i]
    else:
        events.warm_cache(train, progress=False)
    return make_loader(train, 16, _Choice(), train=True, seed=0)


def _mshnet(raw: Path, place: Path, before: bool):
    src = irstd.find_layout(raw / "sample" / "IRSTD-sample").root
    shutil.copytree(src, place / "IRSTD-sample", dirs_exist_ok=True)
    layout = irstd.find_layout(place / "IRSTD-sample")
    cls = _ReadEveryEpoch if before else irstd.IRSTDDataset
    return make_loader(cls(layout, "train", 64, 64), 4, _Choice(), train=True, seed=0)


def _prepare_raw(raw: Path) -> None:
    """Every workload's sample written once on local disk (scratch)."""
    from lib.data.irstd_sample import write_irstd_sample

    fashion.write_sample(raw / "sample")
    cifar_data.build_datasets("cifar10", raw, sample=True)
    events.build_datasets("nmnist", raw, sample=True, n_time_bins=300)
    write_irstd_sample(raw / "sample" / "IRSTD-sample")


WORKLOADS = {"fashion_mnist": (_fashion, ("after",)), "optimizer_study": (_study, ("after",)),
             "mamba_spike": (_mamba_spike, ("before", "after")),
             "mshnet": (_mshnet, ("before", "after"))}


def _epochs(loader, epochs: int) -> tuple[list[int], list[float]]:
    """Opens and seconds of each epoch; the first (worker start, first reads) included."""
    counts, seconds = [], []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        with opens.counting(h5py_too=True) as count:
            start = time.perf_counter()
            for _ in loader:
                pass
            seconds.append(time.perf_counter() - start)
        counts.append(count.n)
    return counts, seconds


def run(workloads=tuple(WORKLOADS), epochs: int = 4, latency_s: float = 0.020,
        bandwidth: float = 32e6) -> list[dict]:
    opens.install(h5py_too=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with captured():
            _prepare_raw(tmp / "raw")
        for name in workloads:
            build, variants = WORKLOADS[name]
            for variant in variants:
                result = {}
                for where in ("local", "drive"):
                    base = tmp / f"{name}-{variant}-{where}"
                    if where == "local":
                        ctx = _local(base)
                    else:
                        ctx = mounted(base / "backing", base / "mnt", latency_s, bandwidth)
                    with ctx as m, captured():
                        loader = build(tmp / "raw", m.path, variant == "before")
                        result[where] = _epochs(loader, epochs)
                        del loader  # its workers stop before the mount goes
                (counts, local_s), (_, drive_s) = result["local"], result["drive"]
                later_local, later_drive = median(local_s[1:]), median(drive_s[1:])
                rows.append({
                    "workload": name, "variant": variant if len(variants) > 1 else "same",
                    "first_opens": counts[0], "opens": max(counts[1:]),
                    "drive_opens": max(result["drive"][0][1:]),
                    "local_s": later_local, "drive_s": later_drive,
                    "ratio": later_drive / later_local,
                    "first_drive_s": drive_s[0], "first_local_s": local_s[0]})
    for row in rows:
        row["meets"] = ("yes" if row["opens"] <= OPENS_BUDGET and row["ratio"] <= RATIO_BUDGET
                        else "no")
    return rows


def formats(repeats: int = 5) -> list[dict]:
    """Per-record read time and opens of the candidate layouts, on the N-MNIST sample's
    sparse frames (300 bins): the packed `.npy` memory map (chosen), one HDF5 file holding
    the same concatenated array and index (h5py slices), and tonic's one file per record."""
    import h5py
    import numpy as np
    import tonic

    from lib.data import packed

    opens.install(h5py_too=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, captured():
        tmp = Path(tmp)
        train, _, _ = events.build_datasets("nmnist", tmp, sample=True, n_time_bins=300)
        events.warm_cache(train, progress=False)
        records = [train.frames(i) for i in range(len(train))]
        data = np.concatenate([r for r, _ in records])
        ends = np.cumsum([r.size for r, _ in records])
        with h5py.File(tmp / "one.h5", "w") as f:
            f["data"], f["ends"] = data, ends
        per_file = tonic.DiskCachedDataset(train.dataset, cache_path=str(tmp / "per_file"))
        for i in range(len(train)):
            per_file[i]

        def memmap_reader():
            reader = packed.PackReader(Path(train.cache_path))
            return lambda i: reader.get(i)[0]

        def hdf5_reader():
            f = h5py.File(tmp / "one.h5", "r")
            ds, index = f["data"], f["ends"][()]
            return lambda i: ds[(index[i - 1] if i else 0):index[i]]

        def per_file_reader():
            return lambda i: per_file[i][0]

        for name, make in (("npy shards, memory map (chosen)", memmap_reader),
                           ("one HDF5 file, h5py slice", hdf5_reader),
                           ("one HDF5 file per record (tonic)", per_file_reader)):
            with opens.counting(h5py_too=True) as count:
                read = make()
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    for i in range(len(train)):
                        read(i)
                    times.append((time.perf_counter() - start) / len(train))
            rows.append({"layout": name, "us": median(times) * 1e6,
                         "opens": count.n / repeats, "records": len(train)})
    return rows


FORMAT_COLUMNS = [("layout", "layout"), ("us", "µs per record"),
                  ("opens", "opens per pass over the records")]


class _local:
    """The local-disk counterpart of `mounted`: a plain folder."""

    def __init__(self, base: Path):
        self.path = base / "local"

    def __enter__(self):
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc):
        return False


COLUMNS = [("workload", "workload"), ("variant", "layout"),
           ("first_opens", "opens, epoch 1"), ("opens", "opens/epoch after (local)"),
           ("drive_opens", "opens/epoch after (Drive)"), ("local_s", "epoch s, local"),
           ("drive_s", "epoch s, Drive stand-in"), ("ratio", "Drive / local"),
           ("first_drive_s", "epoch 1 s, Drive"), ("meets", "budget met")]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(markdown_table(formats(2 if args.quick else 5), FORMAT_COLUMNS))
    print()
    rows = run(args.only, epochs=3 if args.quick else 5)
    print(markdown_table(rows, COLUMNS))


if __name__ == "__main__":
    main()
