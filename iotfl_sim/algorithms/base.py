"""The Strategy interface every FL method implements, and the plain data it exchanges with the engine.

A strategy never sees the simulator's internals: it gets a ``FleetView`` (what a real server could
know: declared profiles and the history of outcomes) and plain data. A strategy that assumes the
server knows devices' true current resources must say so by calling ``FleetView.true_state``; the
run summary then reports that the method used oracle knowledge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import torch

from iotfl_sim.core.catalog import FAILURE_REASONS
from iotfl_sim.fl.aggregate import Contribution, aggregate_nested
from iotfl_sim.fl.objectives import LocalObjective
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec, slice_state
from iotfl_sim.scenario.algorithms import MethodConfig

State = dict[str, torch.Tensor]
__all__ = [
    "AggregateWork", "Assignment", "Asynchronous", "DeviceState", "Exclusive", "GlobalModel", "InferWork", "LocalObjective", "Outcome", "QsgdWork", "ServerWork",
    "Strategy", "StrategyContext", "Tier", "TrainWork", "Update", "Wire", "Work",
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
    power_mode: str | None = None  # a power mode of the device's profile to train in (None: its current one)


@dataclass(frozen=True)
class DeviceState:
    """What a device knows about itself when a task arrives (used by ``Strategy.adapt``)."""

    device: int
    free_memory_bytes: float
    battery_left_j: float  # its own reading (inf on mains): stored energy, or capacity minus energy used (docs/energy.md)


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
    staleness: int = 0  # server versions applied between the device's download and this update's aggregation
    weight: float = 1.0  # the staleness function's weight (semi_async: a late update counts this much)
    base: State | None = None  # asynchronous modes: the global weights the device downloaded and trained from


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


def work_kind(work: Work) -> str:
    """Which of ``core.catalog.SERVER_WORK_KINDS`` an item of server work is."""
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
    """What a strategy may know of the fleet when it selects (``sim.view.ServerView`` states the rule)."""

    num_devices: int
    now: float  # simulated seconds at this selection
    rnd: int  # the round being selected (0-based)
    # the devices this view selects among, as a bool mask over all devices: a gateway's under a hierarchy (each
    # gateway selects from its own devices); None: every device
    members: np.ndarray | None

    def selectable(self) -> np.ndarray: ...  # indices of online devices not known to be gone and not busy

    def selectable_mask(self) -> np.ndarray: ...  # the same as a boolean mask over all devices

    def sample_selectable(self, k: int, rng: np.random.Generator, eligible: Any = None) -> np.ndarray | None:
        """``k`` selectable (and ``eligible``) devices drawn uniformly without the fleet-wide mask (the engine's
        view does so for fleets of 100,000 devices or more), or None: no such shortcut, or too few found this
        way; ``select_uniform`` then draws from ``selectable_mask``."""

    def declared_free_memory(self) -> np.ndarray: ...  # bytes, per device, from the declared profiles

    def reported_battery(self) -> np.ndarray:
        """State of charge (0-1) per device as it last reported it; only when the scenario's fleet.reports lists
        battery (else a one-line error naming that field)."""

    def on_power(self) -> np.ndarray:
        """Per device: on mains or plugged into its charger now; only when fleet.reports lists power."""

    def true_state(self, strategy: str) -> Any: ...  # oracle access; recorded in the summary


@dataclass(frozen=True)
class RunLeft:
    """What is left of an asynchronous run when its server asks a round-based method for a dispatch wave (through
    the buffered form, ``sim.buffered_async``): ``updates``, the updates the run still needs before its last model
    version if no task fails from now on ((rounds - version) x buffer_size - updates buffered - tasks in flight),
    which the wave's ``clients_per_round`` slots start to fill; ``in_flight``, the tasks dispatched and not yet
    settled; ``versions``, the model versions the run still makes (rounds - the version the wave's tasks download),
    so that a schedule over rounds counts server steps (ScaleFL's exit-KD start)."""

    updates: int
    in_flight: tuple[Assignment, ...]
    versions: int


@dataclass
class StrategyContext:
    """Everything a strategy may use to set itself up."""

    recipe: ModelRecipe  # the model family at global rate 1.0; strategies derive their own
    num_devices: int
    samples_per_device: np.ndarray
    labels_per_device: list[np.ndarray]
    num_classes: int
    seed: int
    rounds: int  # the rounds the method sees: ``rounds``, times ``hierarchy.gateway_rounds`` under a hierarchy
    clients_per_round: int
    memory_need: Any  # callable(recipe, spec) -> bytes needed on the device to train spec
    declared_free_memory: np.ndarray  # bytes per device
    initial_state: Any  # callable(recipe, spec) -> State, seeded
    server_work: ServerWork = field(default_factory=ServerWork)
    data: Any = None  # the run's dataset (fl.data.datasets.Dataset) for server-side work; None in system-only mode
    parts: list[np.ndarray] | None = None  # each device's train indices (None in system-only mode)
    proxy_indices: np.ndarray | None = None  # train indices held out for the server (config's proxy_fraction)
    # callable(recipe, spec) -> seconds per device of one local round of spec by each declared profile (the
    # cost model without jitter: what a server predicts from the profiles devices declare); None: unknown
    predict_train_seconds: Any = None
    calib_x: Any = None  # the static-BN calibration inputs the engine's evaluation uses (None in system-only mode)
    min_participants: int = 1  # the engine aggregates a round only with at least this many updates
    # while the engine calls ``Strategy.observe``: whether it aggregated the round (or made the model version)
    # observed, which ``Strategy.aggregated`` answers; None at any other time
    round_aggregated: bool | None = None
    # while the asynchronous server's buffered form calls ``select`` for a dispatch wave: what is left of the run;
    # None at any other time (in rounds)
    run_left: RunLeft | None = None
    # who the engine calls the method for: "server" (the flat server, or the cloud of a hierarchy), "gateway" (a
    # gateway of a hierarchy, holding its own ``Tier``): e.g. server-side work a method does only at the top
    tier: Literal["server", "gateway"] = "server"
    gateway_rounds: int = 1  # a hierarchy's k2 (1 without one): the cloud's rounds are rounds / gateway_rounds


@dataclass
class Tier:
    """One gateway's own copy of a method's model under a hierarchy (``server.mode: sync`` with ``hierarchy:``):
    the values of the method's ``tier_state`` attributes, which the engine holds and binds to the method while it
    calls it for that gateway, and the samples the gateway aggregated since the last cloud round (its weight in
    ``Strategy.combine``)."""

    label: str
    values: dict[str, Any] = field(default_factory=dict)
    samples: float = 0.0

    @property
    def state(self) -> State:
        return self.values["state"]


def average_tiers(state: State, tiers: Sequence[Tier]) -> State:
    """The tiers' ``state`` averaged, weighted by the samples each aggregated, each entry over the tiers that hold
    it (the rest keeps ``state``'s values): HierFAVG's cloud average."""
    return aggregate_nested(state, [Contribution(t.state, t.samples) for t in tiers])


# What a strategy holds but the engine owns or rebuilds at set-up: a checkpoint never captures an attribute holding
# one (``output.codec.capture``'s ``shared``), since restoring a copy would cut the link to the engine's
ENGINE_SHARED: tuple[type, ...] = (ServerWork, StrategyContext)


class Strategy(ABC):
    """An FL method, as the engine drives it; subclass it in your own file and register it (``iotfl_sim.methods``).

    Each round the engine calls, in this order: ``select`` (which devices train what), the wire's
    ``dispatch`` (if the method has a ``wire``), ``adapt`` on each device when its task arrives, ``payload``
    for each download, ``local_objective`` for each accepted task's training, ``aggregate`` with the updates
    the server accepted (when at least ``ctx.min_participants`` arrived), ``observe`` with every task's
    outcome, and ``eval_targets`` when the round is evaluated. ``setup`` runs once before the first round and
    ``candidate_specs`` once after it (the memory feasibility check and the cost model's traces).

    Five methods are required (``setup``, ``select``, ``payload``, ``aggregate``, ``eval_targets``); the rest
    are documented defaults: ``recipe_for`` / ``candidate_specs`` give the scenario's model at full width to
    everyone, ``adapt`` keeps the task, ``local_objective`` is plain cross-entropy, ``observe`` does nothing,
    ``wire`` None sends float32 weights (bytes = parameters x 4, plus the header).

    Rules every method keeps:

    - Numerics never depend on simulated durations: the engine simulates a round before any training runs.
    - Randomness comes from the ``rng`` the engine passes to ``select`` or from streams seeded by
      ``ctx.seed`` (``iotfl_sim.seeding``), never from global RNGs: a resumed run must draw the same.
    - The server knows only what ``FleetView`` offers; true device state costs a ``true_state`` call, which
      the summary reports as oracle knowledge.
    - Server-side computation (distillation, fine-tuning, quantization ...) is charged with
      ``ctx.server_work.charge`` so that it takes simulated time; the engine charges aggregation itself.
    - State that changes after ``setup`` is named in ``checkpointed`` (attribute names; their values plain
      data: tensors, arrays, numbers, strings, containers of them): a checkpoint saves exactly those and a
      resumed run sets them back on a freshly set-up strategy. ``tests/test_strategy_api.py`` checks that no
      other attribute changes while a method runs.
    - Under a hierarchy the engine owns each gateway's model: the attributes named in ``tier_state`` (default
      ``state``), a ``Tier`` per gateway, set from the cloud's at each cloud round's start and bound to the method
      while the engine calls it for that gateway (``ctx.tier`` is then "gateway"); the method's ``wire`` is copied
      per gateway too. Every other attribute is the fleet's, one for all gateways (a selection table, a budget).
      ``aggregate`` (or ``gateway_aggregate``) rebinds those attributes, never changes their tensors in place.
      The cloud folds the gateways' tiers with ``combine``.
    """

    Config: ClassVar[type[MethodConfig]] = MethodConfig  # the method's options (the scenario's algorithm block)
    checkpointed: ClassVar[tuple[str, ...]] = ()  # attributes that change after setup (see above)
    tier_state: ClassVar[tuple[str, ...]] = ("state",)  # the model each gateway of a hierarchy holds (see above)
    wire: Wire | None = None  # how messages are encoded and priced (``algorithms.wire``); None: float32

    def __init__(self, cfg: MethodConfig) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.ctx: StrategyContext | None = None

    # -- required

    @abstractmethod
    def setup(self, ctx: StrategyContext) -> None:
        """Build the method's models and state from ``ctx``; runs once. The engine has set ``self.ctx = ctx``
        before calling it (``self.c`` works here already), so a method need not keep it itself."""

    @abstractmethod
    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        """This round's tasks: which devices (selectable ones, see ``FleetView``) train which submodel at what
        upload precision. ``rng`` is this round's own stream. Return at most one task per device."""

    @abstractmethod
    def payload(self, assignment: Assignment) -> State:
        """The weights sent to ``assignment.device`` (a state the engine slices to the task's submodel; not
        copied here: do not modify it). In system-only runs (``numerics: none``) states are empty dicts."""

    @abstractmethod
    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        """Fold the round's accepted updates into the global state (called only when at least
        ``ctx.min_participants`` arrived, and never in system-only runs)."""

    @abstractmethod
    def eval_targets(self) -> list[EvalTarget]:
        """The models the server evaluates on the test set (a column acc_<label> each)."""

    # -- optional, with these defaults

    def eval_labels(self) -> list[str]:
        """Labels of the figures ``eval_figures`` adds to each evaluation (a column acc_<label> each); default none."""
        return []

    def eval_figures(self) -> dict[str, float]:
        """``acc_<label>`` for each of ``eval_labels``, computed by the method itself when a round is evaluated
        (a figure the engine's whole-test-set evaluation of ``eval_targets`` cannot give: FedX's mean over devices
        of their own test accuracy); default none."""
        return {}

    @property
    def ignores_memory(self) -> bool:
        """True: memory never fails a task and the feasibility check is skipped (an upper-bound baseline)."""
        return False

    def recipe_for(self, assignment: Assignment) -> ModelRecipe:
        """The model family and global width the task's submodel is cut from (default: the scenario's model)."""
        return self.c.recipe

    def candidate_specs(self) -> list[tuple[ModelRecipe, SubmodelSpec]]:
        """Every (recipe, submodel) this method may assign, for the memory feasibility check and the cost
        model (default: the scenario's model at full width)."""
        return [(self.c.recipe, SubmodelSpec(1.0, name="full"))]

    def possible_specs(self) -> np.ndarray | None:
        """Which of ``candidate_specs()`` each device could ever train, after ``adapt``: a bool array (devices x
        candidates, in ``candidate_specs``' order), set once after ``setup``. ``validate`` and ``run`` set it
        against each device's most possible free memory to count who can ever take part
        (``sim.participation``). Answer soundly: False only where the method's own rules (an eligibility
        mask, a fixed level) never let that device train that candidate. Default None: any device may be given
        any candidate (memory alone then rules a device out)."""
        return None

    def adapt(self, assignment: Assignment, device: DeviceState) -> Assignment | None:
        """Device-side adaptation when a task arrives (e.g. pruning to fit free memory); None: the device
        declines (the task fails as ``refused``). Default: train the task as assigned."""
        return assignment

    def local_objective(self, assignment: Assignment) -> LocalObjective:
        """How the device trains (``fl.objectives``: CE, masked CE, distillation, a proximal term)."""
        return LocalObjective()

    def observe(self, rnd: int, outcomes: list[Outcome]) -> None:
        """Every task's outcome at the round's end (completed or why it failed): for methods that learn
        from failures, and for work done after aggregation (``aggregated`` says whether there was one). The
        outcomes are the round's own tasks' (semi_async: not the late updates of earlier rounds that joined
        it; async: every task that ended since the last model version). Default: nothing."""
        return None

    # -- a hierarchy's tiers (server.mode sync with hierarchy:), with these defaults

    def gateway_aggregate(self, rnd: int, updates: list[Update]) -> None:
        """A gateway's aggregation of its devices' updates into its ``Tier`` (bound as the method's
        ``tier_state`` attributes). Default: ``aggregate``, the method's own rule; a method whose server does more
        than average (an optimizer step, fine-tuning on the server's data) overrides it to average only and does
        the rest in ``combine``, at the cloud."""
        self.aggregate(rnd, updates)

    def combine(self, rnd: int, tiers: list[Tier]) -> None:
        """The cloud's step at a cloud round's end: fold the gateways' tiers (those that aggregated since the last
        cloud round) into the method's own ``tier_state``. Called in system-only runs too (states are empty
        dicts there), so that cloud work can be charged (``ctx.server_work``). Default: the tiers' ``state``
        averaged, weighted by the samples each aggregated, each entry over the tiers that hold it
        (``fl.aggregate.aggregate_nested``)."""
        state = getattr(self, "state", None)
        if tiers and state:
            self.state = average_tiers(state, tiers)

    def tier_size(self) -> tuple[int, int]:
        """The (parameters, tensors) of what a gateway holds: its float32 weights go up and down the backhaul each
        cloud round, and the cloud averages them. Default: the largest candidate's (nested submodels are cut from
        it); a method holding several models (one per level, a group sharing a block) counts each value once."""
        recipe, spec = max(self.candidate_specs(), key=lambda rs: rs[0].cost(rs[1]).params)
        return recipe.cost(spec).params, len(recipe.shapes(spec))

    # -- helpers for methods

    @property
    def c(self) -> StrategyContext:
        """The set-up context: the engine sets ``self.ctx`` before it calls ``setup``."""
        ctx = getattr(self, "ctx", None)  # None too when a subclass's __init__ skipped Strategy's
        if ctx is None:
            raise RuntimeError(
                f"{type(self).__name__}: no context yet: the engine sets self.ctx before it calls setup(ctx); outside "
                "the engine (a test, a notebook), set strategy.ctx = ctx before calling setup(ctx)"
            )
        return ctx

    def aggregated(self, outcomes: list[Outcome]) -> bool:
        """Whether the engine aggregated the round these outcomes close, so that work done after aggregation
        (fine-tuning, a server optimizer's step) is charged only then; in system-only runs too, where ``aggregate``
        is not called. Inside ``observe`` the engine's own answer (``ctx.round_aggregated``): late updates
        (semi_async) can make a round aggregate with fewer than ``min_participants`` of its own tasks completed,
        and an asynchronous model version is always an aggregation. Outside it (a test calling ``observe``),
        the synchronous rule: at least ``min_participants`` of ``outcomes`` completed."""
        told = self.c.round_aggregated
        if told is not None:
            return told
        return sum(o.status == "completed" for o in outcomes) >= self.c.min_participants

    def recipe_at(self, global_rate: float) -> ModelRecipe:
        return replace(self.c.recipe, global_rate=global_rate)

    def fits(self, recipe: ModelRecipe, spec: SubmodelSpec, free_bytes: np.ndarray) -> np.ndarray:
        """Which devices' declared free memory can hold a training task of ``spec``."""
        return free_bytes >= self.c.memory_need(recipe, spec)

    def largest_fitting(
        self, pool: Sequence[tuple[ModelRecipe, SubmodelSpec]], free: float, upto: int | None = None
    ) -> int | None:
        """Device-side adaptive pruning: the index of the largest pool model (``pool`` ordered by size,
        smallest first) whose training need fits ``free``, among ``pool[: upto + 1]``; None if none fits."""
        last = len(pool) - 1 if upto is None else upto
        for i in range(last, -1, -1):
            recipe, spec = pool[i]
            if self.c.memory_need(recipe, spec) <= free:
                return i
        return None

    @staticmethod
    def slice_for(state: State, recipe: ModelRecipe, spec: SubmodelSpec) -> State:
        return slice_state(state, recipe.shapes(spec))


class Exclusive:
    """For a method with one model (one candidate) that it gives only to the devices of ``self.eligible`` (a
    bool per device, set in ``setup``; exclusive learning): its ``possible_specs``. Put it before the base:
    ``class MyMethod(Exclusive, Strategy)``."""

    eligible: np.ndarray

    def possible_specs(self) -> np.ndarray:
        return self.eligible[:, None]


def fixed_level_specs(level_of: np.ndarray, levels: int) -> np.ndarray:
    """``Strategy.possible_specs`` of a method that gives each device one fixed candidate: ``level_of`` its
    index into ``candidate_specs()`` (-1: none, the device is never selected)."""
    return np.asarray(level_of)[:, None] == np.arange(levels)[None, :]


class Asynchronous(ABC):
    """A method the server runs asynchronously (``server.mode: async``, its options' ``modes``): no rounds;
    ``concurrency`` devices train at once and the server folds their updates into the model as they arrive,
    ``buffer_size`` at a time; each fold is a new model version. Put it before the base:
    ``class MyMethod(Asynchronous, Strategy)``.

    ``select_some`` replaces ``select``: ``k`` devices for the free slots; ``apply`` gets the ``buffer_size``
    updates in arrival order, each with its ``staleness`` (versions applied since its device downloaded) and
    its ``base`` (those downloaded weights). ``payload`` is captured at dispatch: rebind ``self.state`` in
    ``apply``, never change its tensors in place, so a device in flight keeps the model it downloaded."""

    @abstractmethod
    def buffer_size(self) -> int:
        """How many updates make one server step (FedAsync 1, FedBuff K)."""

    @abstractmethod
    def select_some(self, wave: int, fleet: FleetView, rng: np.random.Generator, k: int) -> list[Assignment]:
        """At most ``k`` tasks for selectable devices (``wave`` counts the server's dispatches)."""

    @abstractmethod
    def apply(self, version: int, updates: list[Update]) -> None:
        """Fold ``updates`` into the global model, making version ``version``."""

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        raise TypeError(f"{type(self).__name__} is asynchronous: the server calls select_some (server.mode: async)")

    def aggregate(self, rnd: int, updates: list[Update]) -> None:
        raise TypeError(f"{type(self).__name__} is asynchronous: the server calls apply (server.mode: async)")


class GlobalModel:
    """For a method with one global model that every task's submodel is cut from: ``self.recipe`` (its family and
    global width) and ``self.state`` (its weights), both set in ``setup``, answer ``recipe_for`` and ``payload``.
    Put it before the base: ``class MyMethod(GlobalModel, Strategy)``."""

    recipe: ModelRecipe
    state: State

    def recipe_for(self, assignment: Assignment) -> ModelRecipe:
        return self.recipe

    def payload(self, assignment: Assignment) -> State:
        return self.state


class Wire:
    """How a method's messages travel, a component a strategy holds as ``self.wire`` (e.g.
    ``algorithms.wire.QsgdWire``: QSGD-quantized downloads and uploads). Every hook has a no-op default.

    The engine calls ``dispatch`` right after ``select`` (before the server's pending work goes on the clock,
    so encoding charged here is priced in this round); ``payload`` for each download (None: the strategy's
    ``payload`` goes as it is); ``message_bytes`` to price a download (``up`` False) or upload without the
    header (None: parameters x bits / 8); ``receive`` on each accepted upload after training (it may replace
    ``update.state`` with what the server decodes) returning its real encoded bytes, which replace the
    priced estimate in the byte count (None: the estimate stands). A method with a wire has its prices
    recorded for replay on resume."""

    def dispatch(self, rnd: int, assignments: list[Assignment], strategy: Strategy) -> None:
        return None

    def payload(self, assignment: Assignment) -> State | None:
        return None

    def message_bytes(self, assignment: Assignment, up: bool) -> float | None:
        return None

    def receive(self, rnd: int, update: Update) -> float | None:
        return None


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

    The one selection of every method that picks uniformly among selectable (and eligible) devices. The view's
    ``sample_selectable`` (the engine's, for fleets of 100,000 devices or more) samples without building the
    fleet-wide mask; when it answers None, the mask of
    selectable and eligible devices goes to ``random_selection`` (the draws small runs have always had).
    """
    chosen = fleet.sample_selectable(k, rng, eligible)
    if chosen is not None:
        return chosen
    mask = fleet.selectable_mask()
    if eligible is not None:
        mask = mask & (eligible if isinstance(eligible, np.ndarray) else eligible(np.arange(mask.shape[0])))
    return random_selection(np.flatnonzero(mask), k, rng)


def select_on_power_first(fleet: FleetView, k: int, rng: np.random.Generator, eligible: Eligible = None) -> np.ndarray:
    """k distinct devices (sorted): uniformly among the selectable, eligible devices that report being on power (mains
    or a plugged-in charger: FedScale's "charging" devices), then, if they are fewer than k, uniformly among the
    others. Needs ``power`` in the scenario's ``fleet.reports``; builds the fleet-wide mask (no sampled selection)."""
    mask = fleet.selectable_mask()
    if eligible is not None:
        mask = mask & (eligible if isinstance(eligible, np.ndarray) else eligible(np.arange(mask.shape[0])))
    powered = fleet.on_power()
    first = random_selection(np.flatnonzero(mask & powered), k, rng)
    if len(first) >= k:
        return first
    rest = random_selection(np.flatnonzero(mask & ~powered), k - len(first), rng)
    return np.sort(np.concatenate([first, rest]))
