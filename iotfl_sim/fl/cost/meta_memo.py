"""Meta-device kernels remembered by their inputs' metadata: the shortcut that makes tracing a step cheap.

On the meta device an ATen op computes only its outputs' metadata (shapes, strides, dtypes), and many of PyTorch's
meta kernels are Python decompositions: batch norm and its backward, relu and its backward, division take 2-15 ms
a call, most of a trace's time. A functional op's outputs are a pure function of its inputs' metadata and its other
arguments, and a network repeats its shapes (a ResNet's blocks, the two batch sizes of a trace), so ``meta_call``
runs each distinct call's kernel once and afterwards makes fresh meta tensors of the remembered metadata: the same
op table (``tests/test_meta_memo.py`` traces every model family both ways), in a fraction of the time.

Run as they are: ops that write into an argument or return an alias of one (unless the mutable argument is
absent, as batch norm's running statistics are when they are not tracked), views, calls with a tensor that is
not a plain meta tensor or an argument of a kind not listed in ``_key``, outputs with a storage offset.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

MAX_ENTRIES = 100_000  # distinct calls remembered (a few hundred bytes each); past it the memo starts again
# An op is remembered when its first call took this long: the Python kernels take 0.4-10 ms, the C++ ones (add_,
# convolution, detach) 0.02-0.2 ms, under what building a key costs. Which ops are remembered changes the speed only.
SLOW_S = 3e-4
_SLOW: dict[Any, bool] = {}  # op -> remembered
_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a tensor subclass may carry more than metadata
_MEMO: dict[tuple, tuple[Any, list[tuple]]] = {}


class _Unmemoizable(Exception):
    pass


def meta_call(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)``, from the memo when this call's metadata was seen before."""
    slow = _SLOW.get(func)
    if slow is None:  # an op's first call: timed, to learn whether its kernel is worth remembering
        t0 = time.perf_counter()
        out = func(*args, **kwargs)
        _SLOW[func] = time.perf_counter() - t0 >= SLOW_S and _functional(func)
        return out
    if not slow or _writes_an_argument(func, args, kwargs):
        return func(*args, **kwargs)
    try:
        key = (func, _key(args), _key(kwargs))
    except _Unmemoizable:
        return func(*args, **kwargs)
    kept = _MEMO.get(key)
    if kept is not None:
        spec, leaves = kept
        return tree_unflatten([_make(leaf) for leaf in leaves], spec)
    out = func(*args, **kwargs)
    try:
        flat, spec = tree_flatten(out)
        leaves = [_describe(x) for x in flat]
    except _Unmemoizable:
        return out
    if len(_MEMO) >= MAX_ENTRIES:
        _MEMO.clear()
    _MEMO[key] = (spec, leaves)
    return out


@cache
def _functional(func: Any) -> bool:
    """No view, no output aliasing an input."""
    return not func.is_view and all(r.alias_info is None for r in func._schema.returns)


@cache
def _mutable_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of the arguments ``func`` writes into."""
    return tuple(
        (i, a.name) for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write
    )


def _writes_an_argument(func: Any, args: tuple, kwargs: dict) -> bool:
    for i, name in _mutable_arguments(func):
        value = args[i] if i < len(args) else kwargs.get(name)
        if value is not None:
            return True
    return False


def _key(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        if type(x) not in _PLAIN or x.device.type != "meta" or x.layout != torch.strided:
            raise _Unmemoizable
        return ("T", tuple(x.shape), x.stride(), x.dtype, x.storage_offset(), x.requires_grad)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_key(v) for v in x))
    if isinstance(x, dict):
        return ("D", tuple((k, _key(v)) for k, v in x.items()))
    if isinstance(x, _SCALARS):
        return (type(x).__name__, x)
    raise _Unmemoizable


def _describe(x: Any) -> tuple:
    if isinstance(x, torch.Tensor):
        if type(x) not in _PLAIN or x.device.type != "meta" or x.layout != torch.strided or x.storage_offset():
            raise _Unmemoizable
        return ("T", tuple(x.shape), x.stride(), x.dtype, x.requires_grad)
    if isinstance(x, _SCALARS):
        return ("V", x)
    raise _Unmemoizable


def _make(leaf: tuple) -> Any:
    if leaf[0] == "V":
        return leaf[1]
    _, shape, stride, dtype, requires_grad = leaf
    return torch.empty_strided(shape, stride, dtype=dtype, device="meta", requires_grad=requires_grad)
