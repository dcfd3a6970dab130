"""One place for a method's capabilities (``MethodConfig.modes``), a registry that imports nothing, and
``algorithm`` validated in two steps (its name, then the block by that method's options)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import yaml
from conftest import base_scenario

from iotfl_sim import methods
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario.algorithms.base import MODES, MethodConfig
from iotfl_sim.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_NAMES = [name for name, _, _ in methods.BUILTINS]


def test_the_page_is_what_the_registry_says_now():
    from iotfl_sim.mode_matrix import matrix

    page = (ROOT / "docs" / "methods_and_modes.md").read_text()
    assert page == matrix(), "regenerate it: python -m iotfl_sim.mode_matrix > docs/methods_and_modes.md"


def test_the_page_counts_the_modes_the_issue_measured():
    """Issue 47, measured on main before the change: of 16 built-in methods, 3 run hierarchically, 5
    semi-asynchronously, 2 asynchronously (FedAsync and FedBuff, which run only so). Semi-asynchronously now: all
    13 that aggregate in rounds but FedDF (``tests/test_semi_async_methods.py``); asynchronously 12: FedAsync and
    FedBuff, and HeteroFL, HeteroFL-IoT, FedAvg, FedProx, AdaptiveFL, FlexFL, ScaleFL, FedX, DAdaQuant and FedOpt in
    FedBuff's buffered form (``tests/test_buffered_async.py``, ``tests/test_buffered_async_methods.py``);
    hierarchically 13: every method whose aggregation is an average (Decoupled's per level, AdapterFL's and FedBase's
    per block), FedOpt's optimizer, FedX's fine-tuning and DAdaQuant's level schedule at the cloud
    (``tests/test_hierarchy.py``); not FedDF, whose distillation needs the clients' models."""
    page = (ROOT / "docs" / "methods_and_modes.md").read_text()
    counts = next(line for line in page.splitlines() if line.startswith("| of 16 |")).split("|")[2:-1]
    assert [c.strip() for c in counts] == ["14", "13", "12", "13"], counts
    names = ("heterofl", "heterofl_iot", "fedavg", "fedprox", "adaptivefl", "flexfl", "scalefl", "fedx", "dadaquant", "fedopt")
    assert all(f"| `{m}` | yes | yes | yes |" in page for m in names)
    assert "| `feddf` | yes | no | no | no |" in page
    tiered = ("fedavg", "decoupled", "heterofl", "heterofl_iot", "adaptivefl", "scalefl", "flexfl", "adapterfl", "fedbase",
              "fedx", "dadaquant", "fedprox", "fedopt")
    assert all(re.search(rf"^\| `{m}` \|.* yes \|$", page, flags=re.M) for m in tiered)
    assert "| `fedasync` | no | no | yes | no |" in page and "| `fedbuff` | no | no | yes | no |" in page


def _asking(name: str, mode: str) -> dict:
    """A scenario (no training) that asks method ``name`` for ``mode``; otherwise in a mode it runs in."""
    data = base_scenario(numerics="none", algorithm={"name": name})
    own = [m for m in MODES if m in methods.method(name).config.modes and m != "hierarchical"]
    server_mode = mode if mode != "hierarchical" else own[0]
    data["server"] = {"mode": server_mode, **({"deadline_s": 60.0} if server_mode == "semi_async" else {})}
    if mode == "hierarchical":
        data["fleet"]["gateways"] = [{"name": "gw", "down_mbps": 50.0, "up_mbps": 20.0}]
        for g in data["fleet"]["groups"]:
            g["network"] = {"gateway": "gw"}
        data["hierarchy"] = {}
    return data


def _validate(data: dict) -> None:
    load_scenario(text=yaml.safe_dump(data, sort_keys=False))


CELLS = [(name, mode) for name in BUILTIN_NAMES for mode in MODES]


@pytest.mark.parametrize(("name", "mode"), CELLS, ids=[f"{n}-{m}" for n, m in CELLS])
def test_validate_refuses_every_no_cell_with_its_reason_and_takes_every_yes_cell(name, mode):
    config = methods.method(name).config
    why = config.why_not_in(mode)
    if why is None:
        _validate(_asking(name, mode))
        return
    with pytest.raises(ScenarioError) as e:
        _validate(_asking(name, mode))
    line = str(e.value)
    assert len(line.splitlines()) == 1, line
    able = [m.name for m in methods.registered() if mode in m.config.modes]
    where = "hierarchy:" if mode == "hierarchical" else f"server.mode: {mode}:"
    assert where in line and name in line and why in line and ", ".join(able) in line, line


def test_every_builtin_names_its_options_and_a_strategy_that_agrees_with_them():
    """The table is data: each row's options class takes exactly its name, its strategy's Config is that class,
    and a strategy subclasses Asynchronous exactly when its options declare async."""
    from typing import get_args

    for name in BUILTIN_NAMES:
        m = methods.method(name)
        assert get_args(m.config.model_fields["name"].annotation) == (name,)
        strategy = m.strategy_class()
        assert strategy.Config is m.config, name
        assert methods.capability_problem(strategy, m.config) is None, name


def test_the_registry_imports_no_options_to_list_the_methods():
    code = (
        "import sys\nfrom iotfl_sim import methods\nnames = methods.method_names()\n"
        "assert names[:3] == ('fedavg', 'decoupled', 'heterofl'), names\n"
        "print(sorted(m for m in sys.modules if m.startswith('iotfl_sim.scenario')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.usefixtures("isolated_methods")
def test_registering_a_method_does_not_rebuild_the_scenario_model():
    from iotfl_sim.algorithms.fedavg import FedAvg
    from iotfl_sim.scenario.algorithms import FedAvgConfig
    from iotfl_sim.scenario.model import Scenario

    class MineConfig(FedAvgConfig):
        name: Literal["mine"] = "mine"  # type: ignore[assignment]

    class Mine(FedAvg):
        Config = MineConfig
        name = "mine"

    validator = Scenario.__pydantic_validator__
    methods.register_method(Mine)
    assert Scenario.__pydantic_validator__ is validator
    sc = load_scenario(text=yaml.safe_dump(base_scenario(numerics="none", algorithm={"name": "mine", "flavour": "smallest"})))
    assert type(sc.algorithm) is MineConfig and sc.algorithm.flavour == "smallest"
    assert sc.model_dump()["algorithm"]["flavour"] == "smallest"  # dumped as its own class, every field


def test_the_old_spelling_server_modes_and_hierarchical_is_read_as_modes():
    class Old(MethodConfig):
        name: str = "old"
        server_modes: ClassVar[tuple[str, ...]] = ("sync", "semi_async")
        hierarchical = True

    class OldChild(Old):
        hierarchical = False  # only the flag: the inherited server modes stay

    class OldAsync(Old):
        server_modes = ("async",)  # hierarchical meant sync rounds at every tier: it goes

    assert Old.modes == {"sync", "semi_async", "hierarchical"}
    assert OldChild.modes == {"sync", "semi_async"}
    assert OldAsync.modes == {"async"}


def test_a_mode_declared_wrong_is_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match="unknown mode 'asynch'"):

        class Typo(MethodConfig):
            modes: ClassVar[frozenset[str]] = frozenset({"sync", "asynch"})

    with pytest.raises(TypeError, match="give modes only"):

        class Both(MethodConfig):
            modes: ClassVar[frozenset[str]] = frozenset({"sync"})
            hierarchical = True

    with pytest.raises(TypeError, match="sync with hierarchical"):

        class TierOnly(MethodConfig):
            modes: ClassVar[frozenset[str]] = frozenset({"hierarchical"})


@pytest.mark.usefixtures("isolated_methods")
def test_an_asynchronous_strategy_whose_options_do_not_say_async_is_refused_when_registered():
    from iotfl_sim.algorithms.fedasync import FedAsync
    from iotfl_sim.scenario.algorithms import FedAsyncConfig

    class RoundsConfig(FedAsyncConfig):
        name: Literal["rounds_async"] = "rounds_async"  # type: ignore[assignment]
        modes: ClassVar[frozenset[str]] = frozenset({"sync"})

    class RoundsAsync(FedAsync):
        Config = RoundsConfig
        name = "rounds_async"

    with pytest.raises(methods.MethodError) as e:
        methods.register_method(RoundsAsync)
    assert "RoundsAsync subclasses iotfl_sim.strategy.Asynchronous" in str(e.value)
    assert "set modes = frozenset({'async'}) in RoundsConfig" in str(e.value)
    assert "rounds_async" not in methods.method_names()


def test_an_unknown_name_keeps_its_did_you_mean_and_line(tmp_path):
    data = copy.deepcopy(base_scenario(numerics="none"))
    data["algorithm"] = {"name": "fedproxx", "mu": 0.1}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if "fedproxx" in x)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert str(e.value).startswith(f"{path}:{line}: algorithm.name: unknown algorithm 'fedproxx' (did you mean 'fedprox'?")
