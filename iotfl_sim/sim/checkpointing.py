"""Checkpoints of a running simulation, and the replay that resumes one: beside the engine, not inside it.

``write`` saves, after a round, what a faithful continuation needs that replay cannot rebuild: the strategy's
declared state (``Strategy.checkpointed``), the global RNG states, the rows so far, host times, the run files'
offsets, the engine's and the fleet's digest and the tape of the strategy's answers (``sim.tape``, kept in ``CheckpointState.tape``).
``begin_resume`` loads a checkpoint's tape; the engine then replays the checkpoint's rounds without training
(the tape answers for the strategy) and calls ``end_replay``, which checks that the replay reproduced the
checkpoint (every answer used, the same digest) before anything is written, then restores the saved state.

These functions never see the ``Simulation``: ``Simulation.checkpointed_run`` hands them a ``CheckpointedRun``,
which names what a checkpoint reads of a run and what a resume writes back.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from iotfl_sim.algorithms.base import ENGINE_SHARED, ServerWork, Strategy
from iotfl_sim.core.errors import CheckpointError
from iotfl_sim.output import codec, migrations, tensor_check
from iotfl_sim.output.checkpoint import FIX, CheckpointStore, Position
from iotfl_sim.output.run_dir import RunRecorder, scenario_sha256
from iotfl_sim.sim.tape import Tape

if TYPE_CHECKING:
    from iotfl_sim.scenario.model import Checkpoint
    from iotfl_sim.sim.host import Host
    from iotfl_sim.sim.round import WeightsCheck
    from iotfl_sim.sim.server_loop import ServerLoop


@dataclass
class CheckpointState:
    """A run's checkpointing: where checkpoints go (None: nowhere), the last one written, the tape chunks, and
    the checkpoint a resumed run replays up to (``resume_round``; ``pending`` until the replay has been checked)."""

    store: CheckpointStore | None = None
    last: tuple[int, float] = field(default_factory=lambda: (0, time.perf_counter()))  # (round, host instant)
    tape_from: Position = (0, None)  # (round, step) the current tape chunk starts at
    tape_files: list[dict[str, Any]] = field(default_factory=list)  # tape chunks written so far (listed in each checkpoint)
    resume_round: int = 0  # rounds before this one are replayed from the tape
    resume_step: int | None = None  # an asynchronous run's checkpoint between versions: the step its replay ends at
    pending: tuple[dict[str, Any], dict[str, Any]] | None = None  # (meta, state) to restore after the replay
    source: Path | None = None  # the state file of that checkpoint (named when a value in it is refused)
    tape: Tape = field(default_factory=lambda: Tape(recording=False))  # the method's answers; run_scenario / resume_run turn it on


@dataclass(frozen=True)
class CheckpointedRun:
    """What a checkpoint reads of a run and what a resume writes back into it, and nothing else of it. The
    engine builds one at each use (``Simulation.checkpointed_run``), so it holds the recorder and the digest of
    that moment; a resume writes into the objects it names (``rows`` and ``oracle_users`` in place, ``host``'s
    times), never into the engine."""

    ck: CheckpointState
    strategy: Strategy  # its declared state (``Strategy.checkpointed``): saved, checked and restored
    loop: ServerLoop  # the server mode's own entries (``capture``, ``restore``, ``between_versions``)
    host: Host  # host seconds by phase: saved, and a resumed run's continued from the saved ones
    rows: list[dict[str, Any]]  # the rows so far: saved, and restored in place
    oracle_users: set[str]  # who asked for the simulator's true state (the server's view): saved, restored in place
    server_work: ServerWork  # drained once the replay ends: its set-up work was charged in round 1 already
    recorder: RunRecorder | None  # the run's files: their offsets saved (None: a run that writes none)
    digest: list[float]  # the engine's and the fleet's figures now, which a faithful replay reproduces


def due(ck: CheckpointState, cfg: Checkpoint, done: int) -> bool:
    """Whether a checkpoint is due after ``done`` rounds (``cfg``, ``output.checkpoint``: every so many rounds or
    seconds)."""
    if ck.store is None:
        return False
    last_round, last_t = ck.last
    if cfg.every_rounds is not None and done - last_round >= cfg.every_rounds:
        return True
    return cfg.every_s is not None and time.perf_counter() - last_t >= cfg.every_s


def write(run: CheckpointedRun, done: int, step: int | None = None) -> None:
    """Write a checkpoint after ``done`` rounds (see ``output.checkpoint`` and ``sim.tape``), or at ``step`` of an
    asynchronous run's interval after version ``done`` (``sim.async_server``: a stop between versions)."""
    ck = run.ck
    if ck.store is None or run.recorder is None:
        return
    state = {
        "strategy": codec.capture(run.strategy, run.strategy.checkpointed, ENGINE_SHARED),
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": codec.encode(np.random.get_state()),
            "python": codec.encode(random.getstate()),
        },
    }
    state.update(run.loop.capture())  # e.g. the weights the devices in flight downloaded
    host_total = run.host.elapsed()
    meta = {
        "rows": run.rows,
        "host": {**run.host.times, "total": host_total},
        "oracle_users": sorted(run.oracle_users),
        "offsets": run.recorder.offsets(),
        "digest": run.digest,
        "tape_counts": ck.tape.counts(),
        "scenario_sha256": scenario_sha256(run.recorder.path),
    }
    chunk = codec.encode(ck.tape.new_chunk())
    ck.tape_files = ck.store.write(done, state, meta, ck.tape_files, chunk, ck.tape_from, step)
    ck.tape_from = (done, step)
    ck.last = (done, time.perf_counter())


def begin_resume(
    run: CheckpointedRun, meta: dict[str, Any], state: dict[str, Any], tape: list[dict[str, list]], source: Path
) -> None:
    """Set up a resumed run: bring the checkpoint (``source``: its state file) to this release's format, check
    the values it restores against the freshly set-up run, then replay the checkpoint's rounds from its tape
    and load its state. The engine then hands the run the resume's recorder, which follows the replay (it skips
    the event lines already on disk; rows are not replayed)."""
    migrations.upgrade(meta, state, type(run.strategy), source)
    ck = run.ck
    ck.source = source
    _check_state(run, state)
    ck.tape.load([codec.decode(chunk) for chunk in tape])
    if ck.tape.counts() != meta.get("tape_counts"):
        raise CheckpointError("checkpoint: its tape files do not hold what meta.json counts; start a new run")
    ck.resume_round = int(meta["round"])
    ck.resume_step = meta.get("step")
    if ck.resume_step is not None and not run.loop.between_versions:
        raise CheckpointError("checkpoint: taken between two versions of an asynchronous run, but this run is not one; start a new run")
    ck.pending = (meta, state)
    ck.tape_files = meta["tape"]
    ck.tape_from = (ck.resume_round, ck.resume_step)


def _refuse(ck: CheckpointState, problem: str) -> CheckpointError:
    return CheckpointError(
        f"{ck.source}: {problem}: not what this run builds (the file was changed and its SHA-256 "
        f"rewritten, or the run had diverged); {FIX}"
    )


def _decoded(ck: CheckpointState, v: Any, where: str) -> Any:
    try:
        return codec.decode(v)
    except CheckpointError as e:
        raise _refuse(ck, f"{where}: {e}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RuntimeError):
        raise _refuse(ck, f"{where} cannot be decoded") from None


def _check_state(run: CheckpointedRun, state: Any) -> None:
    """Every value of the checkpoint's state that is restored before the replay ends, against the run's own:
    the strategy's declared attributes as set up now, the RNG states (``output.tensor_check``)."""
    ck = run.ck
    if not isinstance(state, dict) or not isinstance(state.get("strategy"), dict) or not isinstance(state.get("rng"), dict):
        raise _refuse(ck, "no 'strategy' and 'rng' entries")
    strategy = run.strategy
    now = {n: getattr(strategy, n) for n in strategy.checkpointed}
    model = tensor_check.named_tensors(now)
    for name, saved in state["strategy"].items():
        if name in now:
            where = f"strategy[{name!r}]"
            problem = tensor_check.mismatch(_decoded(ck, saved, where), now[name], where, model)
            if problem is not None:
                raise _refuse(ck, problem)
    rng = state["rng"]
    for name, ref in (("torch", torch.get_rng_state()), ("numpy", np.random.get_state()), ("python", random.getstate())):
        where = f"rng[{name!r}]"
        if name not in rng:
            raise _refuse(ck, f"no {where}")
        problem = tensor_check.mismatch(_decoded(ck, rng[name], where), ref, where)
        if problem is not None:
            raise _refuse(ck, problem)


def _weights_check(strategy: Strategy, entry: str) -> WeightsCheck:
    """How the weights of a task in flight (``entry``: in_flight, late) are checked: against what its device
    would download now, the strategy's payload or its slice to the task's submodel."""

    def check(task: Any, saved: Any, where: str) -> str | None:
        a = task.assignment
        sent = strategy.payload(a)
        sub = strategy.recipe_for(a).shapes(a.spec) if sent else {}
        return tensor_check.weights_mismatch(saved, sent, sub, f"{entry}{where}")

    return check


def end_replay(run: CheckpointedRun) -> None:
    """After the replay of the checkpoint's rounds: refuse a replay that did not reproduce the checkpoint
    (before anything is written), then put the saved state back and let the run's files be written."""
    ck = run.ck
    assert ck.pending is not None
    meta, state = ck.pending
    left = ck.tape.unconsumed()
    if run.recorder is not None and run.recorder.replay_pending:
        left["event lines"] = run.recorder.replay_pending
    if left or run.digest != meta.get("digest"):
        raise CheckpointError(
            f"checkpoint of round {ck.resume_round}: replaying the run does not reproduce it "
            f"({'unused answers: ' + str(left) if left else 'the fleet state differs'}); the code or the data "
            "changed since the run started: start a new run"
        )
    codec.restore(run.strategy, state["strategy"], run.strategy.checkpointed)
    try:
        run.loop.restore(state, lambda entry: _weights_check(run.strategy, entry))
    except CheckpointError as e:
        raise _refuse(ck, str(e)) from None
    run.server_work.drain()  # set-up work was charged in round 1 already
    rng = state["rng"]
    try:
        torch.set_rng_state(rng["torch"])
        np.random.set_state(codec.decode(rng["numpy"]))
        random.setstate(codec.decode(rng["python"]))
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise _refuse(ck, f"rng: {e}") from None
    run.rows[:] = [dict(r) for r in meta["rows"]]
    run.oracle_users.clear()
    run.oracle_users.update(meta["oracle_users"])
    host = run.host
    saved = meta["host"]
    elapsed = host.elapsed()  # set-up and replay of this process
    host.times = {**saved, "setup": saved["setup"] + elapsed}
    del host.times["total"]
    host.t_created -= saved["total"]
    ck.pending = None
    ck.last = (ck.resume_round, time.perf_counter())
    # every check passed: from here on the run writes (its files cut back to the checkpoint's offsets)
    if ck.store is not None:
        ck.store.clean_partial()
    if run.recorder is not None:
        run.recorder.begin()
