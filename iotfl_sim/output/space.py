"""Writes that find no space: a full disk (ENOSPC), a full quota (EDQUOT) or the process's file size limit
(EFBIG, ``ulimit -f``) end a run with one line that names the file and says how to continue.

Every write of a run folder goes through ``writing(path)``, which puts the file's name on the error (the
operating system names the file only when it is opened, not when a write to it fails). ``run_scenario``,
``resume_run`` and the sweep turn such an error into ``NoSpaceError`` (a ScenarioError: one line, exit
status 2). Nothing is lost: a run stops between two checkpoints, and ``iotfl-sim run --resume`` cuts its
files back to the last one, so once space is freed it ends with the files of a run never stopped.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from iotfl_sim.core.errors import ScenarioError

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class NoSpaceError(ScenarioError):
    """A write found no space left; the message names the file and the command that continues."""


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Name ``path`` on an OSError raised while it is written (a failed ``write`` or ``flush`` names nothing)."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = str(path)
        raise


def no_space(e: OSError, then: str) -> NoSpaceError | None:
    """The one-line error for ``e`` if it says there is no space (else None); ``then``: how to continue once
    space is freed, e.g. ``continue with: iotfl-sim run --resume RUN_DIR``."""
    if e.errno not in NO_SPACE:
        return None
    what = e.filename or "a file"
    return NoSpaceError(
        f"{what}: could not be written: the disk is full, or a quota or file size limit (ulimit -f) was reached "
        f"({e.strerror}); free some space, then {then}"
    )
