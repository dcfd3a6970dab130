"""The Strategy interface every FL method implements, and the plain data it exchanges with the engine.

A strategy never sees the simulator's internals: it gets a ``FleetView`` (what a real server could
know: declared profiles and the history of outcomes) and plain data. A strategy that assumes the
server knows devices' true current resources must say so by calling ``FleetView.true_state``; the
run summary then reports that the method used oracle knowledge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch

from iotfl_sim.catalog import FAILURE_REASONS
from iotfl_sim.fl.objectives import LocalObjective
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec

State = dict[str, torch.Tensor]
__all__ = [
    "AggregateWork", "Assignment", "DeviceState", "InferWork", "LocalObjective", "Outcome", "QsgdWork", "ServerWork",
    "Strategy", "StrategyContext", "TrainWork", "Update", "Work",
]


TaskStatus = Literal[("completed", *FAILURE_REASONS)]  # type: ignore[valid-type]

@dataclass
class Assignment:
    """One task: which device trains which submodel, at what upload precision."""

    device: int
    spec: SubmodelSpec
    level: str = ""
    bits: int = 32
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceState:
    """What a device knows about itself when a task arrives (used by ``Strategy.adapt``)."""

    device: int
    free_memory_bytes: float
    battery_left_j: float


@dataclass
class Outcome:
    """What happened to one task, as the server sees it after the round."""

    assignment: Assignment
    status: TaskStatus  # "completed" (accepted), or why it failed: one of catalog.FAILURE_REASONS
    trained: Assignment | None = None  # the assignment after device-side adaptation
    finished_at: float = float("nan")


@dataclass
class Update:
    """A trained submodel coming back from a device."""

    assignment: Assignment
    state: State
    num_samples: int
    label_set: np.ndarray
    loss: float


@dataclass
class EvalTarget:
    """A model the server evaluates: ``label`` is a column suffix in rounds.csv (acc_<label>)."""

    label: str
    spec: SubmodelSpec
    state: State
    recipe: ModelRecipe
    is_level: bool = True  # counted in the "avg" column


@dataclass(frozen=True)
class TrainWork:
    """Server-side training (pretraining, fine-tuning, a distilled student): ``epochs`` passes over
    ``samples`` samples of ``spec`` at ``batch`` per step, priced like a device's training step."""

    recipe: ModelRecipe
    spec: SubmodelSpec
    samples: int
    epochs: int = 1
    batch: int = 32
    momentum: float = 0.0  # SGD momentum of the server's optimizer (0: plain SGD)
    l2_pull: bool = False  # the loss adds an L2 pull of every parameter towards a reference (FedX eq. 5)


@dataclass(frozen=True)
class InferWork:
    """Forward passes only (APoZ scoring, a teacher ensemble's logits, CKA features, a search's scoring)."""

    recipe: ModelRecipe
    spec: SubmodelSpec
    samples: int
    batch: int = 100


@dataclass(frozen=True)
class AggregateWork:
    """Averaging ``values_in`` received values in ``tensors_in`` tensors (every client's, summed) into
    ``values_out`` global values."""

    values_in: float
    values_out: float
    tensors_in: int = 0


@dataclass(frozen=True)
class QsgdWork:
    """QSGD over ``values`` values in ``tensors`` tensors: quantize and encode (``decode=False``), or decode a
    received message."""

    values: float
    tensors: int = 0
    decode: bool = False


# One item of server work: a typed item, or plain FLOPs (work with no better model: CKA's Gram products,
# a search's arithmetic), priced at the server's FLOP/s.
Work = TrainWork | InferWork | AggregateWork | QsgdWork | float
SERVER_WORK_KINDS = ("train", "infer", "aggregate", "qsgd", "other")  # rounds.csv: server_<kind>_s


def work_kind(work: Work) -> str:
    """Which of ``SERVER_WORK_KINDS`` an item of server work is."""
    kinds = {TrainWork: "train", InferWork: "infer", AggregateWork: "aggregate", QsgdWork: "qsgd"}
    return kinds.get(type(work), "other")


@dataclass
class ServerWork:
    """Work the server does (pretraining, APoZ, distillation, quantization ...), charged on the simulated clock.

    A strategy runs the work for real on the host and calls ``charge`` with what it did; the engine prices
    each item with the server's cost model (``sim/server_cost.py``: the per-operator roofline of the server
    profile, or FLOPs / ``server.compute.flops``) and puts it on the simulated clock at the next point of the
    round where the server computes: before dispatch (work done in ``setup``, ``select`` or ``dispatch``) or
    after aggregation (work done in ``receive``, ``aggregate`` or ``observe``). The engine charges every
    method's aggregation itself (``AggregateWork`` of the accepted updates); a strategy charges only work of
    its own.
    """

    pending: list[tuple[str, Work]] = field(default_factory=list)

    def charge(self, what: str, work: Work) -> None:
        if isinstance(work, (TrainWork, InferWork, AggregateWork, QsgdWork)):
            self.pending.append((what, work))
            return
        if isinstance(work, bool) or not isinstance(work, (int, float)) or not work >= 0:
            raise ValueError(f"server work {what!r}: FLOPs must be a non-negative number, got {work!r}")
        self.pending.append((what, float(work)))

    def drain(self) -> list[tuple[str, Work]]:
        out, self.pending = self.pending, []
        return out


class FleetView(Protocol):
    """What a strategy may know of the fleet when it selects (``sim.engine._View`` states the rule)."""

    num_devices: int
    now: float  # simulated seconds at this selection
    rnd: int  # the round being selected (0-based)

    def selectable(self) -> np.ndarray: ...  # indices of online devices not known to be gone and not busy

    def selectable_mask(self) -> np.ndarray: ...  # the same as a boolean mask over all devices

    def declared_free_memory(self) -> np.ndarray: ...  # bytes, per device, from the declared profiles

    def true_state(self, strategy: str) -> Any: ...  # oracle access; recorded in the summary


@dataclass
class StrategyContext:
    """Everything a strategy may use to set itself up."""

    recipe: ModelRecipe  # the model family at global rate 1.0; strategies derive their own
    num_devices: int
    samples_per_device: np.ndarray
    labels_per_device: list[np.ndarray]
    num_classes: int
    seed: int
    rounds: int
    clients_per_round: int
    memory_need: Any  # callable(recipe, spec) -> bytes needed on the device to train spec
    declared_free_memory: np.ndarray  # bytes per device
    initial_state: Any  # callable(recipe, spec) -> State, seeded
    server_work: ServerWork = field(default_factory=ServerWork)
    data: Any = None  # the run's dataset (fl.data.Dataset) for server-side work; None in system-only mode
    parts: list[np.ndarray] | None = None  # each device's train indices (None in system-only mode)
    proxy_indices: np.ndarray | None = None  # train indices held out for the server (config's proxy_fraction)
    # callable(recipe, spec) -> seconds per device of one local round of spec by each declared profile (the
    # cost model without jitter: what a server predicts from the profiles devices declare); None: unknown
    predict_train_seconds: Any = None
    min_participants: int = 1  # the engine aggregates a round only with at least this many updates


class Strategy(Protocol):
    """A method. Optional attributes the engine reads with ``getattr``: ``dispatch``, ``wire_bytes``,
    ``receive`` (quantized messages, ``common.WireMixin``) and ``ignores_memory`` (True: memory never fails
    a task and the memory feasibility check is skipped, for an upper-bound baseline such as fedavg's
    ``memory: ignore``)."""

    name: str

    def setup(self, ctx: StrategyContext) -> None: ...

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]: ...

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]: ...

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None: ...

    def recipe_for(self, assignment: Assignment) -> ModelRecipe: ...

    def payload(self, assignment: Assignment) -> State: ...

    def local_objective(self, assignment: Assignment) -> LocalObjective: ...

    def aggregate(self, rnd: int, updates: list[Update]) -> None: ...

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None: ...

    def eval_targets(self) -> list[EvalTarget]: ...


def random_selection(candidates: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct devices chosen uniformly from ``candidates`` (without replacement; pitfall 8)."""
    if len(candidates) <= k:
        return np.sort(candidates)
    return np.sort(candidates[rng.choice(len(candidates), size=k, replace=False)])


Eligible = np.ndarray | Callable[[np.ndarray], np.ndarray] | None


def select_uniform(fleet: FleetView, k: int, rng: np.random.Generator, eligible: Eligible = None) -> np.ndarray:
    """k distinct devices (sorted) uniformly at random among the selectable devices that are ``eligible``;
    all of them when there are k or fewer. ``eligible``: a bool array over devices, or a function mapping
    an id array to a bool mask (evaluated only on the ids it is asked about), or None (every device).

    The one selection of every method that picks uniformly among selectable (and eligible) devices. A
    view that offers ``sample_selectable`` (the engine's, for fleets of 100,000 devices or more) samples
    without building the fleet-wide mask; otherwise, or when sampling finds too few, the mask of
    selectable and eligible devices goes to ``random_selection`` (the draws small runs have always had).
    """
    sample = getattr(fleet, "sample_selectable", None)
    if sample is not None:
        chosen = sample(k, rng, eligible)
        if chosen is not None:
            return chosen
    mask = fleet.selectable_mask()
    if eligible is not None:
        mask = mask & (eligible if isinstance(eligible, np.ndarray) else eligible(np.arange(mask.shape[0])))
    return random_selection(np.flatnonzero(mask), k, rng)
