"""The tensors a resume reads from a checkpoint, checked against what the resumed run builds.

A checkpoint's SHA-256s catch a truncated or damaged file, not one edited with its hash rewritten. So before
a resumed run takes a tensor from a checkpoint, the tensor is compared with the value the run holds in its
place (a freshly set-up strategy's attribute, the weights a device in flight would download now, the RNG
state): the same dtype and shape, and finite values where it holds floats (a NaN model would train on
silently; a run whose weights diverged has nothing to resume either). Each function returns the first
problem, as words after the entry's name, or None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def describe(t: torch.Tensor | np.ndarray) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    return f"{dtype} tensor of shape {tuple(t.shape)}"


def _not_finite(t: torch.Tensor) -> bool:
    return (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())


def mismatch(saved: Any, ref: Any, where: str, model: Mapping[str, list[torch.Tensor]] | None = None) -> str | None:
    """The first difference between the decoded checkpoint value ``saved`` and ``ref``, the value the run holds
    in its place (None where it holds nothing yet, e.g. a buffer made at the first step). Where the run holds
    a tensor, the saved one must have its dtype and shape; where it holds none, a tensor named like one of the
    model's (``model``: name -> the run's tensors of that name) must be a prefix of one of them in every
    dimension (a submodel's slice; a buffer may keep another dtype). Every saved float tensor must be finite."""
    if isinstance(saved, torch.Tensor):
        if _not_finite(saved):
            return f"{where} holds non-finite values (NaN or inf)"
        if isinstance(ref, torch.Tensor):
            if saved.dtype != ref.dtype or saved.shape != ref.shape:
                return f"{where} is a {describe(saved)}, where the run builds a {describe(ref)}"
        elif ref is None and model is not None and where.endswith("']"):
            name = where[where.rfind("['") + 2 : -2]
            alike = model.get(name, [])
            if alike and not any(_prefix(saved.shape, t.shape) for t in alike):
                return f"{where} is a {describe(saved)}, which fits no tensor {name!r} of the run's model ({describe(alike[0])})"
        return None
    if isinstance(ref, torch.Tensor):
        return f"{where} is a {type(saved).__name__}, where the run builds a {describe(ref)}"
    if isinstance(saved, np.ndarray) and isinstance(ref, np.ndarray):
        if saved.dtype != ref.dtype or saved.shape != ref.shape:
            return f"{where} is a {describe(saved)}, where the run builds a {describe(ref)}"
        return None
    if isinstance(saved, dict):
        if "__obj__" in saved and ref is not None and hasattr(ref, "__dict__"):  # codec.capture of an object
            return mismatch(saved["__obj__"], vars(ref), where, model)
        refs = ref if isinstance(ref, dict) else {}
        for k, v in saved.items():
            found = mismatch(v, refs.get(k), f"{where}[{k!r}]", model)
            if found:
                return found
        return None
    if isinstance(saved, (list, tuple)):
        same = isinstance(ref, (list, tuple)) and len(ref) == len(saved)
        for i, v in enumerate(saved):
            found = mismatch(v, ref[i] if same else None, f"{where}[{i}]", model)
            if found:
                return found
        return None
    if dataclasses.is_dataclass(saved) and not isinstance(saved, type):
        same = type(ref) is type(saved)
        for f in dataclasses.fields(saved):
            found = mismatch(getattr(saved, f.name, None), getattr(ref, f.name, None) if same else None, f"{where}.{f.name}", model)
            if found:
                return found
    return None


def _prefix(shape: torch.Size, of: torch.Size) -> bool:
    return len(shape) == len(of) and all(a <= b for a, b in zip(shape, of, strict=True))


def named_tensors(value: Any, out: dict[str, list[torch.Tensor]] | None = None) -> dict[str, list[torch.Tensor]]:
    """Every tensor held under a string key anywhere in ``value`` (a strategy's attributes), by that key: the
    model's tensors a saved buffer or message of the same name is cut from."""
    out = {} if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, torch.Tensor) and isinstance(k, str):
                out.setdefault(k, []).append(v)
            else:
                named_tensors(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            named_tensors(v, out)
    return out


def weights_mismatch(saved: Any, sent: Mapping[str, torch.Tensor], sub: Mapping[str, tuple[int, ...]], where: str) -> str | None:
    """The weights a device downloaded (``saved``) against what it would download now: ``sent``, the strategy's
    payload (a state of the same names, dtypes and shapes), or its slice ``sub`` (name -> shape) to the task's
    submodel (a quantized download is cut to it first)."""
    if not (isinstance(saved, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in saved.items())):
        return f"{where} is not a set of named tensors"
    if set(saved) != set(sent) and set(saved) != set(sub):
        extra = sorted(set(saved) - set(sent)) or sorted(set(sent) - set(saved))
        return f"{where} names other tensors than the run's model ({', '.join(map(repr, extra[:3]))}, ...)"
    for k, t in saved.items():
        if _not_finite(t):
            return f"{where}[{k!r}] holds non-finite values (NaN or inf)"
        ref = sent.get(k)
        if ref is not None and (t.dtype != ref.dtype or tuple(t.shape) not in (tuple(ref.shape), tuple(sub.get(k, ())))):
            return f"{where}[{k!r}] is a {describe(t)}, where the run builds a {describe(ref)}"
    return None
