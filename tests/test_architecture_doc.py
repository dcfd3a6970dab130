"""docs/architecture.md names only what exists: every file or folder it names, every ``Class.member``, every
dotted ``module.name`` and every ``path.py: Name`` resolves in the source tree (read with ``ast``, nothing is
imported), and every dotted scenario key (``server.deadline_s``) is a field of the scenario's model."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "iotfl_sim"
SOURCE_ROOTS = (PACKAGE, ROOT / "analysis")
# folders a path in the doc may be relative to: the repository, the package, or (in the table of what lives
# where) the package's own folders
BASES = (ROOT, PACKAGE)
# what a run or a study writes: named in the doc, never in the repository
PRODUCED = {
    "rounds.csv", "events.jsonl", "meta.json", "index.csv", "study.json", "sources.json", "summary.json",
    "scenario.resolved.yaml", "devices.csv",
}  # fmt: skip

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_NAME = re.compile(rf"^(?P<path>[\w/.]+\.py): (?P<name>{IDENT}(?:\.{IDENT})*)(?:\(.*\))?$")
DOTTED = re.compile(rf"^(?P<dotted>{IDENT}(?:\.{IDENT})+)(?:\(.*\))?$")
PATHLIKE = re.compile(r"^[\w./<>*-]+$")


def spans() -> list[str]:
    return sorted(set(re.findall(r"`([^`\n]+)`", DOC.read_text(encoding="utf-8"))))


def _defined(nodes: list[ast.AST]) -> set[str]:
    """The names ``nodes`` define: functions, classes, plain and annotated assignments to a name."""
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


class Index:
    """Every module of the package and of analysis/ read with ast: its top-level and nested definitions, and per
    class its members (methods, class attributes, fields, ``self.x`` assignments) and base names."""

    def __init__(self) -> None:
        self.modules: dict[str, Path] = {}  # dotted name without the root package -> file
        self.classes: dict[str, list[tuple[set[str], list[str]]]] = {}
        self.names: dict[Path, set[str]] = {}
        for root in SOURCE_ROOTS:
            for path in root.rglob("*.py"):
                rel = path.relative_to(root).with_suffix("")
                parts = [p for p in rel.parts if p != "__init__"]
                self.modules[".".join([root.name, *parts])] = path
                self._read(path)

    def _read(self, path: Path) -> None:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = list(ast.walk(tree))
        names = _defined(nodes)
        names.update((a.asname or a.name).split(".")[0] for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names)
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, []).append((self._members(node), [ast.unparse(b) for b in node.bases]))
        self.names[path] = names

    @staticmethod
    def _members(cls: ast.ClassDef) -> set[str]:
        out = _defined(cls.body)
        for node in ast.walk(cls):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.add(t.attr)
        return out

    def has_member(self, cls: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
        for members, bases in self.classes.get(cls, []):
            if member in members:
                return True
            for base in bases:
                name = base.split(".")[-1].split("[")[0]
                if name not in seen and self.has_member(name, member, seen | {cls}):
                    return True
        return False

    def module_file(self, dotted: str) -> Path | None:
        """The file of a module named from the package root (``sim.round``), fully (``iotfl_sim.sim.round``), or
        by a unique tail (``run_dir``, ``data.dataset``)."""
        for name in (dotted, f"iotfl_sim.{dotted}"):
            if name in self.modules:
                return self.modules[name]
        tails = [p for m, p in self.modules.items() if m.endswith("." + dotted)]
        return tails[0] if len(tails) == 1 else None

    def resolves(self, path: Path, attrs: list[str]) -> bool:
        """``attrs`` (a name, then members of it if it is a class) defined in module ``path``."""
        if not attrs:
            return True
        if attrs[0] not in self.names[path]:
            return False
        return len(attrs) == 1 or (len(attrs) == 2 and self.has_member(attrs[0], attrs[1]))


@cache
def index() -> Index:
    return Index()


def find_path(text: str) -> bool:
    if any(c in text for c in "<>") or text.rstrip("/") in PRODUCED or "NNN" in text:
        return True  # a pattern, or a file a run writes
    for base in BASES:
        matches = list(base.glob(text.rstrip("/"))) if "*" in text else [base / text.rstrip("/")]
        if any(m.exists() for m in matches):
            return True
    if "/" not in text.rstrip("/"):  # a bare name in the table of folders: somewhere in the sources
        roots = (*SOURCE_ROOTS, ROOT / "tests", ROOT / "benchmarks", ROOT / "scenarios")
        return any(next(root.rglob(text.rstrip("/")), None) is not None for root in roots)
    return False


def scenario_key(dotted: str) -> bool:
    """A dotted key of the scenario file (``server.deadline_s``, ``output.checkpoint.every_s``)."""
    from pydantic import BaseModel

    from iotfl_sim.scenario.model import Scenario

    model: type[BaseModel] | None = Scenario
    for part in dotted.split("."):
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        model = next((a for a in _members_of(annotation) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return True


def scenario_fields() -> set[str]:
    from iotfl_sim.scenario.model import Scenario

    return set(Scenario.model_fields)


def _members_of(annotation: object) -> list[object]:
    from typing import get_args

    args = get_args(annotation)
    return [annotation, *[m for a in args for m in _members_of(a)]] if args else [annotation]


def _member_of_its_class(parts: list[str]) -> bool:
    """``strategy.select``: a member called on an object named after its class (``Strategy``)."""
    cls = "".join(w.capitalize() for w in parts[0].split("_"))
    return len(parts) == 2 and index().has_member(cls, parts[1])


def problem(text: str) -> str | None:
    """Why a code span of the doc names nothing in the repository, or None (it does, or it names no code)."""
    ix = index()
    if m := PATH_NAME.match(text):
        path = next((b / m["path"] for b in BASES if (b / m["path"]).is_file()), None)
        if path is None:
            return f"no file {m['path']}"
        return None if ix.resolves(path, m["name"].split(".")) else f"{m['path']} defines no {m['name']}"
    if " " in text or "=" in text or ":" in text or text in PRODUCED or "mymethod" in text:
        return None  # YAML, a call with arguments, prose, a file a run writes, the doc's example method
    if PATHLIKE.match(text) and ("/" in text or re.search(r"\.(py|md|toml|yaml)$", text)):
        return None if find_path(text) else "no such file or folder"
    if not (m := DOTTED.match(text)):
        return None
    parts = m["dotted"].split(".")
    if scenario_key(m["dotted"]):
        return None
    if parts[0] in scenario_fields() and ix.module_file(parts[0]) is None:
        return "no such key in the scenario file"
    if parts[0] in ("iotfl_sim", "analysis") or ix.module_file(parts[0]) is not None or ix.module_file(".".join(parts[:2])):
        for cut in range(len(parts), 0, -1):
            path = ix.module_file(".".join(parts[:cut]))
            if path is not None:
                if ix.resolves(path, parts[cut:]) or _member_of_its_class(parts):
                    return None
                return f"{path.relative_to(ROOT)} defines no {'.'.join(parts[cut:])}"
        return "no such module"
    if parts[0][:1].isupper() and parts[0] in ix.classes and len(parts) == 2:
        return None if ix.has_member(parts[0], parts[1]) else f"class {parts[0]} has no member {parts[1]}"
    return None  # a method call on a variable (strategy.select), an attribute of something local


def test_every_name_in_the_architecture_doc_exists():
    wrong = [f"`{s}`: {why}" for s in spans() if (why := problem(s)) is not None]
    assert not wrong, "docs/architecture.md names what does not exist:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "text",
    [
        "sim/no_such_module.py",
        "sim/round.py: NoSuchThing",
        "Simulation.no_such_method",
        "sim.round.NoSuchClass",
        "server.no_such_key",
        "fl/evaluate.py: no_such_function",
        "no_such_module.py",
        "run_dir.no_such_function",
    ],
)
def test_a_name_that_does_not_exist_is_caught(text):
    assert problem(text) is not None


@pytest.mark.parametrize(
    "text",
    ["sim/round.py", "sim/round.py: Round", "Fleet.cut_tail", "sim.round.TaskOwner", "server.deadline_s", "output.checkpoint.every_s"],
)
def test_a_name_that_exists_passes(text):
    assert problem(text) is None
