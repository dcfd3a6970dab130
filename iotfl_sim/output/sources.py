"""The user's own source files a run loads, by SHA-256, in the run folder's ``sources.json``: a resume refuses
code that changed (or went away) since the run started, naming the file, before it writes anything.

Which files. A module is the user's when its file lies outside the standard library, outside every
site-packages folder (installed distributions) and outside iotfl-sim itself (the ``iotfl_sim`` and ``analysis``
packages): a method module beside the scenario or on PYTHONPATH, an executor factory's module, the script
(``__main__``) that defines either, and a package of the user's installed in editable mode (its files are the
user's working tree). The run's code is found from its roots (the method's class and its bases, its wire's,
an executor factory and the executor it made) and from every user module those modules name at their top level
(``import helpers``, ``from helpers import f``), transitively. A module imported only inside a function, and
never named at a module's top level, is not found: import helpers at the top of your files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import site
import stat
import sys
import sysconfig
import types
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from iotfl_sim.core import safe_json
from iotfl_sim.core.errors import ScenarioError

SOURCES = "sources.json"


@cache
def _not_user_dirs() -> tuple[str, ...]:
    """Folders whose modules are not the user's (each real path ending in a separator)."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    dirs.add(site.getusersitepackages())
    dirs.add(str(Path(__file__).resolve().parents[1]))  # iotfl_sim
    analysis = importlib.util.find_spec("analysis")  # found, not imported: output/ imports no analysis
    if analysis is not None and analysis.origin:
        dirs.add(str(Path(analysis.origin).resolve().parent))
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def _user_file(module: types.ModuleType) -> str | None:
    """The module's file when it is the user's (see the module docstring), else None."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not os.path.isfile(file):
        return None
    real = os.path.realpath(file)
    return None if real.startswith(_not_user_dirs()) else real


def _modules_of(obj: Any) -> list[str]:
    """The modules an object's code comes from: a class's and its bases', an instance's class's, a function's."""
    if isinstance(obj, types.ModuleType):
        return [obj.__name__]
    cls = obj if isinstance(obj, type) else type(obj)
    names = [c.__module__ for c in cls.__mro__]
    own = None if isinstance(obj, type) else getattr(obj, "__module__", None)  # a function's (or a lambda's)
    return [*names, own] if isinstance(own, str) else names


def user_sources(roots: Iterable[Any]) -> dict[str, str]:
    """{file: module name} of every user module the roots' code comes from, and of the user modules those name
    at their top level, transitively (the module docstring's rule)."""
    found: dict[str, str] = {}
    todo = [m for r in roots if r is not None for m in _modules_of(r)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        module = sys.modules.get(name)
        file = _user_file(module) if module is not None else None
        if file is None:
            continue
        found.setdefault(file, name)
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                todo.append(value.__name__)
            else:
                mod = getattr(value, "__module__", None) if isinstance(value, type | types.FunctionType) else None
                if isinstance(mod, str):
                    todo.append(mod)
    return dict(sorted(found.items()))


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sources_text(sources: dict[str, str]) -> str:
    """``sources.json``'s text: each user file the run loaded, its module and its SHA-256."""
    files = [{"path": p, "module": m, "sha256": sha256_file(p)} for p, m in sources.items()]
    return json.dumps({"files": files}, indent=1) + "\n"


def check_sources(run: Path) -> None:
    """Refuse (ScenarioError, one line) a resume of the run folder ``run`` when a user file its run loaded changed
    or went away since it started. A folder without ``sources.json`` (made before it was written) is not checked."""
    path = run / SOURCES
    if not path.is_file():
        return
    fix = "a run resumes only with the code it started with"
    try:
        doc = safe_json.read(path)
    except ValueError as e:
        doc = f"not readable JSON ({e})"
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list) or not all(_entry(f) for f in files):
        what = doc if isinstance(doc, str) else "not the list of source files iotfl-sim run writes"
        raise ScenarioError(f"--resume {run}: {path} is {what}, so the code the run loaded cannot be checked; {fix}: start a new run")
    for f in files:
        where = f"{f['path']} (module {f['module']})"
        try:
            if not stat.S_ISREG(os.stat(f["path"]).st_mode):  # a device or a pipe would never end (or block)
                raise ScenarioError(f"--resume {run}: {where} is not a regular file; {fix}: put the file back as it was")
            now = sha256_file(f["path"])
        except FileNotFoundError:
            raise ScenarioError(f"--resume {run}: {where} is gone since the run started; {fix}: put it back as it was, or start a new run") from None
        except OSError as e:
            raise ScenarioError(f"--resume {run}: {where} cannot be read ({e.strerror}); {fix}: make it readable again") from None
        if now != f["sha256"]:
            raise ScenarioError(
                f"--resume {run}: {where} changed since the run started; {fix}: put it back as it was (sha256 "
                f"{f['sha256'][:12]}...), or start a new run"
            )


def _entry(f: Any) -> bool:
    return (
        isinstance(f, dict)
        and all(isinstance(f.get(k), str) for k in ("path", "module", "sha256"))
        and len(f["sha256"]) == 64
        and all(c in "0123456789abcdef" for c in f["sha256"])
    )
