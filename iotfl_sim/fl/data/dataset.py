"""The ``Dataset`` every loader returns, its error, where each dataset's files are expected, and how loaded
arrays become a normalized ``Dataset``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from iotfl_sim.fl.data.images import PALETTE, Images, PaletteImages, palette

ENV_VAR = "IOTFL_DATA"
# Where each dataset's files are expected, relative to the root (first entry is the documented one).
SUBDIRS = {
    "mnist": ("mnist", "MNIST/raw", "."),
    "fashion_mnist": ("fashion_mnist", "fashion-mnist", "FashionMNIST/raw", "."),
    "cifar10": ("cifar-10-batches-py", "."),
    "cifar100": ("cifar-100-python", "."),
    "femnist": ("femnist", "."),
    "har": ("uci_har", "."),
}
HAR_NPZ = "har_inertial_signals_float32.npz"
HAR_SIGNALS = tuple(
    f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in ("x", "y", "z")
)


class DatasetError(Exception):
    """A dataset could not be loaded; the message says which file and how to fix it."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test pair of normalized tensors plus, where the data has them, natural owners.

    ``notes`` says how the loaded copy departs from (or matches) the official files, in one line:
    for CIFAR-10, how many of the five train batches were found.
    """

    name: str
    x_train: Images  # normalized float32 images (PaletteImages: indexed as a tensor is)
    y_train: torch.Tensor
    x_test: Images
    y_test: torch.Tensor
    num_classes: int
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None
    notes: str = ""

    @property
    def in_channels(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        return int(self.x_train.shape[2]), int(self.x_train.shape[3])

    def __repr__(self) -> str:
        groups = "none" if self.groups_train is None else str(len(np.unique(self.groups_train)))
        return (
            f"Dataset({self.name!r}, train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
            f"classes={self.num_classes}, train_groups={groups})"
        )


def hint(name: str) -> str:
    return {
        "mnist": "mnist/train-images-idx3-ubyte.gz",
        "fashion_mnist": "fashion_mnist/train-images-idx3-ubyte.gz",
        "cifar10": "cifar-10-batches-py/data_batch_1 ... data_batch_5 and test_batch",
        "cifar100": "cifar-100-python/train",
        "femnist": "femnist/train/*.json",
        "har": f"uci_har/{HAR_NPZ} (or 'uci_har/UCI HAR Dataset/train/Inertial Signals/*.txt')",
    }[name]


def fix(name: str, root: Path) -> str:
    return f"set data.root in the scenario or {ENV_VAR} to the folder holding {hint(name)} (now {root})"


# ---------------------------------------------------------------------------------------------
# normalization and packaging


def aligned_float32(x: np.ndarray) -> np.ndarray:
    """A float32 copy of ``x`` in memory PyTorch allocated (64-byte aligned), which the tensors then share.

    Training reads batches as views of these arrays, and oneDNN's kernels may round differently with the
    alignment of their input: memory numpy allocated starts wherever the allocator's history put it (16-byte
    aligned), so the same data could train to other bits after another allocation order (found when a
    cached digits split, read back from disk, landed at another address and changed AdapterFL's accuracy)."""
    out = torch.empty(x.shape, dtype=torch.float32).numpy()
    np.copyto(out, x, casting="same_kind")
    return out


def channel_statistics(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The train split's per-channel mean and std as float32 ``(1, C, 1, 1)`` arrays, from the float32 values
    (std 1 where a channel is constant). Raw uint8 pixels need no /255 first: standardizing removes any
    constant scale. Bytes and float32 are read as they are (both widen to float64 exactly, so the sums are the
    same), other dtypes rounded to float32 first: no float32 copy of a byte split (MNIST's: 188 MB)."""
    xtr = x_train if x_train.dtype in (np.uint8, np.float32) else aligned_float32(x_train)
    n, c = xtr.shape[:2]
    per_sample = int(np.prod(xtr.shape[2:]))
    # Chunked float64 sums keep the statistics exact without a float64 copy of the whole split.
    chunk = max(1, 4_000_000 // max(1, c * per_sample))
    total = np.zeros(c)
    for i in range(0, n, chunk):
        total += xtr[i : i + chunk].sum(axis=(0, 2, 3), dtype=np.float64)
    mean = total / (n * per_sample)
    sq = np.zeros(c)
    buf = np.empty((min(chunk, n), *xtr.shape[1:]))  # one buffer for every chunk: see below
    for i in range(0, n, chunk):
        d = buf[: len(xtr[i : i + chunk])]
        np.subtract(xtr[i : i + chunk], mean[None, :, None, None], out=d, dtype=np.float64)
        sq += np.einsum("nchw,nchw->c", d, d)
    # (A new pair of 32 MB temporaries per chunk came from the heap after the first pair was freed, glibc having
    # raised its mmap threshold to their size, and the heap kept those ~80 MB for the rest of the run.)
    del buf
    std = np.sqrt(sq / (n * per_sample))
    std[std == 0] = 1.0
    return mean.astype(np.float32)[None, :, None, None], std.astype(np.float32)[None, :, None, None]


def normalized(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> Images:
    """``(x - mean) / std`` in float32: as ``PaletteImages`` where ``x`` takes at most 256 values (a quarter of
    the memory, the same bits batch by batch), else as a float32 tensor."""
    coded = palette(x)
    return _standardized(x, mean, std) if coded is None else _palette_images(*coded, mean, std)


def _standardized(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    out = aligned_float32(x)
    out -= mean
    out /= std
    return torch.from_numpy(out)


def _palette_images(codes: np.ndarray, table: np.ndarray, mean: np.ndarray, std: np.ndarray) -> PaletteImages:
    held = torch.empty(codes.shape, dtype=torch.uint8)  # PyTorch's aligned memory, as aligned_float32's
    held.numpy()[...] = codes
    return PaletteImages(held, torch.from_numpy(table), torch.from_numpy(mean.ravel()), torch.from_numpy(std.ravel()))


SPLITS = ("train", "test")


def encode(x_train: np.ndarray, x_test: np.ndarray) -> dict[str, np.ndarray]:
    """What ``package`` derives from the raw images, as arrays a disk cache can keep so a later process skips
    the work (FEMNIST: 0.2 s a run) and reads a quarter of the bytes: the train split's channel statistics
    (``mean``, ``std``) and, per split, its palette (``codes_<split>``, ``table_<split>``) where one fits, else
    its raw images (``x_<split>``). ``from_encoded`` turns them into exactly the images ``package`` makes."""
    mean, std = channel_statistics(x_train)
    out = {"mean": mean, "std": std}
    for split, x in zip(SPLITS, (x_train, x_test), strict=True):
        coded = palette(x)
        if coded is None:
            out[f"x_{split}"] = x
        else:
            out[f"codes_{split}"], out[f"table_{split}"] = coded
    return out


def valid_encoding(arrays: dict[str, np.ndarray], shape: tuple[int, ...], others: set[str]) -> bool:
    """Whether ``arrays`` (read back from a cache) holds exactly ``encode``'s fields for images of per-sample
    ``shape`` plus the keys ``others``, of the dtypes ``from_encoded`` needs: statistics finite with std
    positive, each split either codes (bytes into a full palette) or float32 images."""
    coded = {s: f"codes_{s}" in arrays for s in SPLITS}
    keys = {"mean", "std", *others}
    for s in SPLITS:
        keys |= {f"codes_{s}", f"table_{s}"} if coded[s] else {f"x_{s}"}
    if set(arrays) != keys:
        return False
    channels = (1, shape[0], 1, 1)
    mean, std = arrays["mean"], arrays["std"]
    return (
        all(a.dtype == np.float32 and a.shape == channels and bool(np.all(np.isfinite(a))) for a in (mean, std))
        and bool(np.all(std > 0))
        and all(
            (arrays[f"codes_{s}"].dtype == np.uint8 and arrays[f"codes_{s}"].shape[1:] == shape
             and arrays[f"table_{s}"].dtype == np.float32 and arrays[f"table_{s}"].shape == (PALETTE,))
            if coded[s]
            else (arrays[f"x_{s}"].dtype == np.float32 and arrays[f"x_{s}"].shape[1:] == shape)
            for s in SPLITS
        )
    )  # fmt: skip


def split_length(arrays: dict[str, np.ndarray], split: str) -> int:
    """How many images ``encode``'s output holds for ``split``."""
    return len(arrays[f"codes_{split}"] if f"codes_{split}" in arrays else arrays[f"x_{split}"])


def from_encoded(arrays: dict[str, np.ndarray], split: str) -> Images:
    """``split``'s normalized images from ``encode``'s output: the bits ``normalized`` gives the raw images."""
    mean, std = arrays["mean"], arrays["std"]
    if f"codes_{split}" in arrays:
        return _palette_images(arrays[f"codes_{split}"], arrays[f"table_{split}"], mean, std)
    return _standardized(arrays[f"x_{split}"], mean, std)


def package(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    groups_train: np.ndarray | None = None,
    groups_test: np.ndarray | None = None,
) -> Dataset:
    return package_encoded(name, encode(x_train, x_test), y_train, y_test, num_classes, groups_train, groups_test)


def package_encoded(
    name: str,
    encoded: dict[str, np.ndarray],
    y_train: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    groups_train: np.ndarray | None = None,
    groups_test: np.ndarray | None = None,
) -> Dataset:
    return Dataset(
        name=name,
        x_train=from_encoded(encoded, "train"),
        y_train=torch.from_numpy(np.ascontiguousarray(y_train, dtype=np.int64)),
        x_test=from_encoded(encoded, "test"),
        y_test=torch.from_numpy(np.ascontiguousarray(y_test, dtype=np.int64)),
        num_classes=num_classes,
        groups_train=None if groups_train is None else np.asarray(groups_train, dtype=np.int64),
        groups_test=None if groups_test is None else np.asarray(groups_test, dtype=np.int64),
    )


def check_labels(name: str, where: Path, y: np.ndarray, num_classes: int) -> None:
    if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DatasetError(
            f"{name}: labels in {where} range over {int(y.min())}..{int(y.max())}, expected 0..{num_classes - 1}; "
            "the file is corrupt or not this dataset, replace it with the official one"
        )


