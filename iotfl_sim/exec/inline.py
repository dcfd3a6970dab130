"""Runs training jobs one after another in this process, reusing one model skeleton per submodel."""

from __future__ import annotations

import torch
from torch import nn

from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import TrainJob, TrainResult, train_local


class InlineExecutor:
    def __init__(self, x_train: torch.Tensor, y_train: torch.Tensor) -> None:
        self.x = x_train
        self.y = y_train
        self._skeletons: dict[tuple[ModelRecipe, SubmodelSpec], nn.Module] = {}

    def _skeleton(self, recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
        key = (recipe, spec)
        model = self._skeletons.get(key)
        if model is None:
            model = self._skeletons[key] = recipe.build(spec)
        return model

    def run(self, jobs: list[TrainJob]) -> list[TrainResult]:
        return [train_local(self._skeleton(j.recipe, j.spec), j, self.x, self.y, self._skeleton) for j in jobs]

    def close(self) -> None:
        self._skeletons.clear()
