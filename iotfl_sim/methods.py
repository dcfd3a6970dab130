"""Where FL methods are found by name: each method is registered once, and everything else derives from here.

A method is a :class:`~iotfl_sim.algorithms.base.Strategy` subclass with its options class (a
``MethodConfig`` subclass, ``Strategy.Config``). It is found by the name a scenario gives in
``algorithm.name``, which is one of:

- a registered name: the built-in methods (the table ``BUILTINS`` below), or a method registered with
  :func:`register_method` (``iotfl_sim.run(..., methods=[...])`` does this for the classes it is given);
- a Python import path ``package.module:Class`` (imported on first use; a scenario's own folder is searched
  too, so ``my_method:MyStrategy`` finds ``my_method.py`` beside the scenario file);
- the name of an installed entry point in the group ``iotfl_sim.methods`` (``[project.entry-points."iotfl_sim.methods"]
  myprox = "mypkg.prox:MyProx"`` in the package's pyproject.toml).

The scenario's schema, ``iotfl-sim schema``, the did-you-mean messages and the README's method table all read
:func:`method_names` and :func:`method`. This module imports nothing of ``iotfl_sim``: the built-in methods'
options and strategies are named by import path, their options class imported when first read (so validating a
scenario never imports PyTorch), their strategy when a run builds it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENTRY_POINT_GROUP = "iotfl_sim.methods"


class MethodError(ValueError):
    """A method name that names no method, or an import path that does not give a Strategy."""


class UnknownMethod(MethodError):
    """A plain name that is neither registered nor an installed entry point."""


@dataclass(frozen=True)
class Method:
    name: str
    options: str | type  # its MethodConfig subclass (validated with the scenario), or its "module:Class"
    strategy: str | type  # the Strategy subclass, or its "module:Class" (imported on first use)

    @property
    def config(self) -> type:
        """The method's options class (a MethodConfig subclass), imported on first use."""
        return _resolve(self.options)

    def strategy_class(self) -> type:
        return _resolve(self.strategy)


def _resolve(ref: str | type) -> type:
    if isinstance(ref, type):
        return ref
    module, _, qualname = ref.partition(":")
    return _attribute(importlib.import_module(module), qualname)


_OPTIONS = "iotfl_sim.scenario.algorithms."
_STRATEGY = "iotfl_sim.algorithms."
# The built-in methods, in the order of the schema, the name lists and docs/methods_and_modes.md:
# (name, options class, strategy class), each "module:Class" under the packages above.
BUILTINS: tuple[tuple[str, str, str], ...] = (
    ("fedavg", "nested:FedAvgConfig", "fedavg:FedAvg"),
    ("decoupled", "nested:DecoupledConfig", "decoupled:Decoupled"),
    ("heterofl", "nested:HeteroFLConfig", "heterofl:HeteroFL"),
    ("heterofl_iot", "nested:HeteroFLIoTConfig", "heterofl_iot:HeteroFLIoT"),
    ("adaptivefl", "pruning:AdaptiveFLConfig", "adaptivefl:AdaptiveFL"),
    ("scalefl", "pruning:ScaleFLConfig", "scalefl:ScaleFL"),
    ("flexfl", "pruning:FlexFLConfig", "flexfl:FlexFL"),
    ("adapterfl", "prototypes:AdapterFLConfig", "adapterfl:AdapterFL"),
    ("fedbase", "prototypes:FedBaseConfig", "adapterfl:FedBase"),
    ("feddf", "prototypes:FedDFConfig", "feddf:FedDF"),
    ("fedx", "quantized:FedXConfig", "fedx:FedX"),
    ("dadaquant", "quantized:DAdaQuantConfig", "dadaquant:DAdaQuant"),
    ("fedprox", "server_optim:FedProxConfig", "fedprox:FedProx"),
    ("fedopt", "server_optim:FedOptConfig", "fedopt:FedOpt"),
    ("fedasync", "asynchronous:FedAsyncConfig", "fedasync:FedAsync"),
    ("fedbuff", "asynchronous:FedBuffConfig", "fedbuff:FedBuff"),
)  # fmt: skip

_METHODS: dict[str, Method] = {name: Method(name, _OPTIONS + o, _STRATEGY + s) for name, o, s in BUILTINS}
# Not a method but a whole Flower app in the method's place (``iotfl_sim.flower``): found by name like a method,
# never listed among them (it selects and aggregates in its own ServerApp, and needs the flower extra).
FLOWER = Method("flower", _OPTIONS + "flower:FlowerConfig", _STRATEGY + "flower_app:FlowerApp")


def register_method(strategy: type, name: str | None = None) -> Method:
    """Register a Strategy subclass under ``name`` (default: its ``name`` class attribute, else its import
    path ``module:Class``), with its options class ``strategy.Config``. Registering the same class under the
    same name again is a no-op; another class under a taken name is refused."""
    _check_strategy(strategy, repr(strategy))
    name = name or getattr(strategy, "name", None) or f"{strategy.__module__}:{strategy.__qualname__}"
    if not isinstance(name, str) or not name:
        raise MethodError(f"{strategy.__qualname__}: a method's name is a non-empty string, got {name!r}")
    have = _METHODS.get(name)
    if have is not None:
        if have.strategy is strategy or have.strategy == f"{strategy.__module__}:{strategy.__qualname__}":
            return have
        raise MethodError(f"method name {name!r} is taken (by {have.strategy}); register {strategy.__qualname__} under another name")
    method = Method(name, _config_for(strategy.Config, name), strategy)
    _METHODS[name] = method
    return method


def _config_for(config: type, name: str) -> type:
    """``config`` itself, or, when its ``name`` field allows only other names (a subclass of a built-in
    method registered under a name of its own), a subclass of it whose ``name`` is any string."""
    from typing import Literal, get_args, get_origin

    from pydantic import create_model

    annotation = config.model_fields["name"].annotation
    if get_origin(annotation) is Literal and name not in get_args(annotation):
        return create_model(config.__name__, __base__=config, __module__=config.__module__, name=(str, ...))
    return config


def method(name: str, search: Iterable[Path] = ()) -> Method:
    """The method a scenario's ``algorithm.name`` names: registered, an import path (``search``: more folders
    to import it from, e.g. the scenario's own), or an installed entry point. Raises MethodError naming the
    problem and the fix."""
    found = _METHODS.get(name)
    if found is not None:
        return found
    if name == FLOWER.name:
        return FLOWER
    if ":" in name:
        return register_method(_import_path(name, search), name=name)
    for ep in _entry_points():
        if ep.name == name:
            try:
                announce_import(ep.module, f"method module (entry point {name})")
                cls = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken third-party package: one line naming it
                raise MethodError(f"method {name!r}: its entry point {ep.value!r} failed to load: {type(e).__name__}: {e}") from None
            _check_strategy(cls, f"entry point {name} = {ep.value!r}")
            return register_method(cls, name=name)
    close = difflib.get_close_matches(name, method_names(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UnknownMethod(
        f"unknown method {name!r}{hint}; one of {', '.join(method_names())}, a Python import path "
        "package.module:Class naming a Strategy subclass, or flower (a Flower app: docs/flower.md)"
    )


def method_names() -> tuple[str, ...]:
    """Every registered method's name (built-ins first, in their order), then installed entry points'."""
    names = list(_METHODS)
    names += [ep.name for ep in _entry_points() if ep.name not in _METHODS]
    return tuple(names)


def registered() -> tuple[Method, ...]:
    """The methods registered so far (entry points are registered when first named)."""
    return tuple(_METHODS.values())


def registered_method(name: str) -> Method | None:
    """The method registered under ``name`` (or the Flower app slot, ``FLOWER``), or None (nothing is imported or
    looked up)."""
    return _METHODS.get(name) or (FLOWER if name == FLOWER.name else None)


def _entry_points() -> list[Any]:
    try:
        return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # noqa: BLE001 - broken metadata of some installed package: no entry points
        return []


def _attribute(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _import_path(name: str, search: Iterable[Path]) -> type:
    cls = import_attribute(name, search, f"method {name!r}", "method module", "Class")
    _check_strategy(cls, f"method {name!r}")
    return cls


def import_attribute(ref: str, search: Iterable[Path], label: str, what: str, attr: str = "attribute") -> Any:
    """The object ``package.module:attr`` names, its module imported with the ``search`` folders first on the path
    (a scenario's folder); every failure is a MethodError of one line starting with ``label``."""
    module_name, _, qualname = ref.partition(":")
    if not module_name or not qualname:
        raise MethodError(f"{label}: an import path is package.module:{attr} (both parts)")
    extra = [str(Path(p)) for p in search if str(Path(p)) not in sys.path]
    sys.path[:0] = extra
    try:
        announce_import(module_name, what)
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        where = f" or in {', '.join(extra)}" if extra else ""
        raise MethodError(
            f"{label}: no module {e.name!r} on the Python path{where}; install the package, put "
            f"{module_name.replace('.', '/')}.py beside the scenario, or set PYTHONPATH"
        ) from None
    except SystemExit as e:  # sys.exit() at a module's top level would end the run silently, as if it succeeded
        raise MethodError(
            f"{label}: importing {module_name} failed: it called sys.exit({e.code!r}) at import; a {what} "
            "only defines things at import (put script code under `if __name__ == '__main__':`)"
        ) from None
    except Exception as e:  # noqa: BLE001 - the user's module failed while importing: one line naming it
        raise MethodError(f"{label}: importing {module_name} failed: {type(e).__name__}: {e}") from None
    finally:
        for p in extra:
            if p in sys.path:
                sys.path.remove(p)
    try:
        return _attribute(module, qualname)
    except AttributeError:
        raise MethodError(f"{label}: module {module_name} has no {qualname!r}") from None
    except Exception as e:  # noqa: BLE001 - a module-level __getattr__ of the user's that fails
        raise MethodError(f"{label}: reading {qualname!r} from {module_name} failed: {type(e).__name__}: {e}") from None


def announce_import(module_name: str, what: str) -> None:
    """Say on stderr which module is imported from where, before importing it: a module that hangs at import
    (a loop or a sleep at its top level) is then named while it hangs, and Ctrl-C ends it (``interrupted``).
    Nothing is said for a module already imported, or one that is not there (the import's error says so)."""
    if module_name in sys.modules:
        return
    where = _origin(module_name)
    if where is not None:
        print(f"note: importing {what} {module_name} from {where} ...", file=sys.stderr, flush=True)


def _origin(module_name: str) -> str | None:
    """The file (or package folder) ``module_name`` would be imported from, found without running any module's
    code (a submodule of a package not imported yet is located by its top-level package); None: not found."""
    import importlib.machinery
    import importlib.util

    parent = module_name.rpartition(".")[0]
    try:
        if not parent or parent in sys.modules:
            spec = importlib.util.find_spec(module_name)
        else:
            spec = importlib.machinery.PathFinder.find_spec(module_name.partition(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin in (None, "built-in", "frozen"):  # a namespace package, or a module built into the interpreter
        return next(iter(spec.submodule_search_locations or ()), spec.origin or "a namespace package")
    return spec.origin if spec.name == module_name else str(Path(spec.origin).parent)


def _derives(c: Any, module: str, qualname: str) -> bool:
    # by the bases' names: the registry (read by the configuration layer) imports no strategy code
    return isinstance(c, type) and any(b.__module__ == module and b.__qualname__ == qualname for b in c.__mro__)


def capability_problem(strategy: type, config: type) -> str | None:
    """Where a strategy and its options class disagree on asynchrony (one line naming the fix), or None. A strategy
    subclassing ``iotfl_sim.strategy.Asynchronous`` folds updates in as they arrive, with no rounds, so its options'
    ``modes`` are exactly {"async"}; any other strategy runs in rounds, so its options declare sync, and async only
    beside it (its buffered form, ``sim/buffered_async.py``)."""
    modes = getattr(config, "modes", frozenset())
    s, c = strategy.__name__, config.__name__
    if _derives(strategy, "iotfl_sim.algorithms.base", "Asynchronous"):
        if set(modes) != {"async"}:
            return (
                f"{s} subclasses iotfl_sim.strategy.Asynchronous, which runs only with server.mode: async, but its "
                f"options {c} declare modes {', '.join(sorted(modes)) or 'none'}; set modes = frozenset({{'async'}}) in {c}"
            )
    elif "async" in modes and "sync" not in modes:
        return (
            f"{c} declares async as its only server mode, but {s} does not subclass iotfl_sim.strategy.Asynchronous; "
            f"write class {s}(Asynchronous, Strategy) (docs/write_a_method.md), or add sync to {c}.modes (a "
            "round-based method then runs asynchronously in its buffered form)"
        )
    return None


def _check_strategy(cls: Any, what: str) -> None:
    if not _derives(cls, "iotfl_sim.algorithms.base", "Strategy"):
        raise MethodError(f"{what}: {cls!r} is not a subclass of iotfl_sim.Strategy")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))  # what Python would refuse to instantiate
    if missing:
        raise MethodError(
            f"{what}: {cls.__qualname__} does not define {', '.join(missing)}, which every method must; define "
            f"{'it' if len(missing) == 1 else 'them'} in {cls.__qualname__} (docs/write_a_method.md)"
        )
    config = getattr(cls, "Config", None)
    if not _derives(config, "iotfl_sim.scenario.algorithms.base", "MethodConfig"):
        raise MethodError(f"{what}: {cls.__qualname__}.Config must be a subclass of iotfl_sim.MethodConfig, got {config!r}")
    problem = capability_problem(cls, config)
    if problem is not None:
        raise MethodError(f"{what}: {problem}")
