"""A scenario resolved for a run: what ``sim.setup.build_simulation`` builds a run from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from iotfl_sim.scenario.loader import ResolvedGroup
from iotfl_sim.scenario.model import Scenario


@dataclass(frozen=True)
class ResolvedScenario:
    """The validated scenario, its fleet groups with their profiles resolved (``scenario.loader.resolve_groups``),
    the folder its relative paths resolve against (availability traces; None: the working directory) and the name
    its errors give it (the scenario file)."""

    scenario: Scenario
    groups: list[ResolvedGroup]
    base_dir: Path | None = None
    source: str = "scenario"

    def system_only(self) -> ResolvedScenario:
        """The same run with no data and no training (``numerics: none``): what ``validate`` builds."""
        return replace(self, scenario=self.scenario.model_copy(update={"numerics": "none"}))
