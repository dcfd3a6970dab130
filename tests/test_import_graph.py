"""No import circle in ``iotfl_sim``: the graph of its modules' imports (grimp, as import-linter builds it; imports
under ``if TYPE_CHECKING:`` left out, imports inside functions kept) has no cycle, but for one named exception.
And ``iotfl_sim.core``, the package every layer (and ``analysis/``) may import, imports nothing else."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]

# The registration circle, the one exception: iotfl_sim.methods imports the built-in methods' options modules
# (iotfl_sim/scenario/algorithms/*), each of which imports iotfl_sim.methods to register itself (``@builtin``).
# Issue 47 replaces the registry by a data table that imports nothing; remove this exception when it lands.
REGISTRATION = "iotfl_sim.methods"
REGISTRATION_OPTIONS = "iotfl_sim.scenario.algorithms"


def _in_registration(module: str) -> bool:
    return module == REGISTRATION or module == REGISTRATION_OPTIONS or module.startswith(REGISTRATION_OPTIONS + ".")


def _registration_import(importer: str, imported: str) -> bool:
    return imported == REGISTRATION and importer.startswith(REGISTRATION_OPTIONS + ".")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("iotfl_sim", exclude_type_checking_imports=True, cache_dir=None)


def _edges(graph) -> dict[str, list[str]]:
    return {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}


def _components(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _a_cycle(edges: dict[str, list[str]], members: set[str], start: str) -> list[str]:
    """A shortest cycle through ``start`` within ``members`` (breadth-first), as its modules, ``start`` at both ends."""
    came: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in edges[v]:
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return [*reversed(path), start]
            if w in members and w not in came:
                came[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # cannot happen: its component is strongly connected


def _describe(graph, cycle: list[str]) -> str:
    steps = []
    for a, b in zip(cycle[:-1], cycle[1:], strict=True):
        lines = sorted(d["line_number"] for d in graph.get_import_details(importer=a, imported=b))
        steps.append(f"{a} (line {', '.join(map(str, lines))})")
    return " -> ".join([*steps, cycle[-1]])


def _cycles_found(graph) -> list[str]:
    """Each import circle but the registration, as one of its shortest cycles with the import's line at each
    step: a component of the graph that reaches beyond the registration's modules (through one of those
    outside), or a cycle among the registration's modules that does not pass through a registration import."""
    problems = []
    whole = _edges(graph)
    for comp in _components(whole):
        outside = [m for m in comp if not _in_registration(m)]
        if outside:
            problems.append(_describe(graph, _a_cycle(whole, set(comp), outside[0])))
            continue
        less = {m: [w for w in whole[m] if w in comp and not _registration_import(m, w)] for m in comp}
        problems += [_describe(graph, _a_cycle(less, set(inner), inner[0])) for inner in _components(less)]
    return problems


def test_iotfl_sim_has_no_import_circle_but_the_registration(graph):
    problems = _cycles_found(graph)
    assert not problems, "import circles in iotfl_sim:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("iotfl_sim.core.errors", "iotfl_sim.sim.engine"),  # the engine imports core.errors
        ("iotfl_sim.scenario.algorithms.base", "iotfl_sim.sim.engine"),  # a circle through the registration's
        ("iotfl_sim.scenario.algorithms.nested", "iotfl_sim.scenario.algorithms"),  # one among its modules
    ],
)
def test_a_planted_circle_is_found_and_named(importer, imported):
    graph = grimp.build_graph("iotfl_sim", exclude_type_checking_imports=True, cache_dir=None)
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="planted")
    problems = _cycles_found(graph)
    assert len(problems) == 1 and f"{importer} (line 1) -> {imported}" in problems[0], problems


def test_core_imports_nothing_else_of_iotfl_sim(graph):
    """As the import-linter contract says, and also not the package ``iotfl_sim`` itself (which the contract's
    ``iotfl_sim.*`` cannot name without forbidding core to itself)."""
    core = {m for m in graph.modules if m == "iotfl_sim.core" or m.startswith("iotfl_sim.core.")}
    outside = sorted(
        f"{m} -> {w}" for m in core for w in graph.find_modules_directly_imported_by(m) if w not in core
    )
    assert not outside, outside


def test_core_loads_without_pytorch():
    """What analysis/ imports of the simulator, loaded in a fresh interpreter, brings no PyTorch or NumPy."""
    code = (
        "import sys; import iotfl_sim.core.errors, iotfl_sim.core.safe_json, iotfl_sim.core.catalog; "
        "print(sorted(m for m in ('torch', 'numpy', 'pydantic') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
