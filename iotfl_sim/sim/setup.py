"""A run's set-up: ``build_simulation``, which builds the ``Simulation`` of a resolved scenario
(``scenario.resolved.ResolvedScenario``) part by part, and the run's data side (the dataset, the clients'
partitions, evaluation data; empty in system-only mode).

The parts in the order they are built, which the numbers depend on (each draws from seeded streams, the method's
models from the torch seed): the fleet, availability, the numerics, the simulated system, the method and its
set-up (its context, ``StrategyContext``), the executor (``Host.choose``), the learning side and the server's view;
then the ``Simulation`` that holds them, and the device tasks, which reach the engine through it (``TaskHost``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
import torch

from iotfl_sim import methods
from iotfl_sim.algorithms import make_strategy
from iotfl_sim.algorithms.base import Strategy, StrategyContext
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.exec.auto import Choice, choose
from iotfl_sim.exec.base import NumericData
from iotfl_sim.exec.cores import available_cores
from iotfl_sim.exec.inline import InlineExecutor
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.cost.footprint import ModelInputError
from iotfl_sim.fl.data.datasets import Dataset, DatasetError, load_dataset
from iotfl_sim.fl.data.images import Images, subset
from iotfl_sim.fl.data.partition import PartitionError, label_sets, partition
from iotfl_sim.fl.recipe import DATASET_SHAPES, ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.torch_seed import seed_torch
from iotfl_sim.fleet.availability import build_availability
from iotfl_sim.fleet.carbon import grid_intensity
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.output.run_dir import RunRecorder
from iotfl_sim.scenario.model import Executor as ExecutorConfig
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.seeding import int_seed, stream
from iotfl_sim.sim.console import stage
from iotfl_sim.sim.device import DeviceTasks
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.host import ExecutorFactory, Host
from iotfl_sim.sim.learning import Learning
from iotfl_sim.sim.system import SystemModel
from iotfl_sim.sim.view import ServerView

if TYPE_CHECKING:
    from iotfl_sim.fleet.availability import Availability


@dataclass
class NumericsSetup:
    num_classes: int
    in_channels: int
    image_size: tuple[int, int]
    samples_per_device: np.ndarray
    labels_per_device: list[np.ndarray]
    parts: list[np.ndarray] = field(default_factory=list)
    proxy: np.ndarray | None = None  # train indices held out for the server (a method's proxy set)
    dataset: Dataset | None = None
    calib_x: Images | None = None
    test_subset: torch.Tensor | None = None  # test indices scored (server.eval_subset); None = all

    def numeric_data(self) -> NumericData:
        """The tensors an executor's workers share: train set, calibration inputs, the test samples scored."""
        assert self.dataset is not None and self.calib_x is not None
        ds = self.dataset
        x_test, y_test = ds.x_test, ds.y_test
        if self.test_subset is not None:
            x_test, y_test = subset(x_test, self.test_subset), y_test[self.test_subset]
        return NumericData(ds.x_train, ds.y_train, self.calib_x, x_test, y_test)

    def make_executor(self, cfg: ExecutorConfig | None = None, choice: Choice | None = None) -> Any:
        """The executor ``choice`` names (``exec.auto.choose``; None: ``cfg``'s kind, ``auto`` with no work
        estimate), with the scenario's thread count and address."""
        cfg = cfg or ExecutorConfig()
        if choice is None:
            choice = choose(cfg.kind, cfg.workers, cfg.threads, torch.cuda.is_available(), available_cores(), None)
        data = self.numeric_data()
        if choice.kind == "threads":
            from iotfl_sim.exec.threads import ThreadExecutor

            return ThreadExecutor(data, choice.workers, cfg.threads)
        if choice.kind == "pool":
            from iotfl_sim.exec.pool import PoolExecutor

            return PoolExecutor(data, choice.workers, cfg.threads)
        if choice.kind == "fused" and torch.cuda.is_available():
            from iotfl_sim.exec.fused import FusedExecutor
            from iotfl_sim.exec.threads import ThreadExecutor

            host = ThreadExecutor(data, choice.workers, cfg.threads)  # evaluation and the jobs it does not fuse
            return FusedExecutor(data.x_train, data.y_train, device="cuda", host=host)
        if choice.kind == "fused":  # on a CPU: a pool whose workers fuse their shares, using every core
            from iotfl_sim.exec.pool import PoolExecutor

            return PoolExecutor(data, choice.workers, cfg.threads, fuse=True)
        if choice.kind == "ray":
            from iotfl_sim.exec.ray_exec import RayExecutor

            return RayExecutor(data, choice.workers, cfg.threads, cfg.address)
        return InlineExecutor(data, cfg.threads)


def split_proxy(n: int, fraction: float, seed: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(server proxy indices, the rest for the clients): a seeded random ``fraction`` of the train set.

    A method whose config has ``proxy_fraction`` > 0 (FlexFL's pretraining set) gets these samples on
    the server; the clients' partitions are drawn from the rest, so no sample is in both.
    """
    everything = np.arange(n)
    if fraction <= 0:
        return None, everything
    k = max(1, int(round(n * fraction)))
    if k >= n:
        raise ScenarioError(f"algorithm.proxy_fraction: {fraction:g} leaves no training data for the clients")
    proxy = np.sort(stream(seed, "proxy").choice(n, size=k, replace=False))
    return proxy, np.setdiff1d(everything, proxy, assume_unique=True)


def subset_dataset(ds: Dataset, train: int | None, test: int | None, seed: int) -> Dataset:
    """``ds`` cut to seeded random subsets of ``train`` train and ``test`` test samples (None: all)."""
    changes: dict[str, Any] = {}
    if train is not None and train < len(ds.y_train):
        keep = np.sort(stream(seed, "train_subset").choice(len(ds.y_train), size=train, replace=False))
        changes.update(x_train=subset(ds.x_train, torch.as_tensor(keep)), y_train=ds.y_train[keep])
        if ds.groups_train is not None:
            changes["groups_train"] = ds.groups_train[keep]
    if test is not None and test < len(ds.y_test):
        keep = np.sort(stream(seed, "test_subset").choice(len(ds.y_test), size=test, replace=False))
        changes.update(x_test=subset(ds.x_test, torch.as_tensor(keep)), y_test=ds.y_test[keep])
        if ds.groups_test is not None:
            changes["groups_test"] = ds.groups_test[keep]
    return replace(ds, **changes) if changes else ds


def load_data(sc: Scenario) -> Dataset:
    """The scenario's dataset, cut to its train/test subsets; a missing or broken file is a ScenarioError."""
    try:
        ds = load_dataset(sc.data.dataset, sc.data.root, test_fraction=sc.data.test_fraction, seed=sc.seed)
    except DatasetError as e:
        raise ScenarioError(f"data.dataset: {e}") from None
    return subset_dataset(ds, sc.data.train_samples, sc.data.test_samples, sc.seed)


def split_clients(
    sc: Scenario, ds: Dataset, num_devices: int
) -> tuple[np.ndarray, np.ndarray | None, list[np.ndarray]]:
    """(train labels, the server's proxy indices or None, one index array per client); an impossible split
    is a ScenarioError naming the setting."""
    p = sc.data.partition
    labels = ds.y_train.numpy()
    server_classes = sc.algorithm.held_out_classes()
    if server_classes:  # FedX's disjoint split: the server holds every sample of its classes
        held = np.isin(labels, np.asarray(server_classes))
        public = sc.algorithm.held_out_public_fraction()
        if public > 0:  # the server's public samples of the clients' classes (FedX's D_S: fedx.txt:205)
            rest = np.flatnonzero(~held)
            held[np.sort(stream(sc.seed, "public").choice(rest, size=int(round(len(rest) * public)), replace=False))] = True
        proxy, clients = np.flatnonzero(held), np.flatnonzero(~held)
        if len(proxy) == 0 or len(clients) == 0:
            raise ScenarioError(f"algorithm.proxy_classes: {server_classes} leaves the server or the clients no data")
    else:
        proxy, clients = split_proxy(len(labels), sc.algorithm.held_out_fraction(), sc.seed)
    try:
        parts = partition(
            labels[clients],
            num_devices,
            p.method,
            stream(sc.seed, "partition"),
            alpha=p.alpha,
            classes_per_client=p.classes_per_client,
            groups=None if ds.groups_train is None else ds.groups_train[clients],
        )
    except PartitionError as e:
        raise ScenarioError(f"data.partition: {e}") from None
    if proxy is not None:
        parts = [clients[x] for x in parts]
    return labels, proxy, parts


def nominal_train_samples(sc: Scenario) -> int:
    """The train samples a scenario splits over its clients, without reading the files: the dataset's nominal
    train set, or ``data.train_samples`` of it."""
    nominal = DATASET_SHAPES[sc.data.dataset][4]
    return nominal if sc.data.train_samples is None else min(nominal, sc.data.train_samples)


def prepare_numerics(sc: Scenario, num_devices: int) -> NumericsSetup:
    channels, height, width, classes, _ = DATASET_SHAPES[sc.data.dataset]
    if sc.numerics == "none":
        # Costs only: clients are sized as an IID split of the nominal train set (data.train_samples of it when
        # given, as a real run keeps), no file is read.
        nominal = nominal_train_samples(sc)
        sizes = np.full(num_devices, nominal // num_devices, dtype=np.int64)
        sizes[: nominal % num_devices] += 1
        sizes = np.maximum(sizes, 1)
        all_labels = np.arange(classes)
        return NumericsSetup(classes, channels, (height, width), sizes, [all_labels] * num_devices)
    ds = load_data(sc)
    labels, proxy, parts = split_clients(sc, ds, num_devices)
    cap = sc.server.bn_calibration_samples
    if cap != "all" and cap < len(ds.x_train):
        pick = np.sort(stream(sc.seed, "bn_calibration").choice(len(ds.x_train), size=cap, replace=False))
        calib = subset(ds.x_train, torch.as_tensor(pick))
    else:
        calib = ds.x_train
    scored = None
    if sc.server.eval_subset is not None and sc.server.eval_subset < len(ds.y_test):
        pick = stream(sc.seed, "eval_subset").choice(len(ds.y_test), size=sc.server.eval_subset, replace=False)
        scored = torch.as_tensor(np.sort(pick))
    return NumericsSetup(
        num_classes=ds.num_classes,
        in_channels=ds.in_channels,
        image_size=ds.image_size,
        samples_per_device=np.array([len(x) for x in parts], dtype=np.int64),
        labels_per_device=label_sets(labels, parts),
        parts=parts,
        proxy=proxy,
        dataset=ds,
        calib_x=calib,
        test_subset=scored,
    )


def build_simulation(
    resolved: ResolvedScenario,
    *,
    recorder: RunRecorder | None = None,
    executor: Any = None,
    progress: Any = None,
    executor_factory: ExecutorFactory | None = None,
) -> Simulation:
    """The run of ``resolved``, ready to ``run()``. ``executor``: an executor to train and evaluate with (default:
    the scenario's ``executor`` block); ``executor_factory``: or one made from the run's data,
    ``factory(NumericData, scenario.executor)``; ``progress``: the round bar, told the slow stages."""
    t_created = time.perf_counter()
    sc, groups, base_dir = resolved.scenario, resolved.groups, resolved.base_dir
    fleet = Fleet.build(groups, sc.seed, sc.fleet.memory_units, base_dir, grid_intensity(sc.fleet.carbon, base_dir))
    availability = build_availability([g.config.availability for g in groups], fleet.group_of, sc.seed, base_dir)
    # Server-side numerics (pretraining, distillation, fine-tuning, evaluation on the inline executor)
    # run in this process: pin its torch threads too, so results do not depend on the executor kind. Pinned
    # before the data are loaded: a torch op on several threads starts OpenMP threads, whose first
    # allocations give each a malloc arena that the one-arena limit (exec.glibc_heap) could not take back.
    threads_before = torch.get_num_threads()
    if sc.numerics == "torch":
        torch.set_num_threads(sc.executor.threads)
        stage(progress, f"loading {sc.data.dataset} and splitting it over {fleet.n} devices")
    try:
        numerics = prepare_numerics(sc, fleet.n)
    except BaseException:  # data that cannot be loaded: the caller's thread count back, as before the run
        torch.set_num_threads(threads_before)
        raise
    env = simpy.Environment()
    system = SystemModel.build(sc, groups, fleet, availability, numerics, env, base_dir)
    strategy = make_strategy(sc.algorithm)
    set_up_strategy(sc, strategy, fleet, numerics, system, progress)
    host = Host.choose(sc, numerics, strategy, executor, executor_factory, threads_before, t_created)
    learning = Learning(sc, numerics, strategy, host.executor, trim_heap=host.large_steps)
    view = ServerView(fleet, fleet.mem_free, np.zeros(fleet.n, dtype=bool), availability)
    view.reports = frozenset(sc.fleet.reports or ())
    sim = Simulation(
        sc, fleet=fleet, numerics=numerics, env=env, system=system, strategy=strategy, host=host, learning=learning,
        view=view, recorder=recorder, progress=progress,
    )  # fmt: skip
    system.tasks = device_tasks(sim, availability)
    if sc.algorithm.name == "flower":  # the app's own ServerApp drives the fleet (iotfl_sim.flower)
        from iotfl_sim.flower import require_flower

        require_flower()  # before anything imports flwr: a missing extra is one line
        from iotfl_sim.sim.flower_loop import flower_loop

        sim.loop = flower_loop(sim, availability, base_dir)
    host.times = {"train": 0.0, "eval": 0.0, "aggregate": 0.0, "setup": host.elapsed()}
    return sim


def device_tasks(sim: Simulation, availability: Availability) -> DeviceTasks:
    """The devices' tasks of ``sim``, which ask the engine what they need through it (``sim.device.TaskHost``)."""
    system = sim.system
    return DeviceTasks(sim.env, sim.fleet, availability, sim, system.traffic, system.training_time)


def check_model_input(sc: Scenario, recipe: ModelRecipe) -> None:
    """Refuse a model family that cannot take the dataset's inputs before anything builds it (the full model: its
    submodels are narrower or shallower, and take what it takes)."""
    try:
        recipe.cost(SubmodelSpec(1.0))
    except ModelInputError as e:
        raise ScenarioError(
            f"model.family: {e.family} cannot take the inputs of data.dataset {sc.data.dataset}, "
            f"{e.shape}: {e.reason}; pick a model.family that takes "
            "them, or another data.dataset"
        ) from None


def set_up_strategy(
    sc: Scenario, strategy: Strategy, fleet: Fleet, numerics: NumericsSetup, system: SystemModel, progress: Any = None
) -> None:
    """The method's ``setup`` on its context, then the set-up checks of what it will assign (models analysed,
    memory)."""
    system.recipe = ModelRecipe(
        sc.model.family, numerics.num_classes, numerics.in_channels, numerics.image_size, sc.model.norm, sc.model.scaler,
    )  # fmt: skip
    check_model_input(sc, system.recipe)
    tiers = sc.hierarchy.gateway_rounds if sc.hierarchy is not None else 1
    ctx = StrategyContext(
        recipe=system.recipe,
        num_devices=fleet.n,
        samples_per_device=numerics.samples_per_device,
        labels_per_device=numerics.labels_per_device,
        num_classes=numerics.num_classes,
        seed=sc.seed,
        rounds=sc.rounds * tiers,  # the rounds it sees
        clients_per_round=math.ceil(sc.selection_size() * sc.server.over_selection),
        min_participants=sc.server.min_participants,
        memory_need=system.memory_need,
        declared_free_memory=fleet.mem_free,
        initial_state=partial(initial_state, sc),
        server_work=system.server_work,
        data=numerics.dataset,
        parts=numerics.parts or None,
        proxy_indices=numerics.proxy,
        predict_train_seconds=system.training_time.predict,
        calib_x=numerics.calib_x,
        gateway_rounds=tiers,
    )
    stage(progress, f"setting up {sc.algorithm.name}: building its models")
    # the engine gives the method its context (a setup that forgets ``self.ctx = ctx``, or an __init__ that
    # skips Strategy's, still has ``self.c``, during setup as after it); a setup may replace it with its own
    strategy.ctx = ctx
    strategy.setup(ctx)
    if strategy.ctx is None:
        strategy.ctx = ctx
    problem = methods.capability_problem(type(strategy), type(sc.algorithm))  # a method built by hand
    if problem is not None:
        raise ScenarioError(f"algorithm {sc.algorithm.name}: {problem}")
    # a method may declare that memory does not bind it (fedavg's memory: ignore, an upper bound):
    # then no task fails for memory and no feasibility check applies
    system.memory_ignored = bool(strategy.ignores_memory)
    specs = strategy.candidate_specs()
    if sc.fleet.cost_model == "roofline":
        # the one-time model analysis belongs to set-up (as memory_need's does), not to the first round
        for recipe, spec in specs:
            opcost.affine_trace(recipe, spec, system.step_options)
    if not system.memory_ignored and specs:  # no specs: a Flower app, whose model is measured as it runs
        system.memory_need.check_feasible(fleet, specs, sc.algorithm.name)


def initial_state(sc: Scenario, recipe: ModelRecipe, spec: SubmodelSpec) -> dict[str, torch.Tensor]:
    """A model's seeded initial weights (``StrategyContext.initial_state``); none in a system-only run."""
    if sc.numerics == "none":
        return {}  # system-only: no weights exist
    seed_torch(int_seed(sc.seed, "init"))
    return {k: v.detach().clone() for k, v in recipe.build(spec).state_dict().items()}
