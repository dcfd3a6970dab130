"""Every check a run makes before it trains, in one place: ``iotfl-sim run`` and ``iotfl-sim validate``
both call :func:`preflight`, so ``validate`` never says "ok" to a scenario that ``run`` then rejects.

Beyond the scenario's own validation (``scenario.loader``), a run checks:

- the dataset files (torch numerics): the data root exists and holds the files the loader reads
  (found, not read); the partition can be drawn: a ``natural`` split needs a dataset with natural
  owners; when the split may fail on the real data (natural, shards, a server share of classes, or
  fewer than ``THIN_DATA`` nominal samples per device) the dataset is loaded and the split drawn, as
  the run will (the loaded dataset is cached, so a run does not read it twice);
- the system side, by building the simulation in system-only mode (no data, no training): availability
  trace files, the method's set-up (model family, levels, cuts ...) and that some device can hold some
  submodel the method would assign;
- that the run folder can be made under the output folder (``--out`` or ``output.dir``);
- an asynchronous server's ``server.deadline_s``: not below the least time any task can take
  (``sim.task_bound``), else no update could ever arrive.

Both commands then print :func:`memory_fit`: for a method with several submodels, each one's training memory
need and how many devices declare that much free, and a warning when every device holds every submodel; and,
for every method, how many devices of each group can ever take part (``sim.participation``), with a warning
for a group that never can.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.fl.data.datasets import NATURAL_GROUPS, DatasetError, check_files
from iotfl_sim.output.loggers import check_available
from iotfl_sim.scenario.availability import TraceAvailability
from iotfl_sim.scenario.loader import ResolvedGroup
from iotfl_sim.scenario.model import Scenario
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim.participation import amount, memory_unit
from iotfl_sim.sim.setup import build_simulation, load_data, nominal_train_samples, split_clients

if TYPE_CHECKING:
    from iotfl_sim.sim.engine import Simulation

THIN_DATA = 50  # nominal train samples per device below which the split is drawn for real


def _sourced(source: str, e: ScenarioError) -> ScenarioError:
    """The error naming the scenario file (the run-time checks raising it do not know the file)."""
    text = str(e)
    return ScenarioError(text if text.startswith(source) else f"{source}: {text}")


def preflight(
    sc: Scenario, groups: list[ResolvedGroup], base_dir: Path | None, source: str, out: str | None = None
) -> Simulation:
    """Raise ScenarioError for anything that would stop ``run`` before its first round (``out``: the
    ``--out`` option, else ``output.dir``); the system-only simulation built to check it (``memory_fit``)."""
    check_output(out if out is not None else sc.output.dir, "--out" if out is not None else "output.dir", source)
    check_available(sc.output, source)  # output.tensorboard / output.wandb: their optional packages
    check_executor(sc, source)
    check_data(sc, sum(g.count for g in groups), source)
    sim = check_system(sc, groups, base_dir, source)
    check_deadline(sim, sc.numerics != "none", source)
    return sim


def check_executor(sc: Scenario, source: str) -> None:
    """``executor.kind: ray``: a cluster answers at ``executor.address`` and Ray is installed (run would stop there)."""
    cfg = sc.executor
    if sc.numerics == "none" or cfg.kind != "ray":
        return
    from iotfl_sim.exec.ray_exec import check_reachable

    try:
        if cfg.address is not None:
            check_reachable(cfg.address, "executor.address")
        if importlib.util.find_spec("ray") is None:
            raise ScenarioError("executor.kind: ray needs Ray: pip install 'iotfl-sim[ray]' (or pick kind: pool)")
    except ScenarioError as e:
        raise _sourced(source, e) from None


def check_output(out: str | Path, where: str, source: str) -> None:
    """The folder the run folder goes into exists or can be made, and can be written (nothing is created)."""
    path = Path(out).expanduser()
    probe = path
    while not os.path.lexists(probe) and probe.parent != probe:
        probe = probe.parent
    if probe.is_symlink() and not probe.exists():
        raise ScenarioError(
            f"{source}: {where}: {probe} is a symbolic link that leads nowhere (its target is missing, or the links "
            "go round a loop); repoint or remove it, or give another folder"
        )
    if not probe.is_dir():
        raise ScenarioError(f"{source}: {where}: {probe} is a file, not a folder; give a folder for the run folders")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ScenarioError(f"{source}: {where}: {probe} is not writable, so no run folder can be made under {path}")


def _split_may_fail(sc: Scenario, num_devices: int) -> bool:
    p = sc.data.partition
    if p.method in ("natural", "shards") or sc.algorithm.held_out_classes():
        return True
    for_clients = nominal_train_samples(sc) * (1.0 - sc.algorithm.held_out_fraction())
    return for_clients < THIN_DATA * num_devices


def check_data(sc: Scenario, num_devices: int, source: str) -> None:
    """The dataset and the clients' split, as ``sim.setup.prepare_numerics`` will need them."""
    if sc.numerics != "torch":
        return  # system-only: no file is read, clients are sized from the nominal train set
    try:
        check_files(sc.data.dataset, sc.data.root)
    except DatasetError as e:
        raise ScenarioError(f"{source}: data.dataset: {e}") from None
    if sc.data.partition.method == "natural" and sc.data.dataset not in NATURAL_GROUPS:
        raise ScenarioError(
            f"{source}: data.partition.method: natural needs a dataset whose samples have natural owners "
            f"({', '.join(NATURAL_GROUPS)}), and {sc.data.dataset} has none; use iid, dirichlet or shards"
        )
    if _split_may_fail(sc, num_devices):
        try:
            split_clients(sc, load_data(sc), num_devices)
        except ScenarioError as e:
            raise _sourced(source, e) from None


def _trace_field(e: Exception) -> tuple[str, Callable[[Any], str | None]]:
    """The group field that names the file a TraceError is about, and how to read that field off a group."""
    from iotfl_sim.fleet.bandwidth import BandwidthError
    from iotfl_sim.fleet.irradiance import IrradianceError
    from iotfl_sim.fleet.positions import PositionsError

    if isinstance(e, IrradianceError):
        return "harvest.trace", lambda g: g.harvest.trace if g.harvest is not None and g.harvest.kind == "solar" else None
    if isinstance(e, BandwidthError):
        return "network.bandwidth.trace", lambda g: g.network.bandwidth.trace if g.network.bandwidth else None
    if isinstance(e, PositionsError):
        return "network.link.positions.path", lambda g: g.network.link.positions.path if g.network.link else None
    return "availability.path", lambda g: g.availability.path if isinstance(g.availability, TraceAvailability) else None


def _trace_group(sc: Scenario, base_dir: Path | None, message: str, named: Callable[[Any], str | None]) -> int | None:
    """The fleet group whose trace (the file ``named`` reads off a group) a TraceError's message is about."""
    traced = [i for i, g in enumerate(sc.fleet.groups) if named(g) is not None]
    for i in traced:
        path = Path(named(sc.fleet.groups[i])).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if message.startswith(str(path)):
            return i
    return traced[0] if len(traced) == 1 else None


def check_system(sc: Scenario, groups: list[ResolvedGroup], base_dir: Path | None, source: str) -> Simulation:
    """Build the run's simulation in system-only mode: traces, the method's set-up and feasibility."""
    from iotfl_sim.fleet.carbon import CarbonError
    from iotfl_sim.fleet.traces import TraceError

    try:
        return build_simulation(ResolvedScenario(sc, groups, base_dir, source).system_only())
    except CarbonError as e:
        raise ScenarioError(f"{source}: fleet.carbon.trace: {e}") from None
    except TraceError as e:
        field, named = _trace_field(e)
        i = _trace_group(sc, base_dir, str(e), named)
        where = f"fleet.groups[{i}].{field}" if i is not None else field
        raise ScenarioError(f"{source}: {where}: {e}") from None
    except ScenarioError as e:
        raise _sourced(source, e) from None
    except ValueError as e:  # the method or model builders refusing a combination of settings
        raise ScenarioError(
            f"{source}: algorithm ({sc.algorithm.name}) with model.family {sc.model.family}: {e}; change the "
            "algorithm's options or model.family"
        ) from None


def check_deadline(sim: Simulation, real_numerics: bool, source: str) -> None:
    """An asynchronous server's ``server.deadline_s`` at or above the least time any task can take
    (``sim.task_bound``): below it every task is dropped late and the server would dispatch forever."""
    deadline = sim.sc.server.deadline_s
    if sim.sc.server.mode != "async" or deadline is None:
        return
    from iotfl_sim.sim.task_bound import fastest_task_s

    fastest = fastest_task_s(sim, real_numerics)
    if deadline < fastest:
        raise ScenarioError(
            f"{source}: server.deadline_s: {deadline:g} s is shorter than the fastest any task can be ({fastest:.4g} s "
            f"at least: download, training and upload of {sim.sc.algorithm.name}'s smallest model on the fastest "
            f"device, every draw at its most favourable), so no update could ever arrive; raise server.deadline_s "
            f"above {fastest:.4g} or remove it"
        )


def memory_fit(sim: Simulation) -> tuple[list[str], list[str]]:
    """(notes, warnings) on memory for a method with several submodels: per submodel, its training memory
    need (``SystemModel.memory_need``) and how many devices declare that much free memory; a warning when every
    device holds every submodel, so memory never tells devices apart and the method has nothing to adapt to
    (with MB units the bundled profiles of Pis, phones and Jetsons hold every HeteroFL level of a small model:
    such a study is FedAvg under another name). Nothing for a one-model method, or one that ignores memory."""
    specs = sim.strategy.candidate_specs()
    if len(specs) < 2 or sim.system.memory_ignored:
        return [], []
    unit, scale = memory_unit(sim)
    free = sim.fleet.mem_free
    name = sim.sc.algorithm.name
    families = {r.family for r, _ in specs}
    notes = []
    needs = []
    for i, (recipe, spec) in enumerate(specs):
        need = sim.system.memory_need(recipe, spec)
        needs.append(need)
        label = spec.name or f"#{i + 1}"
        if len(families) > 1:
            label = f"{recipe.family} {label}"
        notes.append(
            f"memory: {name} submodel {label} (width {spec.rate:g}{'' if spec.depth is None else f', depth {spec.depth}'}) "
            f"needs {amount(need / scale)} {unit} to train; {int((free >= need).sum())} of {sim.fleet.n} devices declare that much free"
        )
    if (free >= max(needs)).all():
        warnings = [
            f"memory: every device declares room for every submodel of {name} (the largest needs "
            f"{amount(max(needs) / scale)} {unit}, the tightest device has {amount(free.min() / scale)} {unit} free), so memory "
            "never tells devices apart and the method has nothing to adapt to; to make memory bind, lower the groups' "
            "memory.free_mb, raise local.batch_size or the model, or use fleet.memory_units: relative (README: "
            "Making memory bind)"
        ]
    else:
        warnings = []
    return notes, warnings
