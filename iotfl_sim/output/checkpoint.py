"""Checkpoints in a run folder: written atomically at round boundaries, loaded without arbitrary pickle.

::

    checkpoints/
      tape-000000-000010.pt     the strategy's answers recorded in rounds 1-10 (sim/tape.py); never rewritten
      round-000010/
        state.pt                the strategy's state, RNG states (``output.codec``; torch.load weights_only)
        meta.json               format, round, metric rows so far, file offsets, digests, SHA-256 of every file above

An asynchronous run stopped between two model versions (Ctrl-C with no version coming) checkpoints at that
step of its event loop instead: ``meta.json`` then adds ``step``, the folder is that of the last version (which it
replaces) and the tape file names end at ``<version>.<step>`` (``tape-000010-000010.57.pt``).

A checkpoint folder is written under a temporary name and renamed when whole, so a crash leaves either
the previous checkpoint or the new one. Loading checks every SHA-256 before it reads a file: a truncated
or edited checkpoint is refused with a message that says what to do. ``format`` is the layout's version
(``output.migrations``: an older one is migrated on resume, a newer one refused).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from iotfl_sim import faults
from iotfl_sim.core import safe_json
from iotfl_sim.core.errors import CheckpointError
from iotfl_sim.output.migrations import FORMAT, version_problem
from iotfl_sim.output.space import writing


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_bytes(path: Path, data: bytes, fault_point: str | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with writing(path), open(tmp, "wb") as f:
        if fault_point is not None:
            if faults.armed(fault_point):
                f.write(data[: len(data) // 2])
                f.flush()
            faults.hit(fault_point)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _tensor_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _load_tensors(path: Path, what: str) -> Any:
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to the user
        raise CheckpointError(f"{path}: cannot read the {what} ({type(e).__name__}); {FIX}") from None


def _plain(v: Any) -> Any:
    """numpy scalars in metric rows, as the Python numbers they stand for."""
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"not JSON: {type(v).__name__}")


FIX = "remove this checkpoint folder to resume from the one before it, or start a new run"


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _list_of(v: Any, ok: Any) -> bool:
    return isinstance(v, list) and all(ok(x) for x in v)


# what a resume reads from meta.json, and the test each value must pass (offsets: run_dir.check_offsets)
_META = {
    "state_sha256": ("a SHA-256 string", lambda v: isinstance(v, str)),
    "scenario_sha256": ("a SHA-256 string", lambda v: isinstance(v, str)),
    "tape": (
        "a list of tape files",
        lambda v: _list_of(v, lambda c: isinstance(c, dict) and isinstance(c.get("file"), str) and isinstance(c.get("sha256"), str)),
    ),
    "tape_counts": ("counts of recorded answers", lambda v: isinstance(v, dict) and all(_is_int(n) and n >= 0 for n in v.values())),
    "rows": (
        "a list of metric rows",
        lambda v: _list_of(v, lambda r: isinstance(r, dict) and all(type(x) in (int, float, bool, str, type(None)) for x in r.values())),
    ),
    "host": (
        "host times in seconds",
        lambda v: isinstance(v, dict) and {"setup", "total"} <= v.keys() and all(_is_number(x) for x in v.values()),
    ),
    "oracle_users": ("a list of names", lambda v: _list_of(v, lambda x: isinstance(x, str))),
    "digest": ("a list of numbers", lambda v: _list_of(v, lambda x: type(x) in (int, float))),
    "offsets": ("file offsets", lambda v: isinstance(v, dict)),
}


Position = tuple[int, "int | None"]  # (round, step): after round r (step None), or at a step after version r


def _label(pos: Position) -> str:
    rnd, step = pos
    return f"{rnd:06d}" if step is None else f"{rnd:06d}.{step}"


def meta_problem(meta: Any, rnd: int) -> str | None:
    """What is wrong with checkpoint description ``meta`` of the folder ``round-<rnd>`` (None: nothing); every
    value a resume reads is checked here, before anything is loaded or replayed."""
    if not isinstance(meta, dict):
        return f"a JSON {type(meta).__name__}, not an object"
    version = version_problem(meta)  # an older format is migrated after loading (output.migrations)
    if version is not None:
        return version
    if not (_is_int(meta.get("round")) and meta["round"] == rnd):
        return f"round {meta.get('round')!r}, not {rnd} as its folder's name says"
    for key, (what, ok) in _META.items():
        if key not in meta:
            return f"no {key!r}"
        if not ok(meta[key]):
            return f"{key!r} is not {what}"
    if "step" in meta and not (_is_int(meta["step"]) and meta["step"] >= 0):
        return "'step' is not a step count"
    return None


class CheckpointStore:
    def __init__(self, run_dir: Path, keep: int = 2) -> None:
        self.dir = run_dir / "checkpoints"
        self.keep = keep
        self.state_file: Path | None = None  # set by load_latest

    # ------------------------------------------------------------ writing

    def write(
        self, rnd: int, state: dict[str, Any], meta: dict[str, Any], chunks: list[dict[str, Any]],
        tape_chunk: dict[str, list], tape_from: Position, step: int | None = None,
    ) -> list[dict[str, Any]]:
        """Write the checkpoint after round ``rnd`` (``step``: at that step of an asynchronous run's interval after
        version ``rnd``, ``sim.async_server``; it replaces the checkpoint of version ``rnd``); ``chunks`` lists the
        tape files so far, and ``tape_chunk`` holds the answers recorded since position ``tape_from``. Returns the
        tape files now listed."""
        with writing(self.dir):
            self.dir.mkdir(exist_ok=True)
        chunks = list(chunks)
        if tape_from != (rnd, step):
            name = f"tape-{_label(tape_from)}-{_label((rnd, step))}.pt"
            _write_bytes(self.dir / name, _tensor_bytes(tape_chunk))
            chunks.append({"file": name, "from": tape_from[0], "to": rnd, "sha256": sha256(self.dir / name)})
        final = self.dir / f"round-{rnd:06d}"
        tmp = self.dir / f".tmp-round-{rnd:06d}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        with writing(tmp):
            tmp.mkdir()
        _write_bytes(tmp / "state.pt", _tensor_bytes(state), fault_point="checkpoint_write")
        meta = {**meta, "format": FORMAT, "round": rnd, "tape": chunks, "state_sha256": sha256(tmp / "state.pt")}
        if step is not None:
            meta["step"] = step
        _write_bytes(tmp / "meta.json", (json.dumps(meta, indent=1, default=_plain) + "\n").encode())
        if final.exists():  # a resumed run reached this round again: the new one replaces it whole
            old = self.dir / f".old-round-{rnd:06d}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        faults.hit("checkpoint_done")
        self._prune()
        return chunks

    def _prune(self) -> None:
        rounds = self.rounds()
        for r in rounds[: max(len(rounds) - self.keep, 0)]:
            shutil.rmtree(self.dir / f"round-{r:06d}", ignore_errors=True)

    # ------------------------------------------------------------ reading

    def check_folder(self) -> None:
        """A ``checkpoints`` path that is there but not a folder is refused (a resume would otherwise take the
        run for one killed before its first checkpoint and start it over)."""
        if os.path.lexists(self.dir) and not self.dir.is_dir():
            raise CheckpointError(
                f"{self.dir}: not a folder; a run keeps its checkpoints in this folder: move that file away "
                "(the run then starts over on --resume), or start a new run"
            )

    def rounds(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in self.dir.iterdir():
            if p.is_dir() and p.name.startswith("round-") and p.name[6:].isdigit():
                out.append(int(p.name[6:]))
        return sorted(out)

    def clean_partial(self) -> None:
        """Remove what a crash mid-write left behind (temporary folders and files)."""
        if not self.dir.is_dir():
            return
        for p in self.dir.iterdir():
            if p.name.startswith((".tmp-", ".old-")):
                shutil.rmtree(p, ignore_errors=True)
            elif p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)

    def load_latest(self) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, list]]] | None:
        """(meta, state, tape chunks) of the newest checkpoint, verified; None if there is none. Reads only;
        ``state_file`` names the state file loaded."""
        self.check_folder()
        rounds = self.rounds()
        if not rounds:
            return None
        folder = self.dir / f"round-{rounds[-1]:06d}"
        meta_path = folder / "meta.json"
        try:
            meta = safe_json.read(meta_path)
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{meta_path}: missing or not readable JSON ({e}); {FIX}") from None
        version = version_problem(meta) if isinstance(meta, dict) and type(meta.get("format")) is int else None
        if version is not None:  # a format this release cannot read: the folder before it has the same
            raise CheckpointError(f"{meta_path}: {version}")
        problem = meta_problem(meta, rounds[-1])
        if problem is not None:
            raise CheckpointError(f"{meta_path}: not a checkpoint description ({problem}); {FIX}")
        state_path = folder / "state.pt"
        self._verify(state_path, meta["state_sha256"])
        tape = []
        for c in meta["tape"]:
            path = self.dir / c["file"]
            if path.parent != self.dir:
                raise CheckpointError(f"{meta_path}: names a tape file outside the checkpoint folder; {FIX}")
            self._verify(path, c.get("sha256"))
            tape.append(_load_tensors(path, "strategy's recorded answers"))
        state = _load_tensors(state_path, "saved state")
        self.state_file = state_path
        return meta, state, tape

    @staticmethod
    def _verify(path: Path, expected: Any) -> None:
        if not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint; {FIX}")
        if sha256(path) != expected:
            raise CheckpointError(f"{path}: its SHA-256 does not match meta.json (truncated or changed); {FIX}")
