"""Plain-data encoding of simulator state for checkpoints, loadable without arbitrary pickle.

``encode`` turns a value made of tensors, numpy arrays and scalars, containers and the simulator's own
dataclasses into a tree of dicts, lists, tuples, numbers, strings and tensors: exactly what
``torch.load(weights_only=True)`` accepts. ``decode`` rebuilds the value; a dataclass is rebuilt only if
its class lives in ``iotfl_sim`` (named as ``module:qualname``), field by field, without running its
``__init__``. ``capture`` / ``restore`` do the same for the attributes of an object (a strategy), in place.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import numpy as np
import torch

from iotfl_sim.core.errors import CheckpointError

_TAGS = ("__nd__", "__np__", "__set__", "__frozenset__", "__map__", "__dc__", "__obj__")
# attributes never captured: the set-up context and config (rebuilt from the scenario) and caches ("_" names);
# nor those holding an object of the types ``capture`` is told the engine shares (restoring a copy would cut the link)
_SKIP_NAMES = {"ctx", "cfg"}


def _torch_dtype_ok(a: np.ndarray) -> bool:
    return a.dtype.kind in "biuf" and a.dtype.str not in ("<u2", "<u4", "<u8", ">u2", ">u4", ">u8")


def encode(v: Any) -> Any:
    if isinstance(v, np.generic):  # first: numpy's float64 is also a Python float
        return {"__np__": v.dtype.str, "v": v.item()}
    if v is None or isinstance(v, (bool, int, float, str, torch.Tensor)):
        return v
    if isinstance(v, np.ndarray):
        if _torch_dtype_ok(v):
            return {"__nd__": torch.from_numpy(np.ascontiguousarray(v)).clone(), "dtype": v.dtype.str}
        if v.dtype.kind == "U" or v.dtype.kind in "iu":
            return {"__nd__": v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
        raise CheckpointError(f"cannot checkpoint a numpy array of dtype {v.dtype}")
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return tuple(encode(x) for x in v)
    if isinstance(v, (set, frozenset)):
        tag = "__set__" if isinstance(v, set) else "__frozenset__"
        return {tag: [encode(x) for x in sorted(v, key=repr)]}
    if isinstance(v, dict):
        if all(isinstance(k, str) and k not in _TAGS for k in v):
            return {k: encode(x) for k, x in v.items()}
        return {"__map__": [(encode(k), encode(x)) for k, x in v.items()]}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        cls = type(v)
        _check_own(cls)
        return {"__dc__": f"{cls.__module__}:{cls.__qualname__}",
                "f": {f.name: encode(getattr(v, f.name)) for f in dataclasses.fields(v)}}  # fmt: skip
    raise CheckpointError(f"cannot checkpoint a value of type {type(v).__module__}.{type(v).__qualname__}")


def decode(v: Any) -> Any:
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, tuple):
        return tuple(decode(x) for x in v)
    if not isinstance(v, dict):
        return v
    if "__nd__" in v:
        data = v["__nd__"]
        if isinstance(data, torch.Tensor):
            return data.numpy().astype(np.dtype(v["dtype"]), copy=False)
        return np.array(data, dtype=np.dtype(v["dtype"])).reshape(v["shape"])
    if "__np__" in v:
        return np.dtype(v["__np__"]).type(v["v"])
    if "__set__" in v:
        return {decode(x) for x in v["__set__"]}
    if "__frozenset__" in v:
        return frozenset(decode(x) for x in v["__frozenset__"])
    if "__map__" in v:
        return {_hashable(decode(k)): decode(x) for k, x in v["__map__"]}
    if "__dc__" in v:
        cls = _own_class(v["__dc__"])
        obj = cls.__new__(cls)
        for name, x in v["f"].items():
            object.__setattr__(obj, name, decode(x))
        return obj
    return {k: decode(x) for k, x in v.items()}


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


def _check_own(cls: type) -> None:
    if not cls.__module__.startswith("iotfl_sim."):
        raise CheckpointError(f"cannot checkpoint a dataclass from outside iotfl_sim: {cls.__module__}.{cls.__qualname__}")


def _own_class(name: str) -> type:
    """The simulator's own dataclass named ``module:qualname`` (nothing else can be named)."""
    module, _, qual = name.partition(":")
    if not module.startswith("iotfl_sim.") or not qual:
        raise CheckpointError(f"checkpoint names a class outside iotfl_sim: {name!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise CheckpointError(f"checkpoint names an unknown class {name!r}") from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise CheckpointError(f"checkpoint names {name!r}, which is not a dataclass of iotfl_sim")
    return obj


def capture(obj: Any, names: tuple[str, ...] | None = None, shared: tuple[type, ...] = ()) -> dict[str, Any]:
    """The state of ``obj``'s attributes ``names`` (a strategy's declared ``checkpointed``), or of all its
    public attributes when None but those holding a ``shared`` object (``algorithms.base.ENGINE_SHARED``):
    plain data encoded; the simulator's other objects captured in turn."""
    if names is not None:
        missing = [n for n in names if not hasattr(obj, n)]
        if missing:
            raise CheckpointError(f"{type(obj).__qualname__}: declared checkpointed attributes it does not have: {', '.join(missing)}")
        items = [(n, getattr(obj, n)) for n in names]
    else:
        items = [(n, v) for n, v in vars(obj).items() if not (n in _SKIP_NAMES or n.startswith("_") or isinstance(v, shared))]
    out: dict[str, Any] = {}
    for name, v in items:
        try:
            out[name] = encode(v)
        except CheckpointError:
            if not (hasattr(v, "__dict__") and type(v).__module__.startswith("iotfl_sim.")):
                raise CheckpointError(
                    f"{type(obj).__qualname__}.{name}: cannot checkpoint a {type(v).__module__}.{type(v).__qualname__}"
                ) from None
            out[name] = {"__obj__": capture(v, shared=shared)}
    return out


def restore(obj: Any, state: dict[str, Any], names: tuple[str, ...] | None = None) -> None:
    """Put ``capture``'d state back into ``obj`` (a freshly set-up object of the same class). With ``names``
    (what the object declares now), the state must hold exactly those: a checkpoint of another version of
    the method is refused rather than half restored."""
    if names is not None and set(state) != set(names):
        raise CheckpointError(
            f"this checkpoint holds {type(obj).__qualname__} state ({', '.join(sorted(state)) or 'none'}) but the "
            f"method now keeps {', '.join(sorted(names)) or 'none'}: it was written by another version of "
            "iotfl-sim; resume it with that version, or start the run again"
        )
    for name, v in state.items():
        if isinstance(v, dict) and "__obj__" in v:
            restore(getattr(obj, name), v["__obj__"])
        else:
            setattr(obj, name, decode(v))
