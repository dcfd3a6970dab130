"""Options of a Flower app run on the simulated fleet (``algorithm: {name: flower, ...}``, ``iotfl_sim.flower``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from iotfl_sim.scenario.algorithms.base import MethodConfig

RunConfigValue = StrictBool | StrictInt | StrictFloat | StrictStr


class FlowerConfig(MethodConfig):
    name: Literal["flower"]
    # the app's ServerApp drives its own rounds through the simulated fleet: server.mode sync is how it is run;
    # what the app does between messages (waiting for all replies or not) is its own
    modes: ClassVar[frozenset[str]] = frozenset({"sync"})
    why_not: ClassVar[dict[str, str]] = {
        "semi_async": "a Flower app's ServerApp decides itself which replies it waits for",
        "async": "a Flower app's ServerApp decides itself which replies it waits for",
        "hierarchical": "a Flower app's ServerApp talks to the nodes directly, with no gateway tier",
    }
    server_app: str = Field(
        min_length=3, max_length=300,
        description="the app's ServerApp by import path, package.module:attribute (searched in the scenario's "
        "folder first), as [tool.flwr.app.components] serverapp names it",
    )  # fmt: skip
    client_app: str = Field(
        min_length=3, max_length=300,
        description="the app's ClientApp by import path, as [tool.flwr.app.components] clientapp names it",
    )
    run_config: dict[StrictStr, RunConfigValue] = Field(
        default_factory=dict,
        description="overrides of the app's [tool.flwr.app.config] (pyproject.toml beside the scenario), as "
        "flwr run --run-config gives them",
    )
    metrics: list[StrictStr] = Field(
        default_factory=lambda: ["train_loss", "eval_loss", "eval_acc"], max_length=100,
        description="the metrics of the app's replies recorded in rounds.csv, one column each (train_loss fills "
        "the usual column): per round, their average over the replies weighted by num-examples, as Flower's "
        "FedAvg aggregates them",
    )
    accuracy_metric: str = Field(
        "eval_acc", min_length=1, max_length=100,
        description="the metric of the app's evaluate replies reported as acc_full (their average weighted by "
        "num-examples, as FedAvg aggregates it), so plot and compare show accuracy over time",
    )  # fmt: skip

    @model_validator(mode="after")
    def _accuracy_is_recorded(self) -> FlowerConfig:
        if self.accuracy_metric not in self.metrics:
            raise ValueError(
                f"accuracy_metric: {self.accuracy_metric!r} is not among algorithm.metrics ({', '.join(self.metrics)}); "
                "add it there, or name one of them"
            )
        return self
