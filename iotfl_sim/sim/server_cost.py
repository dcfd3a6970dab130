"""What the server's work costs on the simulated clock: the server profile's per-operator model, or FLOPs.

A strategy charges typed work (``algorithms.base``: ``TrainWork``, ``InferWork``, ``AggregateWork``, ``QsgdWork``,
or plain FLOPs); the engine prices each item here:

- training and inference on the server are traced like a device's steps (``fl.cost.opcost``: roofline over every ATen
  op with the profile's FLOP/s, memory bandwidth, per-op overhead and kernel curves), so a server training step
  costs exactly what the same step costs on a device profile with the same numbers;
- aggregation moves bytes: 4 bytes per received value read and per global value written, at the profile's
  measured ``server_work.aggregate_gbs``, plus ``aggregate_tensor_us`` per received tensor;
- QSGD encodes and decodes values at the profile's measured rates of this project's own quantizer, plus a fixed
  cost per tensor;
- plain FLOPs (CKA's Gram products, a search's arithmetic) run at ``compute.flops``.

Without a profile (``server.compute`` given, the rule of scenarios written before profiles), every item is FLOPs /
``server.compute.flops``, with the FLOP counts the methods charged then: training 3 x forward FLOPs per sample,
inference 1 x forward, aggregation 1 per received value, QSGD ``fl.quantize.QSGD_FLOPS_PER_VALUE`` per value.

Each priced item falls in one of ``core.catalog.SERVER_WORK_KINDS``; ``rounds.csv`` has one ``server_<kind>_s`` column per kind beside
``server_time_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from iotfl_sim.algorithms.base import AggregateWork, InferWork, QsgdWork, TrainWork, Work, work_kind
from iotfl_sim.fl.cost import opcost
from iotfl_sim.fl.quantize import QSGD_FLOPS_PER_VALUE
from iotfl_sim.scenario.model import Hierarchy, Server
from iotfl_sim.scenario.profile import DeviceProfile, Rates

FLOAT_BYTES = 4


def _fallback_flops(work: Work) -> float:
    """The FLOP count of an item under the FLOP rule (the counts methods charged before server profiles)."""
    if isinstance(work, TrainWork):
        return work.recipe.cost(work.spec).train_flops(work.samples * work.epochs)
    if isinstance(work, InferWork):
        return work.recipe.cost(work.spec).flops_forward_per_sample * work.samples
    if isinstance(work, AggregateWork):
        return float(work.values_in)
    if isinstance(work, QsgdWork):
        return QSGD_FLOPS_PER_VALUE * float(work.values)
    return float(work)


@dataclass(frozen=True)
class Priced:
    kind: str
    seconds: float
    flops: float  # traced FLOPs (training, inference), the fallback's count otherwise


def server_warnings(server: Server) -> list[str]:
    """Why the server's work is priced less faithfully than it could be (shown by ``validate``)."""
    if server.compute is not None:
        return [
            f"server.compute: server work is priced by the old FLOP rule (FLOPs / {server.compute.flops:.3g} FLOP/s), "
            "far too fast for anything but large dense kernels; give server.profile instead (a bundled server profile, "
            "or this machine's from `iotfl-sim profiles measure --server`)"
        ]
    if isinstance(server.profile, dict):
        return [f"server.profile: {w}" for w in DeviceProfile.model_validate(server.profile).cost_model_warnings()]
    return []


class ServerCost:
    """Prices server work for one run: the profile's model when ``profile`` is given, else FLOPs / ``flops``."""

    def __init__(self, profile: DeviceProfile | None, power_mode: str | None = None, flops: float = 1e13,
                 power_w: float = 300.0) -> None:  # fmt: skip
        self.profile = profile
        if profile is None:
            self.rates = None
            self.flops, self.power_w = flops, power_w
        else:
            self.rates = profile.rates(power_mode)
            self.flops, self.power_w = self.rates.flops, self.rates.train_w

    @classmethod
    def of(cls, server: Server | Hierarchy) -> ServerCost:
        """The cost model of a resolved scenario's server, or of its gateways (``loader.resolve_server`` has inlined
        the profile)."""
        if server.compute is not None:
            return cls(None, flops=server.compute.flops, power_w=server.compute.power_w)
        if not isinstance(server.profile, dict):
            raise ValueError("the profile is not resolved: call scenario.loader.resolve_server first")
        return cls(DeviceProfile.model_validate(server.profile), server.power_mode)

    def price(self, work: Work) -> Priced:
        kind = work_kind(work)
        if self.rates is None:
            f = _fallback_flops(work)
            return Priced(kind, f / self.flops, f)
        r = self.rates
        if isinstance(work, TrainWork):
            opts = opcost.StepOptions(momentum=work.momentum, l2_pull=work.l2_pull)
            flops = opcost.train_flops(work.recipe, work.spec, work.samples, work.epochs, work.batch, opts)
            if r.mem_bw is None:
                return Priced(kind, flops / r.flops, flops)
            t = opcost.train_seconds(
                work.recipe, work.spec, work.samples, work.epochs, work.batch, r.flops, r.mem_bw, r.op_overhead_s,
                opts, r.kernels, r.steps,
            )  # fmt: skip
            return Priced(kind, t, flops)
        if isinstance(work, InferWork):
            return self._infer(work, r)
        sw = self.profile.server_work if self.profile is not None else None
        assert sw is not None  # resolve_server refuses a server profile without it
        if isinstance(work, AggregateWork):
            moved = FLOAT_BYTES * (float(work.values_in) + float(work.values_out))
            t = moved / (sw.aggregate_gbs * 1e9) + work.tensors_in * sw.aggregate_tensor_us * 1e-6
            return Priced(kind, t, float(work.values_in))
        if isinstance(work, QsgdWork):
            if work.decode:
                rate, per_tensor = sw.qsgd_decode_values_per_s, sw.qsgd_decode_tensor_us
            else:
                rate, per_tensor = sw.qsgd_encode_values_per_s, sw.qsgd_encode_tensor_us
            t = float(work.values) / rate + work.tensors * per_tensor * 1e-6
            return Priced(kind, t, QSGD_FLOPS_PER_VALUE * float(work.values))
        return Priced(kind, float(work) / r.flops, float(work))

    @staticmethod
    def _infer(work: InferWork, r: Rates) -> Priced:
        table = opcost.affine_trace(work.recipe, work.spec, opcost.StepOptions(), True)
        full, rest = divmod(int(work.samples), int(work.batch))
        flops = (full * table.at(work.batch).total_flops if full else 0.0) + (table.at(rest).total_flops if rest else 0.0)
        if r.mem_bw is None:
            return Priced("infer", flops / r.flops, flops)
        t = opcost.infer_seconds(
            work.recipe, work.spec, work.samples, work.batch, r.flops, r.mem_bw, r.op_overhead_s, r.kernels, r.steps
        )
        return Priced("infer", t, flops)
