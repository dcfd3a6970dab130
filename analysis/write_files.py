"""Several output files written as one: every file or none.

A report made of several files (a table and its figure, a CSV and the page that renders it) must not be left
half-replaced when the disk fills or a path is unwritable: each file goes to a temporary file beside its target
first, and only when every one is written are they renamed into place."""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path


def write_all(files: Mapping[Path, str | bytes]) -> list[Path]:
    """Write every file of ``files`` (path -> text, UTF-8, or bytes) whole, or leave every path as it was.

    Refused before anything is written: a path where something other than a file stands (a folder, a device),
    a file where one of its folders should be.
    Parent folders are created as needed. Raises OSError naming the path that failed; the temporary files are
    removed. Returns the paths written."""
    for path in files:
        if path.exists() and not path.is_file():
            raise OSError(errno.EISDIR, "something other than a file is there", str(path))
        folder = next(p for p in path.parents if p.exists())
        if not folder.is_dir():
            raise OSError(errno.ENOTDIR, f"a file stands where a folder of {path} should be", str(folder))
    staged: list[tuple[Path, Path]] = []
    path = None
    try:
        for path, content in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            staged.append((tmp, path))
            tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        for tmp, path in staged:
            os.replace(tmp, path)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return list(files)
