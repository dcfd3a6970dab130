"""Reading scenarios: YAML text -> validated ``Scenario``, with errors that name the YAML path and line."""

from __future__ import annotations

import copy
import difflib
import os
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from iotfl_sim import methods
from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.scenario import safe_yaml
from iotfl_sim.scenario.availability import AVAILABILITY_KINDS
from iotfl_sim.scenario.model import (
    DEFAULT_GATEWAY_PROFILE,
    DEFAULT_SERVER_PROFILE,
    HARVEST_KINDS,
    Group,
    Hierarchy,
    MethodConfig,
    Scenario,
    Server,
    method_options,
)
from iotfl_sim.scenario.profile import DeviceProfile, above_total

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


def _is_path(name: str) -> bool:
    return "/" in name or name.endswith((".yaml", ".yml"))


def load_profile(name: str, extra: Path | None = None, where: str = "profile") -> DeviceProfile:
    """A profile by name (looked up in $IOTFL_PROFILES, then ``extra`` (the scenario's ``device_profiles/``), then
    the bundled ones) or by path (anything with a ``/`` or a ``.yaml`` ending; relative to the scenario's folder)."""
    if _is_path(name):
        path = Path(name).expanduser()
        if not path.is_absolute():
            path = (extra.parent if extra is not None else Path.cwd()) / path
        if not path.is_file():
            raise ScenarioError(f"{where}: no profile file {str(path)!r}; give an existing YAML file or a profile name")
        return _read_profile(path)
    known = available_profiles(extra)
    if name not in known:
        hint = difflib.get_close_matches(name, known, n=1)
        fix = f"did you mean {hint[0]!r}?" if hint else "see `iotfl-sim profiles list`"
        dirs = ", ".join(str(d) for d in profile_dirs(extra))
        raise ScenarioError(f"{where}: unknown device profile {name!r} ({fix}; looked in {dirs}; a path to a file works too)")
    return _read_profile(known[name])


def _read_profile(path: Path) -> DeviceProfile:
    doc = read_yaml(path, "device profile")
    if not isinstance(doc.data, dict):
        raise ScenarioError(
            f"{path}: a device profile is a YAML mapping (name:, device_class:, compute:, memory:, ...)"
        )
    try:
        return DeviceProfile.model_validate(doc.data)
    except ValidationError as e:
        raise ScenarioError(_format_errors(e, DeviceProfile, doc.data, str(path), doc.lines)) from None


def resolve_server(sc: Scenario, base_dir: Path | None = None, source: str = "scenario") -> DeviceProfile | None:
    """The server's profile, inlined into ``sc.server.profile`` so the resolved scenario reproduces the run; None
    where the scenario asks for the old FLOP rule (``server.compute``). The gateways' profile under ``hierarchy``
    too (``hierarchy.profile``)."""
    if sc.hierarchy is not None:
        _resolve_priced(sc.hierarchy, "hierarchy", DEFAULT_GATEWAY_PROFILE, base_dir, source)
    return _resolve_priced(sc.server, "server", DEFAULT_SERVER_PROFILE, base_dir, source)


def resolved_compute(sc: Scenario) -> bool:
    """Whether ``resolve_server`` has inlined every profile it resolves (or there is none to resolve)."""
    holders = [sc.server] if sc.hierarchy is None else [sc.server, sc.hierarchy]
    return all(h.compute is not None or isinstance(h.profile, dict) for h in holders)


def _resolve_priced(
    holder: Server | Hierarchy, key: str, default: str, base_dir: Path | None, source: str
) -> DeviceProfile | None:
    """``holder.profile`` (the server's or the gateways') loaded, checked and inlined; None under ``compute``."""
    srv = holder
    if srv.compute is not None:
        return None
    where = f"{source}: {key}.profile"
    given = default if srv.profile is None else srv.profile
    if isinstance(given, str):
        prof = load_profile(given, base_dir, where=where)
    else:
        try:
            prof = DeviceProfile.model_validate(given)
        except ValidationError as e:
            raise ScenarioError(_format_errors(e, DeviceProfile, given, source, None, prefix=(key, "profile"))) from None
    if prof.server_work is None:
        raise ScenarioError(
            f"{where}: profile {prof.name} has no server_work section (aggregation and QSGD rates); measure one with "
            "`iotfl-sim profiles measure --server` or pick a server profile (`iotfl-sim profiles list`)"
        )
    if srv.power_mode is not None:
        try:
            prof.mode(srv.power_mode)
        except KeyError:
            modes = ", ".join(prof.compute.power_modes or {}) or "none"
            raise ScenarioError(f"{source}: {key}.power_mode: {srv.power_mode!r} is not a power mode of {prof.name} (has: {modes})") from None
    srv.profile = prof.model_dump(mode="json")
    return prof


def read_yaml(path: str | Path, what: str = "scenario") -> safe_yaml.YamlDoc:
    """A YAML file the user gave, read under the limits of ``safe_yaml``; problems are ScenarioErrors."""
    try:
        return safe_yaml.load(safe_yaml.read_text(path, what), str(path))
    except safe_yaml.YamlInputError as e:
        raise ScenarioError(str(e)) from None


# ---------------------------------------------------------------- messages


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
        data = data.get(part) if isinstance(data, dict) else None
        cur = _pick_model(cur.model_fields[part].annotation, data)
        if cur is MethodConfig:  # Scenario.algorithm: the options of the method it names
            cur = method_options(data)
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
    for m in models:  # discriminated union: match on a `name` or `kind` literal (availability)
        for tag in ("name", "kind"):
            tag_field = m.model_fields.get(tag)
            if tag_field is not None and isinstance(data, dict) and data.get(tag) in typing.get_args(tag_field.annotation):
                return m
    return models[0] if len(models) == 1 else None


# pydantic puts the member of a union that it tried into the error location (sigma2.list[float].0,
# algorithm.heterofl.mode, availability.markov.p): drop it, the user wrote none of these.
_UNION_MEMBER = re.compile(
    r"(int|float|str|bool|none|(list|dict|tuple|set|literal|function-\w+|lax-or-strict|json-or-python)\[.*\]"
    r"|constrained-\w+)"
)


def _tag_names(field: str) -> tuple[str, ...]:
    """The names a tagged union field takes (``algorithm``: every method's, as registered now)."""
    if field == "algorithm":
        return methods.method_names()
    return {"availability": AVAILABILITY_KINDS, "harvest": HARVEST_KINDS}.get(field, ())

# errors that say the value has the wrong shape; in a union, the member whose shape matched says more
_SHAPE_ERRORS = {
    "string_type", "int_type", "float_type", "bool_type", "int_parsing", "float_parsing", "bool_parsing",
    "literal_error", "list_type", "dict_type", "model_type", "model_attributes_type", "tuple_type",
    "none_required", "int_from_float", "is_instance_of",
}  # fmt: skip
_EXPECTED = {
    "string_type": "a text", "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "list_type": "a list", "tuple_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "none_required": "null",
}  # fmt: skip


def _expected(e: dict) -> str:
    if e["type"] == "literal_error":
        return str((e.get("ctx") or {}).get("expected", e["msg"]))
    return _EXPECTED.get(e["type"], e["msg"])


def _strip_tags(loc: tuple) -> tuple:
    out: list = []
    for part in loc:
        if isinstance(part, str) and (_UNION_MEMBER.fullmatch(part) or part == "[key]"):
            continue
        if out and isinstance(part, str) and part in _tag_names(str(out[-1])):
            continue
        out.append(part)
    return tuple(out)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _known(got: Any, names: typing.Iterable[str]) -> str:
    names = [str(n) for n in names]
    hint = difflib.get_close_matches(str(got), names, n=1)
    return (f"did you mean {hint[0]!r}? " if hint else "") + "known: " + ", ".join(names)


def _upper_bound(model: type[BaseModel], loc: tuple, data: Any) -> Any:
    parent = _model_at(model, loc[:-1], data) if loc else None
    info = parent.model_fields.get(str(loc[-1])) if parent is not None else None
    for meta in info.metadata if info is not None else ():
        if getattr(meta, "le", None) is not None:
            return meta.le
    return None


def _typo_explains(errors: list[tuple[tuple, dict]], model: type[BaseModel], data: Any) -> set[tuple]:
    """Locations of "missing" errors that an unknown key next to them explains (``free:`` for ``free_mb:``)."""
    missing = {loc for loc, e in errors if e["type"] == "missing"}
    explained = set()
    for loc, e in errors:
        if e["type"] == "extra_forbidden" and loc:
            parent = _model_at(model, loc[:-1], data)
            hint = difflib.get_close_matches(str(loc[-1]), list(parent.model_fields) if parent else [], n=1)
            if hint and (*loc[:-1], hint[0]) in missing:
                explained.add((*loc[:-1], hint[0]))
    return explained


def _message(e: dict, loc: tuple, model: type[BaseModel], data: Any) -> tuple[tuple, str]:
    """(location, text) of one pydantic error, in the user's words."""
    kind = e["type"]
    msg = e["msg"].removeprefix("Value error, ")
    ctx = e.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1], data)
        fields = list(parent.model_fields) if parent else []
        hint = difflib.get_close_matches(str(loc[-1]), fields, n=1)
        msg = f"unknown key (did you mean {hint[0]!r}?)" if hint else f"unknown key (allowed: {', '.join(fields)})"
    elif kind == "missing":
        msg = "required field is missing"
    elif kind in ("union_tag_invalid", "union_tag_not_found", "method_unknown", "method_missing"):
        field = str(ctx.get("discriminator", "")).strip("'\"") or "name"
        if field.endswith("()"):  # a callable discriminator reads the name field
            field = "name"
        names = _tag_names(str(loc[-1]) if loc else "") or re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        parent = str(loc[-1]) if loc else ""
        loc = (*loc, field)
        if kind in ("union_tag_invalid", "method_unknown"):
            what = parent if field == "name" else f"{parent} {field}".strip()  # "algorithm", "availability kind"
            msg = f"unknown {what} {ctx.get('tag')!r} ({_known(ctx.get('tag'), names)})"
        else:
            msg = f"required field is missing (one of {', '.join(names)})"
    elif kind == "literal_error":
        names = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        msg = f"unknown value {_show(e.get('input'))} ({_known(e.get('input'), names)})" if names else msg
    elif kind == "value_error" and (m := re.match(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*): (.*)", msg)):
        # a cross-field check naming the field it is about ("algorithm.proxy_fraction: ..."): put it there
        parent = _model_at(model, loc, data)
        if parent is not None and m.group(1).split(".")[0] in parent.model_fields:
            loc, msg = (*loc, *m.group(1).split(".")), m.group(2)
    elif kind == "int_parsing_size":  # an integer too large to hold: say the field's bound where it has one
        bound = _upper_bound(model, loc, data)
        msg = f"Input should be less than or equal to {bound}" if bound is not None else "too large a number"
        msg += f" (got {_show(e.get('input'))})"
    elif kind == "finite_number":
        msg = f"must be a finite number, not {_show(e.get('input'))} (NaN and infinity are not allowed)"
    elif kind in _SHAPE_ERRORS or kind.startswith(("greater", "less", "too_", "string_")):
        msg = f"{msg} (got {_show(e.get('input'))})"
    return loc, msg


def _format_errors(
    err: ValidationError,
    model: type[BaseModel],
    data: Any,
    source: str,
    lines_of: dict[tuple, int] | None = None,
    *,
    prefix: tuple = (),
    sets: dict[tuple, str] | None = None,
) -> str:
    """One line per problem: ``source:line: yaml.path: what is wrong (and how to fix it)``.

    ``prefix`` is prepended to every location (a profile validated inside a scenario); a location under
    a ``sets`` path (from ``--set``) is reported as coming from that option rather than from a line.
    """
    lines_of = lines_of or {}
    errors = [(_strip_tags(tuple(e["loc"])), e) for e in err.errors()]
    # A union (``float | list[float]``) reports every member that failed: when one member's shape fit the
    # value, its error says more than the others' "should be a valid list"; when none fit, list them all.
    by_loc: dict[tuple, list[dict]] = {}
    explained = _typo_explains(errors, model, data)
    for loc, e in errors:
        if loc in explained and e["type"] == "missing":
            continue
        if e["type"] in _SHAPE_ERRORS and any(
            (other[: len(loc)] == loc and len(other) > len(loc)) or (other == loc and o["type"] not in _SHAPE_ERRORS)
            for other, o in errors
        ):
            continue
        by_loc.setdefault(loc, []).append(e)
    out = []
    for loc, errs in by_loc.items():
        if len(errs) > 1 and all(x["type"] in _SHAPE_ERRORS for x in errs):
            expected = " or ".join(dict.fromkeys(_expected(x) for x in errs))
            where, msgs = loc, [f"expected {expected} (got {_show(errs[0].get('input'))})"]
        else:
            where, msgs = loc, []
            for x in errs:
                where, msg = _message(x, loc, model, data)
                msgs.append(msg)
        full = (*prefix, *where)
        path = _fmt_path(full)
        set_key = next((k for p, k in (sets or {}).items() if full[: len(p)] == p), None)
        line = lines_of.get(full) or _nearest_line(lines_of, full)
        for msg in msgs:
            if set_key is not None:
                out.append(f"--set {set_key}: {path}: {msg}")
            else:
                out.append(f"{source}:{line}: {path}: {msg}" if line else f"{source}: {path}: {msg}")
    return "\n".join(dict.fromkeys(out))


def _nearest_line(lines_of: dict[tuple, int], loc: tuple) -> int | None:
    for n in range(len(loc) - 1, 0, -1):
        if loc[:n] in lines_of:
            return lines_of[loc[:n]]
    return None


# ---------------------------------------------------------------- overrides


def _set_parts(assignment: str) -> tuple[str, list[Any], str]:
    """``a.b.0.c=value`` -> ("a.b.0.c", ["a", "b", 0, "c"], "value")."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: write it as key.path=value, e.g. --set rounds=20")
    key, value_text = assignment.split("=", 1)
    key = key.strip()
    # isascii: str.isdigit accepts superscripts ('²') that int() refuses; such a part is a key, refused later by name
    parts: list[Any] = [int(p) if p.isascii() and p.isdigit() else p for p in key.split(".")]
    if any(p == "" for p in parts):  # list index 0 is a valid key part
        raise ScenarioError(f"--set {assignment!r}: empty key in {key!r}; write it as key.path=value, e.g. rounds=20")
    return key, parts, value_text


def apply_set(raw: dict, assignment: str) -> None:
    """Apply one ``--set a.b.c=value`` (value parsed as YAML; list items addressed by index)."""
    key, parts, value_text = _set_parts(assignment)
    try:
        value = safe_yaml.load(value_text, f"--set {key}").data if value_text.strip() else None
    except safe_yaml.YamlInputError as e:
        raise ScenarioError(str(e)) from None
    cur: Any = raw
    for i, part in enumerate(parts):
        here = _fmt_path(tuple(parts[:i]))
        last = i == len(parts) - 1
        if isinstance(cur, list):
            if not isinstance(part, int) or part >= len(cur):
                what = f"index {part} is out of range" if isinstance(part, int) else f"{part!r} is not an index"
                raise ScenarioError(
                    f"--set {key}: {what}: {here} is a list of {len(cur)} item(s); use an index 0..{len(cur) - 1}"
                    if cur
                    else f"--set {key}: {what}: {here} is an empty list"
                )
        elif isinstance(cur, dict):
            if not last and cur.get(part) is None:
                cur[part] = [] if isinstance(parts[i + 1], int) else {}
        else:
            raise ScenarioError(
                f"--set {key}: {here} is {_show(cur)}, not a mapping or a list, so it has no {part!r} inside"
            )
        if last:
            cur[part] = value
        else:
            cur = cur[part]


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


def resolve_groups(
    sc: Scenario, base_dir: Path | None = None, source: str = "scenario", lines: dict[tuple, int] | None = None
) -> list[ResolvedGroup]:
    """Profiles of every fleet group, overrides applied, with counts; errors name the group (and its line,
    given the scenario's ``lines``)."""
    resolve_server(sc, base_dir, source)
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
            part = "overrides" if g.overrides else "profile"
            raise ScenarioError(
                _format_errors(e, DeviceProfile, merged, source, lines, prefix=("fleet", "groups", i, part))
            ) from None
        if g.power_mode is not None:
            try:
                prof.mode(g.power_mode)
            except KeyError:
                modes = ", ".join(prof.compute.power_modes or {}) or "none"
                raise ScenarioError(
                    f"{where}.power_mode: {g.power_mode!r} is not a power mode of {prof.name} (has: {modes})"
                ) from None
        if g.power_policy is not None and g.power_policy.low_mode not in (prof.compute.power_modes or {}):
            modes = ", ".join(prof.compute.power_modes or {}) or "none"
            raise ScenarioError(
                f"{where}.power_policy.low_mode: {g.power_policy.low_mode!r} is not a power mode of {prof.name} "
                f"(has: {modes})"
            )
        if sc.fleet.memory_units == "mb":
            _check_group_memory(g.memory, prof.memory.total_mb, ("fleet", "groups", i, "memory"), source, lines)
        name = g.name or prof.name
        if name in names_seen:
            name = f"{name}_{i}"
        names_seen.add(name)
        groups.append(ResolvedGroup(name, prof, count, g.power_mode, g))
    return groups


def _check_group_memory(m: Any, total_mb: float, loc: tuple, source: str, lines: Any) -> None:
    """A group's free memory and its fluctuation, in MB, within the profile's total (``profile.above_total``)."""
    sigmas = m.sigma2 if isinstance(m.sigma2, list) else [m.sigma2] if m.sigma2 is not None else []
    given = [("free", m.free), ("sigma", m.sigma)] + [("sigma2", v**0.5) for v in sigmas]
    for key, value in given:
        problem = None if value is None else above_total(value, total_mb, "the profile's ")
        if problem:
            line = (lines or {}).get((*loc, key)) or _nearest_line(lines or {}, (*loc, key))
            shown = f"{value**2:g} (a std of {value:g} MB)" if key == "sigma2" else f"{value:g} MB"
            raise ScenarioError(
                f"{source}{f':{line}' if line else ''}: fleet.groups[{loc[2]}].memory.{key}: {shown} {problem}; "
                "lower it, or raise overrides.memory.total_mb"
            )


def load_scenario(
    path: str | Path | None = None,
    *,
    text: str | None = None,
    sets: list[str] | None = None,
    search: typing.Sequence[Path] = (),
) -> Scenario:
    """Read, override, validate. Raises ScenarioError with one line per problem. A method named by import
    path is looked for in the scenario's folder and in ``search`` (a resumed run's original scenario folder)."""
    source = str(path) if path is not None else "<scenario>"
    if text is None:
        if path is None:
            raise ScenarioError("no scenario given")
        doc = read_yaml(path, "scenario")
    else:
        try:
            doc = safe_yaml.load(text, source)
        except safe_yaml.YamlInputError as e:
            raise ScenarioError(str(e)) from None
    raw = doc.data
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping (name:, rounds:, fleet:, ...)")
    algo_before = raw.get("algorithm")
    name_before = algo_before.get("name") if isinstance(algo_before, dict) else algo_before
    set_paths: dict[tuple, str] = {}
    for s in sets or []:
        apply_set(raw, s)
        key, parts, _ = _set_parts(s)
        set_paths[tuple(parts)] = key
    algo = raw.get("algorithm")
    if isinstance(algo, str):  # shorthand `algorithm: fedavg`
        raw["algorithm"] = algo = {"name": algo}
    if isinstance(algo, dict) and algo.get("name") != name_before:
        _drop_foreign_options(algo, name_before)
    if isinstance(algo, dict) and "name" not in algo:
        raise ScenarioError(
            f"{source}: algorithm.name: required field is missing (one of {', '.join(methods.method_names())})"
        )
    if isinstance(algo, dict) and isinstance(algo.get("name"), str):
        _find_method(algo["name"], path, search, source, doc.lines)
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as e:
        raise ScenarioError(_format_errors(e, Scenario, raw, source, doc.lines, sets=set_paths)) from None
    base_dir = Path(path).resolve().parent / "device_profiles" if path is not None else None
    resolve_groups(sc, base_dir, source, doc.lines)  # fail early on profile problems
    return sc


def _find_method(name: str, path: str | Path | None, search: typing.Sequence[Path], source: str, lines: Any) -> None:
    """Register the method ``algorithm.name`` names when it is an import path or an entry point (so that the
    scenario's model knows its options); an unknown plain name is left to validation (did-you-mean)."""
    folders = ([Path(path).resolve().parent] if path is not None else []) + [Path(p) for p in search]
    try:
        methods.method(name, search=folders)  # the registry first: an entry point is scanned for only if unknown
    except methods.UnknownMethod:
        return  # a misspelt plain name: validation says so, with did-you-mean and the line
    except methods.MethodError as e:
        line = (lines or {}).get(("algorithm", "name")) or _nearest_line(lines or {}, ("algorithm", "name"))
        raise ScenarioError(f"{source}{f':{line}' if line else ''}: algorithm.name: {e}") from None


def _drop_foreign_options(algo: dict, previous: Any) -> None:
    """After `--set algorithm.name=X`, drop the old method's options that X does not take."""
    try:
        cfg = methods.method(algo.get("name")).config
    except (methods.MethodError, TypeError):
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
