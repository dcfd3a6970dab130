"""Reading scenarios: YAML text -> validated ``Scenario``, with errors that name the YAML path and line."""

from __future__ import annotations

import copy
import difflib
import os
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from iotfl_sim.scenario.algorithms import ALGORITHM_CONFIGS, ALGORITHM_NAMES
from iotfl_sim.scenario.model import Group, Scenario
from iotfl_sim.scenario.profile import DeviceProfile


class ScenarioError(Exception):
    """A problem in the user's input. The message is meant to be printed as is (one line per problem)."""


PROFILES_DIR = Path(__file__).resolve().parents[2] / "device_profiles"


def profile_dirs(extra: Path | None = None) -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("IOTFL_PROFILES", "").split(os.pathsep) if p]
    if extra is not None:
        dirs.append(extra)
    dirs.append(PROFILES_DIR)
    return [d for d in dirs if d.is_dir()]


def available_profiles(extra: Path | None = None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in reversed(profile_dirs(extra)):  # earlier directories win
        for f in sorted(d.glob("*.yaml")):
            found[f.stem] = f
    return dict(sorted(found.items()))


def load_profile(name: str, extra: Path | None = None, where: str = "profile") -> DeviceProfile:
    known = available_profiles(extra)
    if name not in known:
        hint = difflib.get_close_matches(name, known, n=1)
        fix = f"did you mean {hint[0]!r}?" if hint else "see `iotfl-sim profiles list`"
        raise ScenarioError(f"{where}: unknown device profile {name!r} ({fix})")
    raw = yaml.safe_load(known[name].read_text())
    try:
        return DeviceProfile.model_validate(raw)
    except ValidationError as e:
        raise ScenarioError(_format_errors(e, DeviceProfile, {}, str(known[name]), "")) from None


# ---------------------------------------------------------------- YAML with line numbers


def _line_map(text: str) -> dict[tuple, int]:
    """Map each YAML path (tuple of keys / indexes) to its 1-based line."""
    lines: dict[tuple, int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = (*path, k.value)
                lines[p] = k.start_mark.line + 1
                walk(v, p)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                lines[(*path, i)] = v.start_mark.line + 1
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return lines


def _fmt_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _model_at(model: type[BaseModel], loc: tuple, data: Any) -> type[BaseModel] | None:
    """The config model class that holds the field at ``loc`` (used for did-you-mean)."""
    cur: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or part not in cur.model_fields:
            return None
        cur = _pick_model(cur.model_fields[part].annotation, data.get(part) if isinstance(data, dict) else None)
        data = data.get(part) if isinstance(data, dict) else None
        if isinstance(data, list):
            data = data[0] if data else None
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _pick_model(annotation: Any, data: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if not args:
        return annotation
    models = []
    for a in args:
        a = _pick_model(a, data)
        if isinstance(a, type) and issubclass(a, BaseModel):
            models.append(a)
    for m in models:  # discriminated union: match on the `name` literal
        name_field = m.model_fields.get("name")
        if name_field is not None and isinstance(data, dict) and data.get("name") in typing.get_args(name_field.annotation):
            return m
    return models[0] if len(models) == 1 else None


def _strip_tags(loc: tuple) -> tuple:
    # pydantic puts a union's tag into the location (algorithm.heterofl.mode): drop it.
    if len(loc) >= 2 and loc[0] == "algorithm" and loc[1] in ALGORITHM_NAMES:
        return (loc[0], *loc[2:])
    return loc


def _format_errors(err: ValidationError, model: type[BaseModel], data: Any, source: str, text: str) -> str:
    lines_of = _line_map(text) if text else {}
    out = []
    for e in err.errors():
        loc = _strip_tags(tuple(e["loc"]))
        path = _fmt_path(loc)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            parent = _model_at(model, loc[:-1], data)
            fields = list(parent.model_fields) if parent else []
            hint = difflib.get_close_matches(str(loc[-1]), fields, n=1)
            msg = f"unknown key (did you mean {hint[0]!r}?)" if hint else f"unknown key (allowed: {', '.join(fields)})"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "union_tag_invalid":
            tag = e.get("ctx", {}).get("tag")
            hint = difflib.get_close_matches(str(tag), ALGORITHM_NAMES, n=1)
            msg = f"unknown algorithm {tag!r} (" + (f"did you mean {hint[0]!r}?" if hint else "known: " + ", ".join(ALGORITHM_NAMES)) + ")"
            path = _fmt_path((*loc, "name")) if loc and loc[-1] != "name" else path
        elif e["type"] in {"string_type", "int_type", "float_type", "bool_type", "int_parsing", "float_parsing",
                           "bool_parsing", "literal_error", "list_type", "dict_type", "model_type"}:
            msg = f"{msg} (got {e.get('input')!r})"
        line = lines_of.get(loc) or _nearest_line(lines_of, loc)
        out.append(f"{source}:{line}: {path}: {msg}" if line else f"{source}: {path}: {msg}")
    return "\n".join(out)


def _nearest_line(lines_of: dict[tuple, int], loc: tuple) -> int | None:
    for n in range(len(loc) - 1, 0, -1):
        if loc[:n] in lines_of:
            return lines_of[loc[:n]]
    return None


# ---------------------------------------------------------------- overrides


def apply_set(raw: dict, assignment: str) -> None:
    """Apply one ``--set a.b.c=value`` (value parsed as YAML; list items addressed by index)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: write it as key.path=value, e.g. --set rounds=20")
    key, value_text = assignment.split("=", 1)
    parts: list[Any] = [int(p) if p.isdigit() else p for p in key.strip().split(".")]
    if any(p == "" for p in parts):  # list index 0 is a valid key part
        raise ScenarioError(f"--set {assignment!r}: empty key in {key!r}")
    value = yaml.safe_load(value_text) if value_text.strip() else None
    cur: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(cur, list):
            if not isinstance(part, int) or part >= len(cur):
                raise ScenarioError(f"--set {key}: index {part} is out of range at {_fmt_path(tuple(parts[:i]))}")
            cur = cur[part]
            continue
        if not isinstance(cur, dict):
            raise ScenarioError(f"--set {key}: {_fmt_path(tuple(parts[:i]))} is not a mapping")
        if cur.get(part) is None:
            cur[part] = [] if isinstance(nxt, int) else {}
        cur = cur[part]
    last = parts[-1]
    if isinstance(cur, list):
        if not isinstance(last, int) or last >= len(cur):
            raise ScenarioError(f"--set {key}: index {last} is out of range")
        cur[last] = value
    elif isinstance(cur, dict):
        cur[last] = value
    else:
        raise ScenarioError(f"--set {key}: {_fmt_path(tuple(parts[:-1]))} is not a mapping")


# ---------------------------------------------------------------- resolution


@dataclass(frozen=True)
class ResolvedGroup:
    name: str
    profile: DeviceProfile
    count: int
    power_mode: str | None
    config: Group  # the group's scenario settings (memory, availability, network ...)


# Fields that say the same thing in two units: an override in one replaces the profile's value in the other.
_SAME_QUANTITY: dict[str, tuple[str, str]] = {"battery": ("capacity_j", "capacity_wh")}


def _merge_overrides(profile: dict, overrides: dict) -> dict:
    base = copy.deepcopy(profile)
    for section, pair in _SAME_QUANTITY.items():
        over, have = overrides.get(section), base.get(section)
        if not (isinstance(over, dict) and isinstance(have, dict)):
            continue
        for given, other in (pair, pair[::-1]):
            if given in over and other not in over:
                have.pop(other, None)
    return _deep_merge(base, overrides)


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def resolve_groups(sc: Scenario, base_dir: Path | None = None, source: str = "scenario") -> list[ResolvedGroup]:
    """Profiles of every fleet group, overrides applied, with counts; errors name the group."""
    groups = []
    names_seen: set[str] = set()
    for i, (g, count) in enumerate(zip(sc.fleet.groups, sc.fleet.counts(), strict=True)):
        where = f"{source}: fleet.groups[{i}]"
        if isinstance(g.profile, str):
            base = load_profile(g.profile, base_dir, where=f"{where}.profile").model_dump(mode="json")
        else:
            base = g.profile
        merged = _merge_overrides(base, g.overrides)
        try:
            prof = DeviceProfile.model_validate(merged)
        except ValidationError as e:
            first = e.errors()[0]
            part = "overrides" if g.overrides else "profile"
            raise ScenarioError(
                f"{where}.{part}.{_fmt_path(tuple(first['loc']))}: {first['msg'].removeprefix('Value error, ')}"
            ) from None
        if g.power_mode is not None:
            try:
                prof.mode(g.power_mode)
            except KeyError:
                modes = ", ".join(prof.compute.power_modes or {}) or "none"
                raise ScenarioError(
                    f"{where}.power_mode: {g.power_mode!r} is not a power mode of {prof.name} (has: {modes})"
                ) from None
        name = g.name or prof.name
        if name in names_seen:
            name = f"{name}_{i}"
        names_seen.add(name)
        groups.append(ResolvedGroup(name, prof, count, g.power_mode, g))
    return groups


def load_scenario(
    path: str | Path | None = None, *, text: str | None = None, sets: list[str] | None = None
) -> Scenario:
    """Read, override, validate. Raises ScenarioError with one line per problem."""
    source = str(path) if path is not None else "<scenario>"
    if text is None:
        if path is None:
            raise ScenarioError("no scenario given")
        p = Path(path)
        if not p.is_file():
            raise ScenarioError(f"{source}: no such scenario file")
        text = p.read_text()
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ScenarioError(f"{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping (name:, rounds:, fleet:, ...)")
    algo_before = raw.get("algorithm")
    name_before = algo_before.get("name") if isinstance(algo_before, dict) else algo_before
    for s in sets or []:
        apply_set(raw, s)
    algo = raw.get("algorithm")
    if isinstance(algo, str):  # shorthand `algorithm: fedavg`
        raw["algorithm"] = algo = {"name": algo}
    if isinstance(algo, dict) and algo.get("name") != name_before:
        _drop_foreign_options(algo, name_before)
    if isinstance(algo, dict) and "name" not in algo:
        raise ScenarioError(f"{source}: algorithm.name: required field is missing (one of {', '.join(ALGORITHM_NAMES)})")
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as e:
        raise ScenarioError(_format_errors(e, Scenario, raw, source, text)) from None
    base_dir = Path(path).resolve().parent / "device_profiles" if path is not None else None
    resolve_groups(sc, base_dir, source)  # fail early on profile problems
    return sc


def _drop_foreign_options(algo: dict, previous: Any) -> None:
    """After `--set algorithm.name=X`, drop the old method's options that X does not take."""
    cfg = ALGORITHM_CONFIGS.get(algo.get("name"))
    if cfg is None:
        return
    dropped = [k for k in algo if k not in cfg.model_fields]
    for k in dropped:
        del algo[k]
    if dropped:
        print(
            f"note: algorithm changed from {previous} to {algo['name']}: dropped options it does not take "
            f"({', '.join(dropped)})",
            file=sys.stderr,
        )


def resolved_dict(sc: Scenario, groups: list[ResolvedGroup]) -> dict:
    """The scenario with every default filled in and every profile inlined: rerunning it reproduces the run."""
    d = sc.model_dump(mode="json")
    for gd, rg in zip(d["fleet"]["groups"], groups, strict=True):
        gd["profile"] = rg.profile.model_dump(mode="json")
        gd["overrides"] = {}
        gd["name"] = rg.name
    return d
