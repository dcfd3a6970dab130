"""Checkpoint format versions and the migrations between them.

A checkpoint's ``meta.json`` names the format that wrote it (``format``). This release writes ``FORMAT``
and resumes every format from ``OLDEST`` on: ``upgrade`` applies, in order, the migration from each older
format to the next (``MIGRATIONS[i]`` takes format ``OLDEST + i`` to ``OLDEST + i + 1``), each a function over
the stored meta and state (a renamed or regrouped piece of state). What no migration can turn into today's
layout is refused in one line naming the format that wrote it and the release that can resume it.

Formats:

1. Written before formats were counted (every checkpoint up to this file, ``"format": 1``). Up to commit
   6b25955 (the public Strategy API) a strategy's state was every public attribute of the strategy; since
   then it is the attributes the method declares (``Strategy.checkpointed``), its messages in ``wire``.
2. The strategy's declared state only (what format 1 holds since 6b25955); FedAvg's earlier state regrouped.

A change to what a checkpoint holds raises ``FORMAT``, appends its migration here (or a refusal, for what
cannot be rebuilt), and adds a fixture of the new format (tests/fixtures/README.md says how).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from iotfl_sim.core.errors import CheckpointError

FORMAT = 2  # what this release writes
OLDEST = 1  # the oldest format it resumes

_FIX = "start the run again"
# where format 1 changed layout: checkpoints written before this commit resume with the release before it
_STRATEGY_API = "6b25955"

# FedAvg before the public Strategy API: all its public attributes, its QSGD channel in ``wire`` and the wire's
# switch and precisions beside it (``WireMixin.setup_wire``)
_FEDAVG_BEFORE_API = {"download_bits", "eligible", "recipe", "spec", "state", "upload_bits", "wire", "wire_on"}


def version_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with ``meta``'s format for this release (None: it resumes, migrated if older)."""
    v = meta.get("format")
    if type(v) is not int or v < 1:
        return f"format {v!r}, not a checkpoint format number"  # a damaged description (checkpoint.meta_problem)
    if v > FORMAT:
        return (
            f"checkpoint format {v}, written by a newer iotfl-sim; this release reads formats {OLDEST} to {FORMAT}: "
            "resume the run with the release that wrote it, or a later one"
        )
    if v < OLDEST:
        return f"checkpoint format {v}; this release reads formats {OLDEST} to {FORMAT}: {_FIX}"
    return None


def _strategy_api(meta: dict[str, Any], state: dict[str, Any], cls: type, source: Path) -> None:
    """1 -> 2: FedAvg's state of before the public Strategy API regrouped as today's (``state``, ``wire``:
    the switch, the precisions and the QSGD channel of ``algorithms.wire.QsgdWire``); the rest of its
    attributes then were set up from the scenario, which a resumed run does again. Another method's state of
    that time is refused; a state already in today's layout passes unchanged."""
    saved = state.get("strategy")
    if not isinstance(saved, dict) or set(saved) == set(cls.checkpointed):
        return
    if cls.__module__ == "iotfl_sim.algorithms.fedavg" and set(saved) == _FEDAVG_BEFORE_API:
        wire = {"on": saved["wire_on"], "channel": saved["wire"], "upload_bits": saved["upload_bits"],
                "download_bits": saved["download_bits"]}  # fmt: skip
        state["strategy"] = {"state": saved["state"], "wire": {"__obj__": wire}}
        return
    raise CheckpointError(
        f"{source}: checkpoint format 1 holds {cls.__qualname__} state ({', '.join(sorted(saved))}) as iotfl-sim "
        f"kept it before commit {_STRATEGY_API} (the public Strategy API); this release reads format {FORMAT} and "
        f"migrates only FedAvg's from it: resume the run with iotfl-sim at commit {_STRATEGY_API}^, or {_FIX}"
    )


Migration = Callable[[dict[str, Any], dict[str, Any], type, Path], None]
MIGRATIONS: list[Migration] = [_strategy_api]
assert OLDEST + len(MIGRATIONS) == FORMAT


def upgrade(meta: dict[str, Any], state: dict[str, Any], strategy_class: type, source: Path) -> None:
    """Bring a checkpoint of an older format (``meta``, ``state``, read from ``source``; ``version_problem``
    passed) to ``FORMAT`` in place; ``strategy_class``: the run's method. Raises ``CheckpointError``."""
    for step in MIGRATIONS[meta["format"] - OLDEST :]:
        step(meta, state, strategy_class, source)
    meta["format"] = FORMAT
