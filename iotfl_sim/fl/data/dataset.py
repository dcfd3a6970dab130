"""The ``Dataset`` every loader returns, its error, where each dataset's files are expected, and how loaded
arrays become a normalized ``Dataset``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

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
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
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


def normalize(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cast to float32 and standardize both splits with the train split's per-channel mean and std.

    Raw uint8 pixels need no /255 first: standardizing removes any constant scale.
    """
    xtr = aligned_float32(x_train)
    xte = aligned_float32(x_test)
    n, c = xtr.shape[:2]
    per_sample = int(np.prod(xtr.shape[2:]))
    # Chunked float64 sums keep the statistics exact without a float64 copy of the whole split.
    chunk = max(1, 4_000_000 // max(1, c * per_sample))
    total = np.zeros(c)
    for i in range(0, n, chunk):
        total += xtr[i : i + chunk].sum(axis=(0, 2, 3), dtype=np.float64)
    mean = total / (n * per_sample)
    sq = np.zeros(c)
    for i in range(0, n, chunk):
        d = xtr[i : i + chunk].astype(np.float64) - mean[None, :, None, None]
        sq += np.einsum("nchw,nchw->c", d, d)
    std = np.sqrt(sq / (n * per_sample))
    std[std == 0] = 1.0
    m32 = mean.astype(np.float32)[None, :, None, None]
    s32 = std.astype(np.float32)[None, :, None, None]
    for arr in (xtr, xte):
        arr -= m32
        arr /= s32
    return xtr, xte


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
    xtr, xte = normalize(x_train, x_test)
    return Dataset(
        name=name,
        x_train=torch.from_numpy(xtr),
        y_train=torch.from_numpy(np.ascontiguousarray(y_train, dtype=np.int64)),
        x_test=torch.from_numpy(xte),
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


