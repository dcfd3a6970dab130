"""Datasets as in-memory tensors, read from the official on-disk layouts.

Every loader returns a :class:`Dataset` whose images are float32 ``(N, C, H, W)`` tensors normalized
with the per-channel mean and standard deviation of the train split. Clients are index arrays into
``x_train`` (see :mod:`iotfl_sim.fl.data.partition`), so nothing here is ever copied per client.

Files are looked up under a data root: the ``root`` argument (``data.root`` in a scenario), else the
``IOTFL_DATA`` environment variable. ``digits`` ships with scikit-learn and needs no root.
Loaded datasets are cached in-process; treat their tensors as read-only.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import gzip
import json
import os
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from iotfl_sim import safe_pickle
from iotfl_sim.catalog import DATASETS
from iotfl_sim.fl import disk_cache

# Datasets whose samples carry a natural owner (``groups_train``): FEMNIST writers, UCI HAR subjects.
NATURAL_GROUPS: tuple[str, ...] = ("femnist", "har")
ENV_VAR = "IOTFL_DATA"

_ALIASES = {
    "fashion-mnist": "fashion_mnist",
    "fashionmnist": "fashion_mnist",
    "cifar-10": "cifar10",
    "cifar-100": "cifar100",
    "uci_har": "har",
    "uci-har": "har",
}
# Where each dataset's files are expected, relative to the root (first entry is the documented one).
_SUBDIRS = {
    "mnist": ("mnist", "MNIST/raw", "."),
    "fashion_mnist": ("fashion_mnist", "fashion-mnist", "FashionMNIST/raw", "."),
    "cifar10": ("cifar-10-batches-py", "."),
    "cifar100": ("cifar-100-python", "."),
    "femnist": ("femnist", "."),
    "har": ("uci_har", "."),
}
CIFAR10_TRAIN_BATCHES = 5  # data_batch_1 ... data_batch_5 in the official archive
_CIFAR10_BATCH = re.compile(r"data_batch_(\d+)")
_HAR_NPZ = "har_inertial_signals_float32.npz"
_HAR_SIGNALS = tuple(
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
    key = _canonical(name)
    if key == "digits":
        if not 0.0 < test_fraction < 1.0:
            raise DatasetError(f"digits: test_fraction must be in (0, 1), got {test_fraction}")
        return _load_cached(key, None, float(test_fraction), int(seed))
    # Official splits ignore test_fraction/seed: one cache entry per (name, root).
    return _load_cached(key, _existing_root(key, root), 0.0, 0)


def check_files(name: str, root: str | Path | None = None) -> None:
    """Raise the DatasetError that :func:`load_dataset` would raise for a missing data root or missing
    files, without reading any file (a cheap check before a run)."""
    key = _canonical(name)
    if key == "digits":
        return
    resolved = _existing_root(key, root)
    locate = {
        "mnist": _mnist_files,
        "fashion_mnist": _mnist_files,
        "cifar10": _cifar10_files,
        "cifar100": _cifar100_files,
        "femnist": _femnist_files,
        "har": _har_source,
    }[key]
    locate(key, resolved)


def _canonical(name: str) -> str:
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    return key


def _existing_root(key: str, root: str | Path | None) -> Path:
    resolved = resolve_root(root)
    if resolved is None:
        raise DatasetError(
            f"{key}: no data root set; set data.root in the scenario or {ENV_VAR} to the folder holding "
            f"{_hint(key)}"
        )
    if not resolved.is_dir():
        raise DatasetError(
            f"{key}: data root {resolved} is not a folder; set data.root in the scenario or {ENV_VAR} "
            f"to the folder holding {_hint(key)}"
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
        "mnist": _load_mnist_like,
        "fashion_mnist": _load_mnist_like,
        "cifar10": _load_cifar10,
        "cifar100": _load_cifar100,
        "femnist": _load_femnist,
        "har": _load_har,
    }[name]
    return loader(name, root)


def _hint(name: str) -> str:
    return {
        "mnist": "mnist/train-images-idx3-ubyte.gz",
        "fashion_mnist": "fashion_mnist/train-images-idx3-ubyte.gz",
        "cifar10": "cifar-10-batches-py/data_batch_1 ... data_batch_5 and test_batch",
        "cifar100": "cifar-100-python/train",
        "femnist": "femnist/train/*.json",
        "har": f"uci_har/{_HAR_NPZ} (or 'uci_har/UCI HAR Dataset/train/Inertial Signals/*.txt')",
    }[name]


def _fix(name: str, root: Path) -> str:
    return f"set data.root in the scenario or {ENV_VAR} to the folder holding {_hint(name)} (now {root})"


# ---------------------------------------------------------------------------------------------
# normalization and packaging


def _aligned_float32(x: np.ndarray) -> np.ndarray:
    """A float32 copy of ``x`` in memory PyTorch allocated (64-byte aligned), which the tensors then share.

    Training reads batches as views of these arrays, and oneDNN's kernels may round differently with the
    alignment of their input: memory numpy allocated starts wherever the allocator's history put it (16-byte
    aligned), so the same data could train to other bits after another allocation order (found when a
    cached digits split, read back from disk, landed at another address and changed AdapterFL's accuracy)."""
    out = torch.empty(x.shape, dtype=torch.float32).numpy()
    np.copyto(out, x, casting="same_kind")
    return out


def _normalize(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cast to float32 and standardize both splits with the train split's per-channel mean and std.

    Raw uint8 pixels need no /255 first: standardizing removes any constant scale.
    """
    xtr = _aligned_float32(x_train)
    xte = _aligned_float32(x_test)
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


def _package(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    num_classes: int,
    groups_train: np.ndarray | None = None,
    groups_test: np.ndarray | None = None,
) -> Dataset:
    xtr, xte = _normalize(x_train, x_test)
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


def _check_labels(name: str, where: Path, y: np.ndarray, num_classes: int) -> None:
    if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise DatasetError(
            f"{name}: labels in {where} range over {int(y.min())}..{int(y.max())}, expected 0..{num_classes - 1}; "
            "the file is corrupt or not this dataset, replace it with the official one"
        )


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
    return _package("digits", kept["x_train"], kept["y_train"], kept["x_test"], kept["y_test"], 10)


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


# ---------------------------------------------------------------------------------------------
# MNIST / Fashion-MNIST (idx files)

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Parse an idx file (gzip-compressed or not, detected from its bytes) into a numpy array."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise DatasetError(f"cannot read idx file {path}: {exc}; replace it with the official file") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise DatasetError(
            f"{path} is not an idx file (bad magic number {raw[:4].hex() or 'empty'}); "
            "replace it with the official file"
        )
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{path} is truncated (idx header incomplete); replace it with the official file")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = header + int(np.prod(dims)) * dtype.itemsize
    if len(raw) != expected:
        raise DatasetError(
            f"{path} is corrupt: header says shape {dims} ({expected} bytes) but the file holds {len(raw)} "
            "bytes; replace it with the official file"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def _find_idx(folder: Path, stem: str) -> Path | None:
    # Official names, plus the "train-images.idx3-ubyte" spelling some mirrors use.
    alt = stem.replace("-idx", ".idx")
    for base in (stem, alt):
        for suffix in (".gz", ""):
            p = folder / f"{base}{suffix}"
            if p.is_file():
                return p
    return None


def _mnist_files(name: str, root: Path) -> tuple[Path, dict[str, Path]]:
    """The folder and the four idx files of MNIST or Fashion-MNIST (DatasetError if one is missing)."""
    stems = {
        "x_train": "train-images-idx3-ubyte",
        "y_train": "train-labels-idx1-ubyte",
        "x_test": "t10k-images-idx3-ubyte",
        "y_test": "t10k-labels-idx1-ubyte",
    }
    folder = next(
        (root / sub for sub in _SUBDIRS[name] if _find_idx(root / sub, stems["x_train"]) is not None), None
    )
    if folder is None:
        raise DatasetError(
            f"{name}: {root / name / (stems['x_train'] + '.gz')} not found; {_fix(name, root)}"
        )
    paths: dict[str, Path] = {}
    for key, stem in stems.items():
        path = _find_idx(folder, stem)
        if path is None:
            raise DatasetError(f"{name}: {folder / (stem + '.gz')} not found; {_fix(name, root)}")
        paths[key] = path
    return folder, paths


def _load_mnist_like(name: str, root: Path) -> Dataset:
    folder, paths = _mnist_files(name, root)
    arrays = {key: read_idx(path) for key, path in paths.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DatasetError(
                f"{name}: {split} images {x.shape} and labels {y.shape} in {folder} do not match; "
                "replace them with the official files"
            )
        _check_labels(name, folder, y, 10)
    return _package(
        name,
        arrays["x_train"][:, None],
        arrays["y_train"],
        arrays["x_test"][:, None],
        arrays["y_test"],
        10,
    )


# ---------------------------------------------------------------------------------------------
# CIFAR-10 / CIFAR-100 (python pickle batches)


def _cifar_folder(name: str, root: Path, marker: str) -> Path:
    for sub in _SUBDIRS[name]:
        if (root / sub / marker).is_file():
            return root / sub
    raise DatasetError(f"{name}: {root / _SUBDIRS[name][0] / marker} not found; {_fix(name, root)}")


def _need(name: str, path: Path, root: Path) -> Path:
    if not path.is_file():
        raise DatasetError(f"{name}: {path} not found; {_fix(name, root)}")
    return path


def _read_cifar_batch(name: str, path: Path, root: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    _need(name, path, root)
    try:
        with path.open("rb") as f:
            batch = safe_pickle.load(f, encoding="bytes")
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[label_key], dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DatasetError(
            f"{name}: {path} is not a readable CIFAR python batch ({type(exc).__name__}: {exc}); "
            "replace it with the official file"
        ) from exc
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or labels.shape != (data.shape[0],):
        raise DatasetError(
            f"{name}: {path} holds data {data.shape} and labels {labels.shape}, expected (N, 3072) and (N,); "
            "replace it with the official file"
        )
    return data.reshape(-1, 3, 32, 32), labels


def _load_cifar(
    name: str,
    root: Path,
    train_files: Sequence[Path],
    test_file: Path,
    label_key: bytes,
    classes: int,
) -> Dataset:
    folder = test_file.parent
    parts = [_read_cifar_batch(name, f, root, label_key) for f in train_files]
    x_te, y_te = _read_cifar_batch(name, test_file, root, label_key)
    x_tr = np.concatenate([p[0] for p in parts])
    y_tr = np.concatenate([p[1] for p in parts])
    _check_labels(name, folder, y_tr, classes)
    _check_labels(name, folder, y_te, classes)
    return _package(name, x_tr, y_tr, x_te, y_te, classes)


def _cifar10_batches(folder: Path) -> list[str]:
    """The ``data_batch_<n>`` files in ``folder``, ordered by ``n`` (empty if none or no folder)."""
    found = []
    for path in folder.glob("data_batch_*"):
        match = _CIFAR10_BATCH.fullmatch(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path.name))
    return [file for _, file in sorted(found)]


def _cifar10_files(name: str, root: Path) -> tuple[list[Path], Path]:
    # Any non-empty subset of the train batches loads (the shared offline copy keeps only two), and
    # ``notes`` says how many were read, so a reduced train set never goes unnoticed.
    folder = next((root / sub for sub in _SUBDIRS[name] if _cifar10_batches(root / sub)), None)
    if folder is None:
        raise DatasetError(
            f"{name}: no data_batch_* file in {root / _SUBDIRS[name][0]}; copy at least one of the official "
            f"CIFAR-10 python batches there, or {_fix(name, root)}"
        )
    return [folder / f for f in _cifar10_batches(folder)], _need(name, folder / "test_batch", root)


def _load_cifar10(name: str, root: Path) -> Dataset:
    files, test = _cifar10_files(name, root)
    ds = _load_cifar(name, root, files, test, b"labels", 10)
    notes = (
        f"{name}: {len(files)} of the {CIFAR10_TRAIN_BATCHES} official train batches "
        f"({', '.join(f.name for f in files)}) in {test.parent}, {len(ds.y_train):,} train images"
    )
    return dataclasses.replace(ds, notes=notes)


def _cifar100_files(name: str, root: Path) -> tuple[list[Path], Path]:
    folder = _cifar_folder(name, root, "train")
    return [folder / "train"], _need(name, folder / "test", root)


def _load_cifar100(name: str, root: Path) -> Dataset:
    train, test = _cifar100_files(name, root)
    return _load_cifar(name, root, train, test, b"fine_labels", 100)


# ---------------------------------------------------------------------------------------------
# FEMNIST (LEAF json)


def _leaf_files(name: str, folder: Path, root: Path) -> list[Path]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DatasetError(f"{name}: no LEAF json files in {folder}; {_fix(name, root)}")
    return files


def _read_leaf_split(name: str, folder: Path, root: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    files = _leaf_files(name, folder, root)
    out = []
    for path in files:
        try:
            with path.open("rb") as f:
                blob = json.load(f)
            for user in blob["users"]:
                rec = blob["user_data"][user]
                x = np.asarray(rec["x"], dtype=np.float32)
                y = np.asarray(rec["y"], dtype=np.int64)
                if x.ndim != 2 or x.shape[1] != 784 or y.shape != (x.shape[0],):
                    raise ValueError(f"user {user}: x {x.shape}, y {y.shape}, expected (n, 784) and (n,)")
                out.append((str(user), x, y))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DatasetError(
                f"{name}: {path} is not valid LEAF json ({type(exc).__name__}: {exc}); "
                "replace it with the LEAF-generated file"
            ) from exc
    return out


def _femnist_files(name: str, root: Path) -> Path:
    """The folder holding FEMNIST's train/ and test/ LEAF json files."""
    base = next((root / s for s in _SUBDIRS[name] if (root / s / "train").is_dir()), None)
    if base is None:
        raise DatasetError(f"{name}: {root / 'femnist' / 'train'} not found; {_fix(name, root)}")
    if not (base / "test").is_dir():
        raise DatasetError(f"{name}: {base / 'test'} not found; {_fix(name, root)}")
    for split in ("train", "test"):
        _leaf_files(name, base / split, root)
    return base


def _load_femnist(name: str, root: Path) -> Dataset:
    base = _femnist_files(name, root)
    writer_index: dict[str, int] = {}

    def stack(records: list[tuple[str, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
        groups = [
            np.full(len(y), writer_index.setdefault(user, len(writer_index)), dtype=np.int64)
            for user, _, y in records
        ]
        x = np.concatenate([r[1] for r in records]).reshape(-1, 1, 28, 28)
        return x, np.concatenate([r[2] for r in records]), np.concatenate(groups)

    # Train first so writer indices follow the train files; a test-only writer gets a fresh index.
    x_tr, y_tr, g_tr = stack(_read_leaf_split(name, base / "train", root))
    x_te, y_te, g_te = stack(_read_leaf_split(name, base / "test", root))
    _check_labels(name, base, y_tr, 62)
    _check_labels(name, base, y_te, 62)
    return _package(name, x_tr, y_tr, x_te, y_te, 62, g_tr, g_te)


# ---------------------------------------------------------------------------------------------
# UCI HAR (9 raw inertial signals, 128 steps per window)


def _har_source(name: str, root: Path) -> tuple[str, Path]:
    """("npz", the archive) or ("text", the official folder, every file present)."""
    for sub in _SUBDIRS[name]:
        if (root / sub / _HAR_NPZ).is_file():
            return "npz", root / sub / _HAR_NPZ
    official = [root / sub for sub in ("uci_har/UCI HAR Dataset", "UCI HAR Dataset", ".")]
    for base in official:
        if (base / "train" / "Inertial Signals").is_dir():
            for split in ("train", "test"):
                for s in _HAR_SIGNALS:
                    _need(name, base / split / "Inertial Signals" / f"{s}_{split}.txt", root)
                for what in ("y", "subject"):
                    _need(name, base / split / f"{what}_{split}.txt", root)
            return "text", base
    signals = (
        next((b for b in official if (b / "train").is_dir()), official[0]) / "train" / "Inertial Signals"
    )
    raise DatasetError(
        f"{name}: neither {root / 'uci_har' / _HAR_NPZ} nor the official raw signals "
        f"{signals}/body_acc_x_train.txt ... (and test/) found; set data.root in the scenario or {ENV_VAR} "
        f"to the folder holding uci_har/ with one of them (now {root})"
    )


def _load_har(name: str, root: Path) -> Dataset:
    kind, path = _har_source(name, root)
    return _load_har_npz(name, path) if kind == "npz" else _load_har_text(name, path, root)


def _load_har_npz(name: str, path: Path) -> Dataset:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {
                k: z[k] for k in ("X_train", "y_train", "subject_train", "X_test", "y_test", "subject_test")
            }
            channels = [str(c) for c in z["channels"]] if "channels" in z.files else None
    except (OSError, ValueError, KeyError) as exc:
        raise DatasetError(
            f"{name}: {path} is not a readable HAR archive ({type(exc).__name__}: {exc}); "
            "it needs X_train/y_train/subject_train/X_test/y_test/subject_test, regenerate it"
        ) from exc
    if channels is not None and channels != list(_HAR_SIGNALS):
        # Keep one channel order whichever way the archive was written.
        order = [channels.index(s) for s in _HAR_SIGNALS if s in channels]
        if len(order) == len(_HAR_SIGNALS):
            arrays["X_train"] = arrays["X_train"][:, order]
            arrays["X_test"] = arrays["X_test"][:, order]
    return _har_package(name, path, arrays)


def _read_txt_matrix(name: str, path: Path, root: Path) -> np.ndarray:
    _need(name, path, root)
    try:
        return np.loadtxt(path, dtype=np.float32, ndmin=2)
    except ValueError as exc:
        raise DatasetError(
            f"{name}: {path} is not a numeric text table ({exc}); replace it with the official file"
        ) from exc


def _load_har_text(name: str, base: Path, root: Path) -> Dataset:
    arrays: dict[str, np.ndarray] = {}
    for split in ("train", "test"):
        sig_dir = base / split / "Inertial Signals"
        signals = [_read_txt_matrix(name, sig_dir / f"{s}_{split}.txt", root) for s in _HAR_SIGNALS]
        if len({s.shape for s in signals}) != 1:
            raise DatasetError(
                f"{name}: the 9 signal files in {sig_dir} have different shapes "
                f"{sorted({s.shape for s in signals})}; replace them with the official files"
            )
        arrays[f"X_{split}"] = np.stack(signals, axis=1)
        arrays[f"y_{split}"] = _read_txt_matrix(name, base / split / f"y_{split}.txt", root)[:, 0]
        arrays[f"subject_{split}"] = _read_txt_matrix(name, base / split / f"subject_{split}.txt", root)[:, 0]
    return _har_package(name, base, arrays)


def _har_package(name: str, where: Path, arrays: dict[str, np.ndarray]) -> Dataset:
    out = {}
    for split in ("train", "test"):
        x = np.asarray(arrays[f"X_{split}"], dtype=np.float32)
        y = np.asarray(arrays[f"y_{split}"]).astype(np.int64) - 1  # activities are numbered 1..6
        g = np.asarray(arrays[f"subject_{split}"]).astype(np.int64)
        if x.ndim != 3 or x.shape[1] != 9 or not len(x) == len(y) == len(g):
            raise DatasetError(
                f"{name}: {split} signals {x.shape}, labels {y.shape}, subjects {g.shape} in {where} do not fit "
                "(expected (N, 9, T), (N,), (N,)); replace them with the official files"
            )
        _check_labels(name, where, y, 6)
        out[split] = (x[:, :, None, :], y, g)
    (x_tr, y_tr, g_tr), (x_te, y_te, g_te) = out["train"], out["test"]
    return _package(name, x_tr, y_tr, x_te, y_te, 6, g_tr, g_te)
