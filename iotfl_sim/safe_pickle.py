"""Reading pickles from paths the user gives (FedScale traces, CIFAR batches) without running code.

``pickle.load`` on a file from elsewhere is arbitrary code execution: a pickle names any callable to
rebuild its objects. This unpickler resolves only plain containers and numpy arrays; anything else
stops the load with an error that says what was inside.
"""

from __future__ import annotations

import pickle
from typing import IO, Any

ALLOWED = "dicts, lists, tuples, numbers, strings, bytes and numpy arrays"


class RestrictedUnpickler(pickle.Unpickler):
    """Builtin containers and numbers come without a lookup; only these globals are resolved."""

    _ALLOWED = {
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        if not all(part.isidentifier() for part in (*module.split("."), name)):
            # protocol 0 reads a text file's "c" as GLOBAL and its lines as a module and a name
            raise pickle.UnpicklingError("this is not a pickle file (its bytes read as text, not pickle opcodes)")
        raise pickle.UnpicklingError(
            f"it contains an object of type {module}.{name}; only {ALLOWED} are loaded, since unpickling "
            "anything else can run code"
        )


def load(fh: IO[bytes], **kwargs: Any) -> Any:
    """``pickle.load(fh, **kwargs)`` restricted to :data:`ALLOWED`; raises pickle.UnpicklingError."""
    return RestrictedUnpickler(fh, **kwargs).load()
