"""The engine's structure (issue 47): no module reaches into another's private members, ``Simulation`` stays
small, every server mode is one ``ServerLoop`` of at most 150 lines written with the round toolkit, and
checkpointing and the summary see only the narrow objects the engine builds for them, never the ``Simulation``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml
from conftest import base_scenario

import iotfl_sim
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.resolved import ResolvedScenario
from iotfl_sim.sim import checkpointing, summary
from iotfl_sim.sim.async_server import AsyncServer
from iotfl_sim.sim.engine import Simulation
from iotfl_sim.sim.hierarchy import GatewayTier
from iotfl_sim.sim.semi_async import SemiAsyncLoop
from iotfl_sim.sim.server_loop import ServerLoop
from iotfl_sim.sim.setup import build_simulation
from iotfl_sim.sim.sync_loop import SyncLoop

PACKAGE = Path(iotfl_sim.__file__).parent
LOOPS = (SyncLoop, SemiAsyncLoop, AsyncServer, GatewayTier)

# Private names of other libraries that iotfl_sim must use: no public spelling exists
THIRD_PARTY_PRIVATE = {
    "_SubParsersAction",  # argparse: the type of add_subparsers()'s result
    "_Environ",  # os: the type of os.environ
    "_base",  # torch.Tensor: the tensor a view shares storage with
    "_convolution",  # torch.ops.aten: the op name the dispatcher reports
    "_local_scalar_dense",  # torch.ops.aten: the op name the dispatcher reports
    "_BatchNorm",  # torch.nn.modules.batchnorm: the base class of every BatchNorm
    "_buffers",  # torch.nn.Module: buffers registered as None are only listed there
    "_schema",  # torch's OpOverload: the op's schema (which arguments it writes, which outputs alias)
}


def defined_names(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assignments, attributes it sets on ``self``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def foreign_private_accesses(source: str, path: str) -> list[str]:
    """``x._name`` where x is not ``self`` / ``cls``, ``_name`` is no dunder and not a name of this module."""
    tree = ast.parse(source)
    own = defined_names(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr in own or node.attr in THIRD_PARTY_PRIVATE:
            continue
        out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_rule_catches_a_private_member_reached_from_outside():
    engine_private = "def loop(sim):\n    yield from sim._serve(rd)\n"
    assert foreign_private_accesses(engine_private, "m.py") == ["m.py:2: sim._serve"]
    own = "class A:\n    def _f(self):\n        pass\n\ndef g(a):\n    a._f()\n    self_ok = a.__class__\n"
    assert foreign_private_accesses(own, "m.py") == []


def test_no_module_of_iotfl_sim_touches_another_modules_private_members():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += foreign_private_accesses(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == []


# modules that get a narrow object from the engine (``checkpointing.CheckpointedRun``, ``summary.RunFigures``)
NARROW = (checkpointing, summary)
WHOLE_RUN_PARAMETERS = {"sim", "simulation"}


def _annotations(tree: ast.Module) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            out.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def simulation_uses(source: str, path: str) -> list[str]:
    """Where a module imports, names or annotates ``Simulation`` (quoted annotations too), imports the engine, or
    takes a parameter named as the whole run (``sim``)."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("sim.engine"):
            out.append(f"{path}:{node.lineno}: imports {node.module}")
        elif isinstance(node, ast.ImportFrom) and node.module == "iotfl_sim.sim" and any(a.name == "engine" for a in node.names):
            out.append(f"{path}:{node.lineno}: imports iotfl_sim.sim.engine")
        elif isinstance(node, ast.Import) and any(a.name.endswith("sim.engine") for a in node.names):
            out.append(f"{path}:{node.lineno}: imports the engine")
        elif isinstance(node, ast.Name) and node.id == "Simulation":
            out.append(f"{path}:{node.lineno}: Simulation")
        elif isinstance(node, ast.Attribute) and node.attr == "Simulation":
            out.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.arg) and node.arg in WHOLE_RUN_PARAMETERS:
            out.append(f"{path}:{node.lineno}: parameter {node.arg}")
    for annotation in _annotations(tree):
        for c in ast.walk(annotation):
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and "Simulation" in c.value:
                out.append(f"{path}:{c.lineno}: annotated {c.value!r}")
    return out


@pytest.mark.parametrize(
    "source",
    [
        "from iotfl_sim.sim.engine import Simulation\n",
        "from iotfl_sim.sim import engine\n",
        "import iotfl_sim.sim.engine\n",
        "def write(run: Simulation) -> None:\n    pass\n",
        "def write(run: 'Simulation') -> None:\n    pass\n",
        "def write(run: engine.Simulation) -> None:\n    pass\n",
        "def due(sim, done):\n    return sim.sc\n",
        "x: list[Simulation] = []\n",
    ],
)
def test_the_narrow_rule_catches_the_whole_simulation(source):
    assert len(simulation_uses(source, "m.py")) >= 1


def test_the_narrow_rule_passes_a_narrow_object():
    narrow = "from iotfl_sim.sim.summary import RunFigures\n\ndef summarize(run: RunFigures, t: float) -> dict:\n    return {}\n"
    assert simulation_uses(narrow, "m.py") == []


@pytest.mark.parametrize("module", NARROW, ids=lambda m: m.__name__)
def test_checkpointing_and_the_summary_never_take_the_whole_simulation(module):
    path = Path(module.__file__)
    assert simulation_uses(path.read_text(encoding="utf-8"), path.name) == []


def system_only(**extra) -> Simulation:
    data = base_scenario(rounds=1, clients_per_round=2, numerics="none")
    data.update(extra)
    sc = load_scenario(text=yaml.safe_dump(data))
    return build_simulation(ResolvedScenario(sc, resolve_groups(sc)))


def test_the_narrow_objects_hold_no_way_back_to_the_simulation():
    """What ``Simulation`` hands checkpointing and the summary holds neither it nor one of its bound methods."""
    sim = system_only()
    sim.run()
    for narrow in (sim.checkpointed_run(), sim.run_figures()):
        for f in dataclasses.fields(narrow):
            value = getattr(narrow, f.name)
            assert value is not sim and getattr(value, "__self__", None) is not sim, f.name
    run = sim.checkpointed_run()  # what a resume writes back reaches the run's own objects
    assert run.rows is sim.rows and run.oracle_users is sim.view.oracle_users and run.host is sim.host


def test_a_simulation_holds_at_most_15_attributes():
    sim = system_only()
    assert len(vars(sim)) <= 15, sorted(vars(sim))


@pytest.mark.parametrize("loop", LOOPS, ids=lambda c: c.__name__)
def test_each_server_loop_is_at_most_150_lines_and_a_server_loop(loop):
    lines, _ = inspect.getsourcelines(loop)
    assert len(lines) <= 150
    members = [m for m in vars(ServerLoop) if not m.startswith("_")] + list(ServerLoop.__annotations__)
    assert all(hasattr(loop, m) for m in members), [m for m in members if not hasattr(loop, m)]


@pytest.mark.parametrize(
    ("server", "loop"), [({}, SyncLoop), ({"mode": "semi_async", "deadline_s": 600.0}, SemiAsyncLoop)]
)
def test_the_server_mode_is_chosen_once_as_a_loop(server, loop):
    data = base_scenario(rounds=1, clients_per_round=2, numerics="none")
    data["server"] = {**data.get("server", {}), **server}
    sc = load_scenario(text=yaml.safe_dump(data))
    sim = build_simulation(ResolvedScenario(sc, resolve_groups(sc)))
    assert type(sim.loop) is loop
    sim.run()
    assert len(sim.rows) == 1 and set(loop.columns) <= set(sim.rows[0])
