"""Options of AdapterFL, its FedBase ablation and FedDF (heterogeneous prototype models)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from iotfl_sim.scenario.algorithms.base import SEMI_ASYNC_OK, _Prototypes, candidate_cuts
from iotfl_sim.scenario.limits import MAX_BATCH, MAX_INDEX, MAX_LR, MAX_SAMPLES, MAX_STEPS


class AdapterFLConfig(_Prototypes):
    """AdapterFL (Liu et al.): partition, reassembly, block-wise aggregation (``iotfl_sim.algorithms.adapterfl``)."""

    name: Literal["adapterfl"]
    modes: ClassVar[frozenset[str]] = SEMI_ASYNC_OK | {"hierarchical"}  # each block averaged at the cloud as at a gateway
    why_not: ClassVar[dict[str, str]] = {
        "async": "its models are prototypes assembled from blocks, each block averaged over the models that hold it, "
        "while FedBuff's buffered form (sim/buffered_async.py) moves a stale update onto one global model by its delta"
    }
    extractor: Literal["S", "M", "L"] = Field(
        "L", description="whose feature-extraction block the group shares (the paper prefers the large prototype)"
    )
    cuts: list[Annotated[int, Field(le=MAX_INDEX)]] | None = Field(
        None,
        description="stages in each prototype's feature-extraction block (S, M, L); null: chosen by the CKA "
        "criterion (eq. 3). Table II's sizes match cnn2 1, mobilenetv2 4, resnet18 3",
    )
    probe_samples: int = Field(256, ge=4, le=MAX_SAMPLES, description="probe batch for CKA (from the proxy set, else the train set)")
    proxy_fraction: float = Field(0.0, ge=0, lt=1, description="share of the train set held out on the server")

    @model_validator(mode="after")
    def _cuts_ok(self) -> AdapterFLConfig:
        if self.cuts is not None:
            if len(self.cuts) != 3:
                raise ValueError(f"cuts: give one cut per prototype (3), got {len(self.cuts)}")
            for fam, cut in zip(self.prototypes, self.cuts, strict=True):
                if cut not in candidate_cuts(fam):
                    raise ValueError(f"cuts: {cut} is not a cut of {fam} (candidates {candidate_cuts(fam)})")
        return self

    def held_out_fraction(self) -> float:
        return self.proxy_fraction



class FedBaseConfig(AdapterFLConfig):
    """FedBase: AdapterFL's reassembled models, each aggregated on its own (no shared block)."""

    name: Literal["fedbase"]  # type: ignore[assignment]


class FedDFConfig(_Prototypes):
    """FedDF (Lin et al., NeurIPS 2020) over the S, M, L prototypes (``iotfl_sim.algorithms.feddf``)."""

    name: Literal["feddf"]
    why_not: ClassVar[dict[str, str]] = {
        "hierarchical": "its server distils every prototype from the ensemble of the round's received client models, "
        "which the cloud never holds: a gateway sends up one averaged model per prototype",
        "semi_async": "its server distils every prototype from the unweighted ensemble of the round's received "
        "models, where a late model would teach at full weight, and a system-only run prices that distillation "
        "from the round's own outcomes, which do not hold the late updates",
        "async": "its server distils every prototype from the ensemble of a round's received models, and an "
        "asynchronous server has no rounds: a buffer's few models would make a different ensemble",
    }
    weighting: Literal["data", "count"] = Field("data", description="FedAvg weights before distillation")
    proxy_fraction: float = Field(0.01, gt=0, lt=1, description="share of the train set held out as the proxy set (1%)")
    distill_steps: int = Field(100, ge=0, le=MAX_STEPS, description="server distillation steps per prototype per round")
    distill_batch_size: int = Field(64, ge=1, le=MAX_BATCH)
    distill_lr: float = Field(1e-3, gt=0, le=MAX_LR, description="Adam learning rate (FedDF: 1e-3)")
    temperature: float = Field(1.0, gt=0, description="distillation temperature (FedDF: 1)")
    cosine: bool = Field(True, description="cosine-anneal the distillation learning rate over the steps")

    def held_out_fraction(self) -> float:
        return self.proxy_fraction
