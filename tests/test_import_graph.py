"""No import circle in ``iotfl_sim``: the graph of its modules' imports (grimp, as import-linter builds it; imports
under ``if TYPE_CHECKING:`` left out, imports inside functions kept) has no cycle.
And ``iotfl_sim.core``, the package every layer (and ``analysis/``) may import, imports nothing else."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]

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
    """Each import circle, as one of its shortest cycles with the import's line at each step."""
    whole = _edges(graph)
    return [_describe(graph, _a_cycle(whole, set(comp), comp[0])) for comp in _components(whole)]


def test_iotfl_sim_has_no_import_circle(graph):
    problems = _cycles_found(graph)
    assert not problems, "import circles in iotfl_sim:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("iotfl_sim.core.errors", "iotfl_sim.sim.engine"),  # the engine imports core.errors
        ("iotfl_sim.scenario.algorithms.base", "iotfl_sim.sim.engine"),  # through the options of the methods
        ("iotfl_sim.methods", "iotfl_sim.scenario.model"),  # the registration circle of old (the model reads the registry)
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
