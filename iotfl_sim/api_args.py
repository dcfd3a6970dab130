"""The Python API's checks of what it is given: an argument of the wrong kind, or a file of a run or a study
that cannot be read back, is one exception naming the argument (or the file) and the fix.

Both exceptions are ``ScenarioError``s (the API's bad input, printed as one line by the commands) and also the
built-in exception a Python caller expects: ``TypeError`` for an argument of the wrong kind (``sets="rounds=2"``
where a list goes), ``ValueError`` for a file whose contents are damaged.
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iotfl_sim.core.errors import ScenarioError


class ArgumentError(ScenarioError, TypeError):
    """An argument of an API function of the wrong kind."""


class DamagedFile(ScenarioError, ValueError):
    """A run's or a study's file that cannot be read back (truncated, edited, not what the tool wrote)."""


def _got(value: Any) -> str:
    kind = "the class" if isinstance(value, type) else f"the {type(value).__name__}"
    return f"{kind} {reprlib.repr(value) if not isinstance(value, type) else value.__qualname__}"


def strings(where: str, value: Any, example: str) -> list[str] | None:
    """None, or a list (or tuple) of strings; ``example`` shows the argument written right."""
    if value is None:
        return None
    if isinstance(value, str):
        raise ArgumentError(f"{where}: a list of strings, got {_got(value)}; write [{value!r}] ({example})")
    if not isinstance(value, Sequence):
        raise ArgumentError(f"{where}: a list of strings, got {_got(value)} ({example})")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ArgumentError(f"{where}: item {i} is {_got(item)}, not a string ({example})")
    return list(value)


def path(where: str, value: Any, optional: bool = False) -> Path | None:
    """A file or folder path: a str or an os.PathLike (None too when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, str | os.PathLike) and str(value):
        return Path(value)
    raise ArgumentError(f"{where}: a path (a str or a pathlib.Path), got {_got(value)}")


def paths(where: str, value: Any) -> list[Path]:
    """One path, or a list (or tuple) of paths."""
    if isinstance(value, str | os.PathLike):
        return [path(where, value)]  # type: ignore[list-item]
    if not isinstance(value, Sequence) or not value:
        raise ArgumentError(f"{where}: a path or a list of paths, got {_got(value)}")
    return [path(f"{where}[{i}]", p) for i, p in enumerate(value)]  # type: ignore[misc]


def flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{where}: True or False, got {_got(value)}")
    return value


def count(where: str, value: Any) -> int | None:
    """None, or a whole number of at least 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{where}: a whole number of at least 1 (or None), got {_got(value)}")
    return value


def classes(where: str, value: Any) -> list[type]:
    """A list (or tuple) of classes."""
    if isinstance(value, type):
        raise ArgumentError(f"{where}: a list of classes, got {_got(value)}; write [{value.__qualname__}]")
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ArgumentError(f"{where}: a list of Strategy classes, got {_got(value)}")
    return list(value)


def callable_or_none(where: str, value: Any, what: str) -> Any:
    if value is not None and not callable(value):
        raise ArgumentError(f"{where}: {type(value).__name__} is not callable; give {what}")
    return value
