"""Flower apps on the simulated fleet: an unmodified Flower ``ServerApp`` / ``ClientApp`` pair run by iotfl-sim.

Only this package imports ``flwr`` (the ``flower`` extra: ``pip install 'iotfl-sim[flower]'``); the rest of
iotfl-sim never does. ``require_flower`` turns a missing or unsupported Flower into one line naming the fix.
"""

from __future__ import annotations

from importlib import metadata

from iotfl_sim.core.errors import ScenarioError

SUPPORTED = ((1, 42), (1, 43))  # [from, to): the Flower versions the adapter is tested with
INSTALL = "pip install 'iotfl-sim[flower]'"


def require_flower(field: str = "algorithm.name") -> str:
    """Flower's version, or a ScenarioError naming ``field`` and the install command."""
    try:
        version = metadata.version("flwr")
    except metadata.PackageNotFoundError:
        raise ScenarioError(f"{field}: flower needs the Flower package, which is not installed; {INSTALL}") from None
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    lo, hi = SUPPORTED
    if not lo <= parts < hi:
        raise ScenarioError(
            f"{field}: Flower {version} is installed; the adapter supports Flower {lo[0]}.{lo[1]} up to but not "
            f"including {hi[0]}.{hi[1]}; {INSTALL}"
        )
    try:
        import flwr.app  # noqa: F401 - installed is not importable: a broken install, a missing dependency
    except ImportError as e:
        raise ScenarioError(f"{field}: Flower {version} is installed but cannot be imported ({e}); {INSTALL}") from None
    return version
