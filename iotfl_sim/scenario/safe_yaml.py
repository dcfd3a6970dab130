"""Reading YAML the tool is given (scenarios, device profiles, ``--set`` values) with hard limits.

Everything goes through :func:`read_text` and :func:`load`, never ``yaml.safe_load`` on its own:

- a file is read only up to ``MAX_BYTES`` (checked before parsing), must be UTF-8 text, and must not be
  binary (a NUL byte);
- parsing is PyYAML's safe loader (no Python objects) with a cap on alias references (``*name``), on
  the values written (``MAX_VALUES``) and once every alias is followed (``MAX_EXPANDED``: a "billion
  laughs" alias bomb of a few hundred bytes expands to billions), on nesting depth and integer length;
  an alias to its own anchor (a recursive structure) is refused;
- a key written twice in one mapping is an error naming the key and both lines (plain PyYAML keeps
  the last value silently).

Every problem is raised as :class:`YamlInputError`, a one-line message with the file, the line and
the fix, which the callers turn into a ``ScenarioError``.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

MAX_BYTES = 1024 * 1024  # a scenario or profile is a few KB; a resolved scenario tens of KB
MAX_ALIASES = 1_000  # alias references (*name) in one document
MAX_VALUES = 20_000  # values (scalars, lists, mappings) written in one document: bounds the parsing time
MAX_EXPANDED = 100_000  # values once every alias is expanded: bounds what validation walks and copies
MAX_DEPTH = 100  # nesting of lists and mappings, aliases followed
MAX_INT_DIGITS = 100  # an integer literal longer than this is never a sane setting

_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"


class YamlInputError(Exception):
    """Text that is not acceptable YAML input; the message names the source, the line and the fix."""


@dataclass
class YamlDoc:
    """A loaded document: the data, and the 1-based line of each path (tuple of keys / indexes)."""

    data: Any
    lines: dict[tuple, int] = field(default_factory=dict)


def _where(source: str, mark: Any) -> str:
    return f"{source}:{mark.line + 1}" if mark is not None else source


def _fmt(path: list) -> str:
    out = ""
    for part in path:
        if part is None:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_text(path: str | Path, what: str = "scenario", max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of ``path``; ``what`` ("scenario", "device profile") goes into the messages."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise YamlInputError(f"{p}: no such {what} file") from None
    except IsADirectoryError:
        raise YamlInputError(f"{p}: is a folder, not a {what} file; give the path of the .yaml file") from None
    except OSError as e:
        raise YamlInputError(f"{p}: cannot read the {what} file ({e.strerror})") from None
    if len(raw) > max_bytes:
        raise YamlInputError(
            f"{p}: larger than {max_bytes // 1024 ** 2} MB, the limit for a {what} file (they are a few KB); "
            "check that this is the right file"
        )
    return decode(raw, str(p), what)


def decode(raw: bytes, source: str, what: str = "scenario") -> str:
    """Bytes -> text, refusing binary data and anything that is not UTF-8."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlInputError(f"{source}: UTF-16 text; save the {what} file as UTF-8")
    nul = raw.find(b"\0")
    if nul >= 0:
        raise YamlInputError(
            f"{source}: a binary file (NUL byte at offset {nul}), not YAML text; give the {what}'s .yaml file"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise YamlInputError(
            f"{source}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {col}); save the {what} file "
            "as UTF-8"
        ) from None


class _Limits:
    """Composer hooks: the module's limits, recursive aliases and duplicate keys (PyYAML's composer)."""

    def _start(self, source: str) -> None:
        self.source = source
        self.aliases = 0
        self.values = 0
        self.depth = 0
        self.path: list = []
        self.open_anchors: set[str] = set()

    def _refuse(self, event: Any, problem: str) -> YamlInputError:
        return YamlInputError(f"{_where(self.source, event.start_mark)}: {problem}")

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise self._refuse(
                    event, f"more than {MAX_ALIASES} alias references (*name); write the values out instead"
                )
            if event.anchor in self.open_anchors:
                raise self._refuse(
                    event,
                    f"alias *{event.anchor} is inside its own anchor &{event.anchor} (a recursive structure); "
                    "refer only to anchors defined earlier",
                )
            return super().compose_node(parent, index)
        self.values += 1
        if self.values > MAX_VALUES:
            raise self._refuse(
                event,
                f"more than {MAX_VALUES:,} values in one document; a scenario or profile holds a few hundred: "
                "check that this is the right file",
            )
        if self.depth >= MAX_DEPTH:
            raise self._refuse(event, f"nested more than {MAX_DEPTH} levels deep; flatten the structure")
        anchor = getattr(event, "anchor", None)
        self.path.append(index.value if isinstance(index, yaml.ScalarNode) else index)
        self.depth += 1
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.open_anchors.discard(anchor)  # type: ignore[arg-type]
            self.depth -= 1
            self.path.pop()

    def compose_scalar_node(self, anchor: Any) -> Any:
        node = super().compose_scalar_node(anchor)
        digits = node.value.lstrip("+-").replace("_", "")
        if node.tag == _INT_TAG and len(digits) > MAX_INT_DIGITS:
            where = _fmt(self.path)
            raise YamlInputError(
                f"{_where(self.source, node.start_mark)}: {where + ': ' if where else ''}an integer of "
                f"{len(digits)} digits; no setting takes more than {MAX_INT_DIGITS}: write a sane value"
            )
        return node

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], int] = {}  # (tag, text) of each key -> its line
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                continue
            line = key.start_mark.line + 1
            if (key.tag, key.value) in seen:
                first = seen[(key.tag, key.value)]
                where = _fmt([*self.path, key.value])
                lines = f"both on line {line}" if first == line else f"lines {first} and {line}"
                raise YamlInputError(
                    f"{self.source}:{line}: {where}: key {key.value!r} appears twice in one mapping ({lines}); "
                    "keep one of them"
                )
            seen[(key.tag, key.value)] = line
        return node


class _PyLoader(_Limits, yaml.SafeLoader):
    def __init__(self, text: str, source: str) -> None:
        yaml.SafeLoader.__init__(self, text)
        self._start(source)


if yaml.__with_libyaml__:  # libyaml's parser (C) under PyYAML's composer, so that the hooks above apply
    from yaml._yaml import CParser

    class _CLoader(_Limits, Composer, SafeConstructor, Resolver, CParser):  # type: ignore[misc]
        def __init__(self, text: str, source: str) -> None:
            CParser.__init__(self, text)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)
            self._start(source)

    _Loader: type = _CLoader
else:  # pragma: no cover - PyYAML built without libyaml
    _Loader = _PyLoader


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Values and depth of the document with every alias followed (shared nodes counted once per use)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        key = id(node)
        if key in size:
            continue
        kids = _children(node)
        if not ready:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in size)
            continue
        size[key] = 1 + sum(size[id(k)] for k in kids)
        depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
        if size[key] > MAX_EXPANDED:
            raise YamlInputError(
                f"{_where(source, node.start_mark)}: aliases (*name) expand this document to more than "
                f"{MAX_EXPANDED:,} values (an alias bomb?); write the values out or use fewer aliases"
            )
        if depth[key] > MAX_DEPTH:
            raise YamlInputError(
                f"{_where(source, node.start_mark)}: aliases (*name) nest this document more than {MAX_DEPTH} "
                "levels deep; flatten the structure"
            )


def _line_map(root: yaml.Node) -> dict[tuple, int]:
    """1-based line of each path; a path under an alias is left out (its alias's line stands for it)."""
    lines: dict[tuple, int] = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        items: list[tuple[yaml.Node, tuple]] = []
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                items.append((v, (*path, k.value)))
                lines.setdefault((*path, k.value), k.start_mark.line + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                items.append((v, (*path, i)))
                lines.setdefault((*path, i), v.start_mark.line + 1)
        stack.extend(reversed(items))  # depth-first in document order: an anchor's own path comes first
    return lines


def _syntax_message(e: yaml.YAMLError, source: str, text: str) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if isinstance(e, yaml.reader.ReaderError):
        line = text.count("\n", 0, e.position) + 1
        return (
            f"{source}:{line}: not valid YAML text (character #x{e.character:04x} is not allowed); remove the "
            "control character"
        )
    fix = "fix the syntax at that line"
    lines = text.splitlines()
    at = lines[mark.line][mark.column : mark.column + 1] if mark is not None and mark.line < len(lines) else ""
    if at == "\t" or "'\\t'" in problem or "tab" in problem:
        fix = "indent with spaces, not tabs"
    elif "constructor for the tag" in problem:
        fix = "remove the !tag (only plain YAML values are read)"
    elif "undefined alias" in problem:
        fix = "define the anchor (&name) before its alias (*name)"
    return f"{_where(source, mark)}: not valid YAML ({problem}); {fix}"


def load(text: str, source: str) -> YamlDoc:
    """Parse one YAML document under the limits; raises YamlInputError. A text parsed again (a sweep reads
    its base scenario and the same profiles for every point it checks) comes from a cache; every call gets its
    own copy of the data, which callers may change."""
    doc = _load_cached(text, source)
    return YamlDoc(copy.deepcopy(doc.data), dict(doc.lines))


@functools.lru_cache(maxsize=32)
def _load_cached(text: str, source: str) -> YamlDoc:
    if len(text) > MAX_BYTES:
        raise YamlInputError(f"{source}: longer than {MAX_BYTES // 1024 ** 2} MB, the limit for YAML input")
    loader = None
    try:
        loader = _Loader(text, source)
        root = loader.get_single_node()
        if root is None:
            return YamlDoc(None)
        _check_expansion(root, source)
        lines = _line_map(root)  # before construction, which merges `<<:` keys into their mappings
        data = loader.construct_document(root)
    except yaml.YAMLError as e:
        raise YamlInputError(_syntax_message(e, source, text)) from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps PyYAML's recursion well inside Python's
        raise YamlInputError(f"{source}: nested too deeply; flatten the structure") from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDoc(data, lines)
