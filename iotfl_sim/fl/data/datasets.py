"""Datasets as in-memory tensors, read from the official on-disk layouts.

Every loader returns a :class:`Dataset` whose images are float32 ``(N, C, H, W)`` tensors normalized
with the per-channel mean and standard deviation of the train split. Clients are index arrays into
``x_train`` (see :mod:`iotfl_sim.fl.data.partition`), so nothing here is ever copied per client.

Files are looked up under a data root: the ``root`` argument (``data.root`` in a scenario), else the
``IOTFL_DATA`` environment variable. ``digits`` ships with scikit-learn and needs no root.
Loaded datasets are cached in-process; treat their tensors as read-only.
"""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

import numpy as np

from iotfl_sim.core.catalog import DATASETS
from iotfl_sim.fl import disk_cache
from iotfl_sim.fl.data.dataset import (
    ENV_VAR,
    HAR_NPZ,
    HAR_SIGNALS,
    SUBDIRS,
    Dataset,
    DatasetError,
    hint,
    package,
)  # fmt: skip
from iotfl_sim.fl.data.readers import (
    CIFAR10_TRAIN_BATCHES,
    cifar10_files,
    cifar100_files,
    femnist_files,
    har_source,
    load_cifar10,
    load_cifar100,
    load_femnist,
    load_har,
    load_mnist_like,
    mnist_files,
    read_idx,
)  # fmt: skip

__all__ = [
    "CIFAR10_TRAIN_BATCHES", "DATASETS", "ENV_VAR", "HAR_NPZ", "HAR_SIGNALS", "NATURAL_GROUPS", "SUBDIRS", "Dataset",
    "DatasetError", "check_files", "clear_dataset_cache", "load_dataset", "read_idx", "resolve_root",
]  # fmt: skip

# Datasets whose samples carry a natural owner (``groups_train``): FEMNIST writers, UCI HAR subjects.
NATURAL_GROUPS: tuple[str, ...] = ("femnist", "har")

_ALIASES = {
    "fashion-mnist": "fashion_mnist",
    "fashionmnist": "fashion_mnist",
    "cifar-10": "cifar10",
    "cifar-100": "cifar100",
    "uci_har": "har",
    "uci-har": "har",
}


def resolve_root(root: str | Path | None) -> Path | None:
    """The data root: ``root`` if given, else ``$IOTFL_DATA``, else None."""
    if root is None or str(root) == "":
        env = os.environ.get(ENV_VAR, "")
        if not env:
            return None
        root = env
    try:
        return Path(root).expanduser().resolve()
    except RuntimeError:  # Python < 3.13 reports a loop of symbolic links so; an OSError says it everywhere
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(root)) from None


def load_dataset(
    name: str, root: str | Path | None = None, *, test_fraction: float = 0.2, seed: int = 0
) -> Dataset:
    """Load dataset ``name`` (one of :data:`DATASETS`) from ``root`` (or ``$IOTFL_DATA``).

    ``test_fraction`` and ``seed`` only matter for ``digits``, which has no official test split.
    Raises :class:`DatasetError` with a one-line fix when files are missing or corrupt.
    """
    key = canonical_name(name)
    if key == "digits":
        if not 0.0 < test_fraction < 1.0:
            raise DatasetError(f"digits: test_fraction must be in (0, 1), got {test_fraction}")
        return _load_cached(key, None, float(test_fraction), int(seed))
    # Official splits ignore test_fraction/seed: one cache entry per (name, root).
    return _load_cached(key, _existing_root(key, root), 0.0, 0)


def check_files(name: str, root: str | Path | None = None) -> None:
    """Raise the DatasetError that :func:`load_dataset` would raise for a missing data root or missing
    files, without reading any file (a cheap check before a run)."""
    key = canonical_name(name)
    if key == "digits":
        return
    resolved = _existing_root(key, root)
    locate = {
        "mnist": mnist_files,
        "fashion_mnist": mnist_files,
        "cifar10": cifar10_files,
        "cifar100": cifar100_files,
        "femnist": femnist_files,
        "har": har_source,
    }[key]
    locate(key, resolved)


def canonical_name(name: str) -> str:
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    return key


def _existing_root(key: str, root: str | Path | None) -> Path:
    resolved = resolve_root(root)
    if resolved is None:
        raise DatasetError(
            f"{key}: no data root set; set data.root in the scenario or {ENV_VAR} to the folder holding "
            f"{hint(key)}"
        )
    if not resolved.is_dir():
        raise DatasetError(
            f"{key}: data root {resolved} is not a folder; set data.root in the scenario or {ENV_VAR} "
            f"to the folder holding {hint(key)}"
        )
    return resolved


def clear_dataset_cache() -> None:
    """Forget every dataset loaded in this process (frees memory; files are read again on next use)."""
    _load_cached.cache_clear()


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, root: Path | None, test_fraction: float, seed: int) -> Dataset:
    if name == "digits":
        return _load_digits(test_fraction, seed)
    assert root is not None
    loader = {
        "mnist": load_mnist_like,
        "fashion_mnist": load_mnist_like,
        "cifar10": load_cifar10,
        "cifar100": load_cifar100,
        "femnist": load_femnist,
        "har": load_har,
    }[name]
    return loader(name, root)


# ---------------------------------------------------------------------------------------------
# digits (bundled with scikit-learn)


def _load_digits(test_fraction: float, seed: int) -> Dataset:
    # scikit-learn's own split, kept on disk (fl.disk_cache) per (scikit-learn version, fraction, seed): the
    # import alone costs a process about two seconds, and most test and example runs use digits
    from importlib import metadata

    name = disk_cache.key("digits", metadata.version("scikit-learn"), test_fraction, seed)
    kept = disk_cache.load("datasets", name, _valid_digits)
    if kept is None:
        kept = _split_digits(test_fraction, seed)
        disk_cache.store("datasets", name, kept)
    return package("digits", kept["x_train"], kept["y_train"], kept["x_test"], kept["y_test"], 10)


_DIGITS = 1797  # scikit-learn's digits: 1797 8x8 images


def _split_digits(test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    idx_tr, idx_te = train_test_split(
        np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=y
    )
    return {"x_train": x[idx_tr], "y_train": y[idx_tr], "x_test": x[idx_te], "y_test": y[idx_te]}


def _valid_digits(arrays: dict[str, np.ndarray]) -> bool:
    fields = {"x_train": ("f", 4), "y_train": ("i", 1), "x_test": ("f", 4), "y_test": ("i", 1)}
    if not disk_cache.has(arrays, fields):
        return False
    n_tr, n_te = len(arrays["y_train"]), len(arrays["y_test"])
    return (
        n_tr + n_te == _DIGITS
        and arrays["x_train"].shape == (n_tr, 1, 8, 8)
        and arrays["x_test"].shape == (n_te, 1, 8, 8)
        and all(arrays[f].dtype == np.float32 for f in ("x_train", "x_test"))
        and all(arrays[f].dtype == np.int64 and np.all((arrays[f] >= 0) & (arrays[f] < 10)) for f in ("y_train", "y_test"))
        and all(np.all((arrays[f] >= 0.0) & (arrays[f] <= 1.0)) for f in ("x_train", "x_test"))
    )


