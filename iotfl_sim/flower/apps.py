"""Finding a Flower app: the ``ServerApp`` and ``ClientApp`` a scenario names by import path (searched in the
scenario's folder first, as a Flower project's ``[tool.flwr.app.components]`` names them), and the run config the
app reads (``[tool.flwr.app.config]`` of the project's ``pyproject.toml``, with the scenario's overrides), as
``flwr run --run-config`` fuses them.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iotfl_sim.core.errors import ScenarioError
from iotfl_sim.methods import MethodError, import_attribute

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: Flower depends on tomli
    import tomli as tomllib

ConfigValue = bool | int | float | str


@dataclass(frozen=True)
class FlowerApp:
    server_app: Any  # flwr.serverapp.ServerApp
    client_app: Any  # flwr.clientapp.ClientApp
    run_config: dict[str, ConfigValue]


@contextmanager
def app_folder(folder: Path) -> Iterator[None]:
    """``folder`` first on the Python path for the run: a Flower app imports its own modules as it runs."""
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def load_app(server_app: str, client_app: str, overrides: Mapping[str, ConfigValue], folder: Path) -> FlowerApp:
    """The app's two objects and its run config; one ScenarioError line naming the field for any problem."""
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    server = _load(server_app, folder, "algorithm.server_app", ServerApp)
    client = _load(client_app, folder, "algorithm.client_app", ClientApp)
    return FlowerApp(server, client, run_config(folder, overrides))


def _load(ref: str, folder: Path, field: str, kind: type) -> Any:
    try:
        obj = import_attribute(ref, [folder], f"{field}: {ref!r}", "Flower app module", "app")
    except MethodError as e:
        raise ScenarioError(str(e)) from None
    if not isinstance(obj, kind):
        raise ScenarioError(
            f"{field}: {ref!r} is a {type(obj).__name__}, not a Flower {kind.__name__}; name the "
            f"{kind.__name__} object, e.g. 'package.module:app' where app = {kind.__name__}(...)"
        )
    return obj


def run_config(folder: Path, overrides: Mapping[str, ConfigValue]) -> dict[str, ConfigValue]:
    """``[tool.flwr.app.config]`` of ``folder/pyproject.toml`` (flattened with dots, as Flower does), then the
    scenario's ``run_config``; without a pyproject.toml, the scenario's alone. An override of a key the app does
    not declare is refused (a typo would otherwise run the app with its default)."""
    base: dict[str, ConfigValue] = {}
    project = folder / "pyproject.toml"
    if project.is_file():
        try:
            doc = tomllib.loads(project.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ScenarioError(f"{project}: not a readable pyproject.toml ({e}); fix it or remove it") from None
        table = doc.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {})
        base = dict(_flatten(table)) if isinstance(table, dict) else {}
    if base:
        for key in overrides:
            if key not in base:
                near = difflib.get_close_matches(key, list(base), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else f"; the app's keys: {', '.join(sorted(base))}"
                raise ScenarioError(f"algorithm.run_config.{key}: {project} declares no such key{hint}")
    return {**base, **overrides}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, ConfigValue]]:
    for key, value in table.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
