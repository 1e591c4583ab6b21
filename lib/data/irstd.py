"""IRSTD-1k and NUDT-SIRST in the folder layouts they are published in.

Accepted layouts (searched in DATA_DIR and up to two folder levels below it, so a Kaggle
input or a Drive folder holding the unpacked archive works without renaming):
  images/ + masks/ (official MSHNet / DNANet) or IRSTD1k_Img/ + IRSTD1k_Label/ (raw IRSTD-1k),
  split files trainval.txt|train.txt and test.txt, at the top or in 50_50/ (NUDT-SIRST) or
  img_idx/ (train_*.txt, test_*.txt); one name per line, without extension.
Masks are binarised as ``pixel > MASK_THRESHOLD`` (some IRSTD-1k masks are not strictly 0/255).
Training follows the official augmentation with a static crop; evaluation resizes to the base
size. Every random draw uses torch's global RNG (the foundation seeds it per sample).
"""

from __future__ import annotations

import io
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchvision.transforms.functional as TF
from PIL import Image, ImageFilter, ImageOps
from torch.utils.data import Dataset

from lib.base.errors import DataError, DataNotFound
from lib.data.catalog import IRSTD_PAPER_RESULTS as PAPER_RESULTS

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MASK_THRESHOLD = 127  # a mask pixel is target when its grey value is > 127 (of 255)
IMAGE_DIRS = ("images", "IRSTD1k_Img")
MASK_DIRS = ("masks", "IRSTD1k_Label")
TRAIN_SPLITS = ("trainval.txt", "train.txt", "50_50/trainval.txt", "50_50/train.txt",
                "img_idx/train_*.txt")
TEST_SPLITS = ("test.txt", "50_50/test.txt", "img_idx/test_*.txt")
SAMPLE_FOLDER = "sample"  # DATA_DIR/sample/ holds the offline samples of every workload
EXTENSIONS = (".png", ".bmp", ".jpg", ".jpeg", ".tif", ".tiff")


@dataclass(frozen=True)
class IRSTDLayout:
    """Where one dataset's parts are; ``name`` is "IRSTD-1k", "NUDT-SIRST" or None (unknown)."""

    root: Path
    images: Path
    masks: Path
    train_split: Path
    test_split: Path
    name: str | None


def _first_dir(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_dir()), None)


def _candidates(data_dir: Path):
    """DATA_DIR, then its sub-folders, then theirs; lazily, so the search stops at the first hit.

    A ``sample/`` folder is skipped: that is where the offline samples are written, and real
    data must never be silently replaced by them (point DATA_DIR into it to use it on purpose).
    """
    yield data_dir
    level1 = sorted(p for p in data_dir.iterdir() if p.is_dir() and p.name != SAMPLE_FOLDER)
    yield from level1
    for p in level1:
        yield from sorted(q for q in p.iterdir() if q.is_dir())


def _find_split(root: Path, patterns: tuple[str, ...], which: str) -> Path:
    for pattern in patterns:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
    raise DataNotFound(
        f"no {which} split file in {str(root)!r}: expected one of {', '.join(patterns)} "
        "(one image name per line, without extension); add it or point DATA_DIR elsewhere."
    )


def _guess_name(root: Path, images: Path) -> str | None:
    text = "/".join(root.parts[-3:]).lower()  # e.g. input/nudt-sirst/NUDT-SIRST
    if "nudt" in text:
        return "NUDT-SIRST"
    if images.name == "IRSTD1k_Img" or re.search(r"irstd[-_]?1k", text):
        return "IRSTD-1k"
    return None


def _layout_in(folder: Path) -> IRSTDLayout | None:
    """The layout whose image folder is directly in ``folder``, None if it has none."""
    images = _first_dir(folder, IMAGE_DIRS)
    if images is None:
        return None
    masks = _first_dir(folder, MASK_DIRS)
    if masks is None:
        raise DataNotFound(
            f"{str(folder)!r} has {images.name}/ but no mask folder: expected one of "
            f"{', '.join(d + '/' for d in MASK_DIRS)} beside it; copy the masks there."
        )
    train = _find_split(folder, TRAIN_SPLITS, "training")
    test = _find_split(folder, TEST_SPLITS, "test")
    return IRSTDLayout(folder, images, masks, train, test, _guess_name(folder, images))


def find_layout(data_dir: str | Path, prefer: str | None = None) -> IRSTDLayout:
    """Locate an accepted layout in ``data_dir`` (see the module docstring), or raise one error.

    With ``prefer`` ("IRSTD-1k" / "NUDT-SIRST") a layout of that name wins over one found
    earlier (e.g. both datasets attached on Kaggle); otherwise the first found is returned.
    """
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise DataNotFound(
            f"IRSTD DATA_DIR {str(data_dir)!r} is not a folder. Expected the dataset folder "
            "(images/ + masks/ + trainval.txt + test.txt, or IRSTD1k_Img/ + IRSTD1k_Label/): "
            "on Colab a folder on Drive (/content/drive/MyDrive/...), on Kaggle an attached "
            "dataset under /kaggle/input/...; or set SAMPLE_DATA = True."
        )
    first = None
    for folder in _candidates(data_dir):
        layout = _layout_in(folder)
        if layout is not None and (prefer is None or layout.name == prefer):
            return layout
        first = first or layout
    if first is not None:
        return first
    found = sorted(p.name for p in data_dir.iterdir())[:8]
    raise DataNotFound(
        f"no image folder in {str(data_dir)!r} or two levels below it: expected "
        f"{' or '.join(d + '/' for d in IMAGE_DIRS)} (found {found}); point DATA_DIR at the "
        "unpacked IRSTD-1k or NUDT-SIRST folder."
    )


def read_split(path: Path) -> list[str]:
    """Names listed in a split file (blank lines skipped, a trailing image extension dropped)."""
    names = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    names = [n[: -len(Path(n).suffix)] if Path(n).suffix.lower() in EXTENSIONS else n
             for n in names]
    if not names:
        raise DataError(
            f"split file {str(path)!r} lists no images; expected one name per line (without "
            "extension), e.g. XDU0. Fill it or remove it so another split file is used."
        )
    return names


def _index(folder: Path) -> dict[str, Path]:
    """name (stem) -> file, one directory listing instead of a stat per name (slow on Drive)."""
    rank = {ext: i for i, ext in enumerate(EXTENSIONS)}  # a .png wins over a .jpg of the same name
    files: dict[str, Path] = {}
    for p in folder.iterdir():
        r = rank.get(p.suffix.lower())
        if r is not None and (p.stem not in files or r < rank[files[p.stem].suffix.lower()]):
            files[p.stem] = p
    return files


def resolve_files(names: list[str], folder: Path, split: Path, kind: str) -> list[Path]:
    """The file of each name in ``folder``; one error naming the missing ones otherwise."""
    index = _index(folder)
    missing = [n for n in names if n not in index]
    if missing:
        raise DataError(
            f"{len(missing)} name(s) in {str(split)!r} have no {kind} in {str(folder)!r}, e.g. "
            f"{missing[:3]} (looked for <name>{'|'.join(EXTENSIONS)}); add the files or remove "
            "the names from the split file."
        )
    return [index[n] for n in names]


def _size_error(image_path: Path, image_size, mask_path: Path, mask_size) -> DataError:
    return DataError(
        f"image {str(image_path)!r} is {image_size[0]}x{image_size[1]} but its mask "
        f"{str(mask_path)!r} is {mask_size[0]}x{mask_size[1]}; a mask must have its "
        "image's size: replace the mask or drop the name from the split file."
    )


def read_files(paths: list[Path], threads: int = 16) -> list[bytes]:
    """The bytes of every file, `threads` reads at a time (a Drive folder answers slowly per
    file, so the round trips overlap)."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(Path.read_bytes, paths))


def load_pair(image_path: Path, mask_path: Path, threshold: int = MASK_THRESHOLD,
              image_bytes: bytes | None = None, mask_bytes: bytes | None = None):
    """(RGB image, binary mask as an 'L' image of 0/255); one error when the sizes differ.
    Decoded from `image_bytes` / `mask_bytes` when given (the paths then only name them)."""
    image = Image.open(io.BytesIO(image_bytes) if image_bytes is not None else image_path)
    mask = Image.open(io.BytesIO(mask_bytes) if mask_bytes is not None else mask_path)
    image, mask = image.convert("RGB"), mask.convert("L")
    if image.size != mask.size:
        raise _size_error(image_path, image.size, mask_path, mask.size)
    binary = (np.asarray(mask) > threshold).astype(np.uint8) * 255
    return image, Image.fromarray(binary)


def _sizes(pair: tuple[bytes, bytes]) -> tuple:
    with Image.open(io.BytesIO(pair[0])) as image, Image.open(io.BytesIO(pair[1])) as mask:
        return image.size, mask.size  # headers only


def _rand_int(low: int, high: int) -> int:
    """Uniform integer in [low, high] from torch's global RNG."""
    return int(torch.randint(low, high + 1, ()))


def train_transform(image: Image.Image, mask: Image.Image, base_size: int, crop_size: int):
    """Official training augmentation; output crop_size x crop_size for any input size.

    Flip p=0.5; longer side resized to U{base/2 .. 2 base} keeping the aspect ratio (bilinear
    image, nearest mask); zero-pad right/bottom up to the crop; random crop; Gaussian blur of
    radius U[0, 1) with p=0.5 on the image.
    """
    if torch.rand(()) < 0.5:
        image, mask = ImageOps.mirror(image), ImageOps.mirror(mask)
    long_side = _rand_int(int(base_size * 0.5), int(base_size * 2.0))
    w, h = image.size
    if h > w:
        size = (int(w * long_side / h + 0.5), long_side)
    else:
        size = (long_side, int(h * long_side / w + 0.5))
    image, mask = image.resize(size, Image.BILINEAR), mask.resize(size, Image.NEAREST)
    pad = (0, 0, max(crop_size - size[0], 0), max(crop_size - size[1], 0))
    image, mask = ImageOps.expand(image, pad, fill=0), ImageOps.expand(mask, pad, fill=0)
    x = _rand_int(0, image.size[0] - crop_size)
    y = _rand_int(0, image.size[1] - crop_size)
    box = (x, y, x + crop_size, y + crop_size)
    image, mask = image.crop(box), mask.crop(box)
    if torch.rand(()) < 0.5:
        image = image.filter(ImageFilter.GaussianBlur(radius=float(torch.rand(()))))
    return image, mask


def eval_transform(image: Image.Image, mask: Image.Image, base_size: int):
    """Resize to base_size x base_size (bilinear image, nearest mask), as the official test."""
    size = (base_size, base_size)
    return image.resize(size, Image.BILINEAR), mask.resize(size, Image.NEAREST)


def to_tensors(image: Image.Image, mask: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet-normalised (3, H, W) float image and (1, H, W) float mask of 0/1."""
    x = TF.normalize(TF.to_tensor(image), IMAGENET_MEAN, IMAGENET_STD)
    y = torch.from_numpy(np.asarray(mask) > 127).float()[None]
    return x, y


def denormalise(x: torch.Tensor) -> torch.Tensor:
    """Undo the ImageNet normalisation of (..., 3, H, W) images; values clamped to [0, 1]."""
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(3, 1, 1)
    return (x * std + mean).clamp(0, 1)


def overlay(image: torch.Tensor, target: torch.Tensor, logit: torch.Tensor) -> np.ndarray:
    """(H, W, 3) RGB in [0, 1] for plotting: the grey image, ground truth in green, the
    prediction (logit > 0) in red, both in yellow. Inputs: (3, H, W) normalised, (1, H, W) x2."""
    grey = denormalise(image.detach().cpu().float()).mean(0).numpy()
    rgb = np.repeat(0.7 * grey[..., None], 3, axis=-1)
    gt = target.detach().cpu()[0].numpy() > 0.5
    pred = logit.detach().cpu().float()[0].numpy() > 0
    rgb[gt | pred] = 0
    rgb[..., 1][gt] = 1.0
    rgb[..., 0][pred] = 1.0
    return rgb


class IRSTDDataset(Dataset):
    """(image (3, S, S) normalised, mask (1, S, S) of 0/1) for one split of a layout.

    S = crop_size with the training augmentation, base_size otherwise (static for XLA).
    Names are checked against the folders here; sizes when a sample is read. Every image and
    mask is read from its folder once, here, and kept in memory as its encoded bytes (IRSTD-1k:
    ~2000 files, ~0.1 GB): epochs decode from memory and open no file, and loader workers
    inherit the bytes. A Drive folder is thus read once per session, not once per epoch.
    """

    def __init__(self, layout: IRSTDLayout, split: str, base_size: int = 256,
                 crop_size: int = 256, augment: bool | None = None,
                 mask_threshold: int = MASK_THRESHOLD) -> None:
        if split not in ("train", "test"):
            raise DataError(f"split={split!r}; expected 'train' or 'test'")
        self.split_file = layout.train_split if split == "train" else layout.test_split
        self.names = read_split(self.split_file)
        self.images = resolve_files(self.names, layout.images, self.split_file, "image")
        self.masks = resolve_files(self.names, layout.masks, self.split_file, "mask")
        self.base_size, self.crop_size = base_size, crop_size
        self.augment = split == "train" if augment is None else augment
        self.mask_threshold = mask_threshold
        self.image_bytes = read_files(self.images)
        self.mask_bytes = read_files(self.masks)

    def __len__(self) -> int:
        return len(self.names)

    def check_sizes(self) -> None:
        """Raise the size-mismatch error of the first pair whose image and mask sizes differ.

        Reads only the headers (of the bytes in memory), so a bad pair fails here with one
        message instead of later inside a loader worker.
        """
        pairs = zip(self.image_bytes, self.mask_bytes, strict=True)
        for image, mask, (a, b) in zip(self.images, self.masks, map(_sizes, pairs),
                                       strict=True):
            if a != b:
                raise _size_error(image, a, mask, b)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = load_pair(self.images[i], self.masks[i], self.mask_threshold,
                                self.image_bytes[i], self.mask_bytes[i])
        if self.augment:
            image, mask = train_transform(image, mask, self.base_size, self.crop_size)
        else:
            image, mask = eval_transform(image, mask, self.base_size)
        return to_tensors(image, mask)


def _check_size(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 16 or value % 16:
        raise DataError(
            f"{name}={value!r}; expected a positive multiple of 16 (MSHNet pools four times), "
            "e.g. 256 as the paper."
        )


def build_datasets(data_dir: str | Path, sample: bool, base_size: int = 256,
                         crop_size: int = 256, dataset: str | None = None):
    """(train_ds, test_ds, info) for an IRSTD folder, or for the sample written first.

    With ``sample`` the sample is written (once) to DATA_DIR/sample/IRSTD-sample and read by
    the same loader. ``dataset`` ("IRSTD-1k" / "NUDT-SIRST") names the data: a folder of that
    name is preferred, one recognised as the other dataset is an error, and an unrecognised one
    takes the name. The name picks the paper row in ``info["paper"]`` (None when unknown).
    """
    from lib.data.irstd_sample import write_irstd_sample

    _check_size("base_size", base_size)
    _check_size("crop_size", crop_size)
    if dataset is not None and dataset not in PAPER_RESULTS:
        raise DataError(f"dataset={dataset!r}; expected one of {sorted(PAPER_RESULTS)} or None")
    root = Path(data_dir) / SAMPLE_FOLDER / "IRSTD-sample" if sample else data_dir
    layout = find_layout(write_irstd_sample(root) if sample else root, prefer=dataset)
    if dataset is not None and layout.name not in (None, dataset):
        raise DataError(
            f"DATASET={dataset!r} but the dataset found in DATA_DIR, {str(layout.root)!r}, is "
            f"{layout.name}; set DATASET = {layout.name!r} or point DATA_DIR at the {dataset} "
            "folder."
        )
    train = IRSTDDataset(layout, "train", base_size, crop_size)
    test = IRSTDDataset(layout, "test", base_size, crop_size)
    name = dataset or layout.name or ("sample" if sample else "unknown")
    info = {
        "dataset": name, "root": str(layout.root),
        "layout": f"{layout.images.name}/ + {layout.masks.name}/",
        "train_split": str(layout.train_split), "test_split": str(layout.test_split),
        "train_size": len(train), "test_size": len(test), "base_size": base_size,
        "crop_size": crop_size, "mask_threshold": MASK_THRESHOLD,
        "paper": PAPER_RESULTS.get(name),
    }
    return train, test, info
