"""An on-disk cache of small numpy tables that cost a process seconds to compute, shared by every process on
the machine: operator traces (``fl.cost.opcost.affine_trace``), per-sample model costs (``fl.cost.footprint.measure_cost``)
the ``digits`` train/test split (``fl.data.datasets``, which then needs no scikit-learn import) and FEMNIST's
parsed and coded LEAF json (``fl.data.readers.load_femnist``, keyed by a digest of the json files' bytes).

Each of them is paid again by every process (each run, each pool worker of a sweep, each test): tracing an
OFA-MobileNetV3 submodel on the meta device takes about a second of Python, probing FedX's model for its costs
several, importing scikit-learn for the digits split two, parsing FEMNIST's json 0.7 s. What they compute depends only on this package's
numerics code, the PyTorch version and their arguments, so each is kept as an ``.npz`` file named by a digest
of exactly those: the source of ``iotfl_sim/fl/`` (every model, the trace and its FLOP and byte rules, the
loaders), ``torch.__version__``, and the caller's own parts (recipe, spec, options, a library's version).
Changing any of them names another file; nothing is ever looked up by a stale key.

Where: ``$IOTFL_CACHE_DIR``, else ``$XDG_CACHE_HOME/iotfl-sim``, else ``~/.cache/iotfl-sim``, one folder per
kind of table inside. ``IOTFL_CACHE_DIR=off`` turns it off. It is a cache: a file that cannot be read back
whole (truncated, foreign, of other shapes, or unpacking to more than ``MAX_BYTES``) is computed again and
replaced, and a folder that cannot be written only costs the time; neither is an error. Files are written to a temporary name and renamed, so a
reader never sees half of one. Deleting the folder is always safe.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

FORMAT = 1  # bump when the stored layout or the meaning of a field changes
MAX_BYTES = 64 * 2**20  # FEMNIST's LEAF subset is 51 MB, the rest under 1 MB; tables above it are not kept
Arrays = dict[str, np.ndarray]


def cache_dir(kind: str) -> Path | None:
    """The folder tables of ``kind`` are kept in, or None when the cache is off."""
    chosen = os.environ.get("IOTFL_CACHE_DIR", "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen) / kind
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "iotfl-sim" / kind


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A digest of every module in ``iotfl_sim/fl/``: any edit there (a model, a FLOP rule) changes every key."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in sorted(here.rglob("*.py")):  # fl/ and its packages (models/, data/, cost/)
        digest.update(path.relative_to(here).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def key(*parts: object) -> str:
    """The file name for a table of ``parts`` (reprs of frozen dataclasses, numbers, flags) under this code
    and this PyTorch."""
    text = "\n".join([str(FORMAT), torch.__version__, code_fingerprint(), *map(repr, parts)])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def load(kind: str, name: str, valid: Callable[[Arrays], bool]) -> Arrays | None:
    """The arrays stored under ``name``, or None when absent, unreadable, or refused by ``valid`` (the
    caller's check of names, shapes and dtypes)."""
    folder = cache_dir(kind)
    if folder is None:
        return None
    path = folder / f"{name}.npz"
    try:
        with zipfile.ZipFile(path) as archive:  # the sizes its members unpack to, before unpacking any
            if sum(info.file_size for info in archive.infolist()) > MAX_BYTES:
                return None
        with np.load(path, allow_pickle=False) as data:
            arrays = {field: data[field] for field in data.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    try:
        return arrays if valid(arrays) else None
    except (KeyError, ValueError, TypeError, IndexError):
        return None


def store(kind: str, name: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Keep ``arrays`` under ``name``; silently nothing where the folder cannot be written or the arrays are
    larger than ``load`` accepts."""
    folder = cache_dir(kind)
    if folder is None or sum(a.nbytes + 256 for a in arrays.values()) > MAX_BYTES:  # 256: an npy header
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)
            os.replace(tmp, folder / f"{name}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return


def has(arrays: Arrays, fields: Mapping[str, tuple[str, int]]) -> bool:
    """Whether ``arrays`` holds exactly ``fields``, each of the given dtype kind ('f', 'i', 'U') and number of
    dimensions (the check most tables need before their own length checks)."""
    return set(arrays) == set(fields) and all(
        arrays[f].dtype.kind == kind and arrays[f].ndim == ndim for f, (kind, ndim) in fields.items()
    )
