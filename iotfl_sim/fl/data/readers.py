"""Readers of the official on-disk layouts: MNIST and Fashion-MNIST (idx), CIFAR-10/100 (pickled batches),
FEMNIST (LEAF json) and UCI HAR (inertial signals). Each ``load_*`` returns a ``Dataset``; each ``*_files``
locates the files without reading them (``check_files``)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson

from iotfl_sim import safe_pickle
from iotfl_sim.fl import disk_cache
from iotfl_sim.fl.data.dataset import (
    ENV_VAR,
    HAR_NPZ,
    HAR_SIGNALS,
    SPLITS,
    SUBDIRS,
    Dataset,
    DatasetError,
    check_labels,
    encode,
    fix,
    package,
    package_encoded,
    split_length,
    valid_encoding,
)  # fmt: skip

CIFAR10_TRAIN_BATCHES = 5  # data_batch_1 ... data_batch_5 in the official archive
_CIFAR10_BATCH = re.compile(r"data_batch_(\d+)")


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


def mnist_files(name: str, root: Path) -> tuple[Path, dict[str, Path]]:
    """The folder and the four idx files of MNIST or Fashion-MNIST (DatasetError if one is missing)."""
    stems = {
        "x_train": "train-images-idx3-ubyte",
        "y_train": "train-labels-idx1-ubyte",
        "x_test": "t10k-images-idx3-ubyte",
        "y_test": "t10k-labels-idx1-ubyte",
    }
    folder = next(
        (root / sub for sub in SUBDIRS[name] if _find_idx(root / sub, stems["x_train"]) is not None), None
    )
    if folder is None:
        raise DatasetError(
            f"{name}: {root / name / (stems['x_train'] + '.gz')} not found; {fix(name, root)}"
        )
    paths: dict[str, Path] = {}
    for key, stem in stems.items():
        path = _find_idx(folder, stem)
        if path is None:
            raise DatasetError(f"{name}: {folder / (stem + '.gz')} not found; {fix(name, root)}")
        paths[key] = path
    return folder, paths


def load_mnist_like(name: str, root: Path) -> Dataset:
    folder, paths = mnist_files(name, root)
    arrays = {key: read_idx(path) for key, path in paths.items()}
    for split in SPLITS:
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DatasetError(
                f"{name}: {split} images {x.shape} and labels {y.shape} in {folder} do not match; "
                "replace them with the official files"
            )
        check_labels(name, folder, y, 10)
    return package(
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
    for sub in SUBDIRS[name]:
        if (root / sub / marker).is_file():
            return root / sub
    raise DatasetError(f"{name}: {root / SUBDIRS[name][0] / marker} not found; {fix(name, root)}")


def _need(name: str, path: Path, root: Path) -> Path:
    if not path.is_file():
        raise DatasetError(f"{name}: {path} not found; {fix(name, root)}")
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
    check_labels(name, folder, y_tr, classes)
    check_labels(name, folder, y_te, classes)
    return package(name, x_tr, y_tr, x_te, y_te, classes)


def _cifar10_batches(folder: Path) -> list[str]:
    """The ``data_batch_<n>`` files in ``folder``, ordered by ``n`` (empty if none or no folder)."""
    found = []
    for path in folder.glob("data_batch_*"):
        match = _CIFAR10_BATCH.fullmatch(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path.name))
    return [file for _, file in sorted(found)]


def cifar10_files(name: str, root: Path) -> tuple[list[Path], Path]:
    # Any non-empty subset of the train batches loads (the shared offline copy keeps only two), and
    # ``notes`` says how many were read, so a reduced train set never goes unnoticed.
    folder = next((root / sub for sub in SUBDIRS[name] if _cifar10_batches(root / sub)), None)
    if folder is None:
        raise DatasetError(
            f"{name}: no data_batch_* file in {root / SUBDIRS[name][0]}; copy at least one of the official "
            f"CIFAR-10 python batches there, or {fix(name, root)}"
        )
    return [folder / f for f in _cifar10_batches(folder)], _need(name, folder / "test_batch", root)


def load_cifar10(name: str, root: Path) -> Dataset:
    files, test = cifar10_files(name, root)
    ds = _load_cifar(name, root, files, test, b"labels", 10)
    notes = (
        f"{name}: {len(files)} of the {CIFAR10_TRAIN_BATCHES} official train batches "
        f"({', '.join(f.name for f in files)}) in {test.parent}, {len(ds.y_train):,} train images"
    )
    return dataclasses.replace(ds, notes=notes)


def cifar100_files(name: str, root: Path) -> tuple[list[Path], Path]:
    folder = _cifar_folder(name, root, "train")
    return [folder / "train"], _need(name, folder / "test", root)


def load_cifar100(name: str, root: Path) -> Dataset:
    train, test = cifar100_files(name, root)
    return _load_cifar(name, root, train, test, b"fine_labels", 100)


# ---------------------------------------------------------------------------------------------
# FEMNIST (LEAF json)


def _leaf_files(name: str, folder: Path, root: Path) -> list[Path]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DatasetError(f"{name}: no LEAF json files in {folder}; {fix(name, root)}")
    return files


def _read_leaf_split(name: str, folder: Path, root: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    files = _leaf_files(name, folder, root)
    out = []
    for path in files:
        try:
            blob = orjson.loads(path.read_bytes())  # 4x faster than json on LEAF's float lists, same floats
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


def femnist_files(name: str, root: Path) -> Path:
    """The folder holding FEMNIST's train/ and test/ LEAF json files."""
    base = next((root / s for s in SUBDIRS[name] if (root / s / "train").is_dir()), None)
    if base is None:
        raise DatasetError(f"{name}: {root / 'femnist' / 'train'} not found; {fix(name, root)}")
    if not (base / "test").is_dir():
        raise DatasetError(f"{name}: {base / 'test'} not found; {fix(name, root)}")
    for split in SPLITS:
        _leaf_files(name, base / split, root)
    return base


FEMNIST_SHAPE = (1, 28, 28)
FEMNIST_LABELS = {f"{a}_{split}" for split in SPLITS for a in ("y", "g")}


def load_femnist(name: str, root: Path) -> Dataset:
    """FEMNIST from its LEAF json files, or from what ``fl.disk_cache`` kept for exactly these files' bytes:
    parsing the 82 MB of json takes 0.7 s of every run (hashing it, 0.07 s) and leaves the heap about 65 MB
    larger than the arrays it yields. Kept is the parse already ``encode``d (8-bit palette codes and the
    channel statistics, 12 MB instead of 46), so a run reads a quarter of the bytes and skips 0.2 s of coding."""
    base = femnist_files(name, root)
    files = [path for split in SPLITS for path in _leaf_files(name, base / split, root)]
    key = _femnist_key(name, base, files)
    arrays = None if key is None else disk_cache.load("datasets", key, _valid_femnist)
    if arrays is None:  # parsing reads each file again (from the page cache) rather than holding 82 MB of bytes
        parsed = _parse_femnist(name, base, root)
        arrays = {**encode(parsed.pop("x_train"), parsed.pop("x_test")), **parsed}
        if key is not None:
            disk_cache.store("datasets", key, arrays)
    check_labels(name, base, arrays["y_train"], 62)
    check_labels(name, base, arrays["y_test"], 62)
    return package_encoded(name, arrays, arrays["y_train"], arrays["y_test"], 62, arrays["g_train"], arrays["g_test"])


# A LEAF pixel takes at most ~20 characters of json ("0.9960784316062927, ") and 4 bytes parsed, an image
# at least 784 x 4 bytes: json larger than this parses to more than disk_cache keeps, so it is not hashed.
LEAF_JSON_PER_TABLE_BYTE = 5


def _femnist_key(name: str, base: Path, files: list[Path]) -> str | None:
    """The disk-cache name of these files' parsed arrays: a digest of their names and bytes; None where their
    arrays could not be kept (the cache off, or json too large for a table)."""
    try:
        size = sum(path.stat().st_size for path in files)
    except OSError as exc:
        raise DatasetError(f"{name}: cannot read {base} ({exc.strerror or exc}); check the files and their permissions") from exc
    if disk_cache.cache_dir("datasets") is None or size > LEAF_JSON_PER_TABLE_BYTE * disk_cache.MAX_BYTES:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(base).as_posix()}\0".encode())
        digest.update(_read(name, path))
    return disk_cache.key("femnist", digest.hexdigest())


def _read(name: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{name}: cannot read {path} ({exc.strerror or exc}); check the file and its permissions") from exc


def _parse_femnist(name: str, base: Path, root: Path) -> dict[str, np.ndarray]:
    writer_index: dict[str, int] = {}

    def stack(records: list[tuple[str, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
        groups = [
            np.full(len(y), writer_index.setdefault(user, len(writer_index)), dtype=np.int64)
            for user, _, y in records
        ]
        x = np.concatenate([r[1] for r in records]).reshape(-1, 1, 28, 28)
        return x, np.concatenate([r[2] for r in records]), np.concatenate(groups)

    # Train first so writer indices follow the train files; a test-only writer gets a fresh index.
    arrays = {}
    for split in SPLITS:
        x, y, g = stack(_read_leaf_split(name, base / split, root))
        arrays.update({f"x_{split}": x, f"y_{split}": y, f"g_{split}": g})
    return arrays


def _valid_femnist(arrays: dict[str, np.ndarray]) -> bool:
    if not valid_encoding(arrays, FEMNIST_SHAPE, FEMNIST_LABELS):
        return False
    return all(
        arrays[f"y_{s}"].dtype == np.int64 and arrays[f"g_{s}"].dtype == np.int64
        and arrays[f"y_{s}"].ndim == arrays[f"g_{s}"].ndim == 1
        and split_length(arrays, s) == len(arrays[f"y_{s}"]) == len(arrays[f"g_{s}"])
        and (len(arrays[f"g_{s}"]) == 0 or int(arrays[f"g_{s}"].min()) >= 0)
        for s in SPLITS
    )


# ---------------------------------------------------------------------------------------------
# UCI HAR (9 raw inertial signals, 128 steps per window)


def har_source(name: str, root: Path) -> tuple[str, Path]:
    """("npz", the archive) or ("text", the official folder, every file present)."""
    for sub in SUBDIRS[name]:
        if (root / sub / HAR_NPZ).is_file():
            return "npz", root / sub / HAR_NPZ
    official = [root / sub for sub in ("uci_har/UCI HAR Dataset", "UCI HAR Dataset", ".")]
    for base in official:
        if (base / "train" / "Inertial Signals").is_dir():
            for split in SPLITS:
                for s in HAR_SIGNALS:
                    _need(name, base / split / "Inertial Signals" / f"{s}_{split}.txt", root)
                for what in ("y", "subject"):
                    _need(name, base / split / f"{what}_{split}.txt", root)
            return "text", base
    signals = (
        next((b for b in official if (b / "train").is_dir()), official[0]) / "train" / "Inertial Signals"
    )
    raise DatasetError(
        f"{name}: neither {root / 'uci_har' / HAR_NPZ} nor the official raw signals "
        f"{signals}/body_acc_x_train.txt ... (and test/) found; set data.root in the scenario or {ENV_VAR} "
        f"to the folder holding uci_har/ with one of them (now {root})"
    )


def load_har(name: str, root: Path) -> Dataset:
    kind, path = har_source(name, root)
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
    if channels is not None and channels != list(HAR_SIGNALS):
        # Keep one channel order whichever way the archive was written.
        order = [channels.index(s) for s in HAR_SIGNALS if s in channels]
        if len(order) == len(HAR_SIGNALS):
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
    for split in SPLITS:
        sig_dir = base / split / "Inertial Signals"
        signals = [_read_txt_matrix(name, sig_dir / f"{s}_{split}.txt", root) for s in HAR_SIGNALS]
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
    for split in SPLITS:
        x = np.asarray(arrays[f"X_{split}"], dtype=np.float32)
        y = np.asarray(arrays[f"y_{split}"]).astype(np.int64) - 1  # activities are numbered 1..6
        g = np.asarray(arrays[f"subject_{split}"]).astype(np.int64)
        if x.ndim != 3 or x.shape[1] != 9 or not len(x) == len(y) == len(g):
            raise DatasetError(
                f"{name}: {split} signals {x.shape}, labels {y.shape}, subjects {g.shape} in {where} do not fit "
                "(expected (N, 9, T), (N,), (N,)); replace them with the official files"
            )
        check_labels(name, where, y, 6)
        out[split] = (x[:, :, None, :], y, g)
    (x_tr, y_tr, g_tr), (x_te, y_te, g_te) = out["train"], out["test"]
    return package(name, x_tr, y_tr, x_te, y_te, 6, g_tr, g_te)
