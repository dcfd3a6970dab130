"""`iotfl-sim profiles measure --server`: how fast this machine does a server's non-training work.

The server is usually the researcher's own host or a known cloud instance, so its rates are measured where it
runs, with this project's own code (what a run on that machine would execute), not assumed:

- ``server_work.aggregate_gbs`` and ``aggregate_tensor_us``: ``fl.aggregate.aggregate_nested`` averaging
  ``CLIENTS`` client states, as bytes moved per second (every received value read once and every global value
  written once: ``4 x (clients + 1) x values`` bytes per call) and a fixed cost per received tensor;
- ``server_work.qsgd_encode_*``: ``fl.quantize.quantize_state`` at 8 bits (stochastic rounding and the exact
  encoded length), values per second and a fixed cost per tensor;
- ``server_work.qsgd_decode_*``: turning the levels and norms back into float32 tensors
  (``fl.quantize.dequantize_levels``), likewise.

Each pair comes from two states: ``TINY`` tensors of ``TINY_VALUES`` values (all per-tensor cost) and a
small CNN's worth of about ``VALUES`` values in a few tensors (the per-value rate, once the per-tensor cost
is taken out). Each is warmed up and repeated for its share of the time budget; the fastest repeat is kept, as in
``fl.cost.measure``. Training and inference on the server are priced from the ``compute`` section, which
``fl.cost.measure`` measures the same way as for a device.
"""

from __future__ import annotations

import torch

from iotfl_sim.fl.aggregate import Contribution, aggregate_nested
from iotfl_sim.fl.cost.measure import _repeat
from iotfl_sim.fl.quantize import dequantize_levels, quantize_levels, quantize_state

CLIENTS = 10
VALUES = 1 << 20  # about a million values: a small CNN, past every cache
BITS = 8
BUCKET = None  # one norm per tensor: FedX's QSGD, the paper's
# A state shaped like a small CNN's: a few large tensors and some small ones (biases, norms), 1,048,576 values.
SHAPES = ((512, 1024), (256, 1024), (64, 64, 3, 3), (32, 32, 3, 3), (1024,), (512,), (256,), (64,), (10, 512))
TINY = 200  # tensors of TINY_VALUES values each: a state whose cost is all per-tensor overhead
TINY_VALUES = 16


def _state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    state = {f"t{i}": torch.randn(s, generator=g) for i, s in enumerate(SHAPES)}
    rest = VALUES - sum(t.numel() for t in state.values())
    if rest > 0:
        state["rest"] = torch.randn(rest, generator=g)
    return state


def _tiny_state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {f"t{i}": torch.randn(TINY_VALUES, generator=g) for i in range(TINY)}


def _split(t_tiny: float, units_tiny: int, t_big: float, units_big: int, amount_big: float) -> tuple[float, float]:
    """(seconds per unit, amount per second) from a call of pure per-unit overhead and a call dominated by amount."""
    per_unit = t_tiny / units_tiny
    return per_unit, amount_big / max(t_big - per_unit * units_big, 1e-3 * t_big)


def aggregate_rates(seconds: float) -> tuple[float, float, str]:
    """(seconds per received tensor, bytes per second, description) of ``aggregate_nested``."""
    timings = []
    for make in (_tiny_state, _state):
        glob = make(0)
        clients = [Contribution(make(1 + i), weight=1.0) for i in range(CLIENTS)]
        values = sum(t.numel() for t in glob.values())
        best = min(_repeat(lambda g=glob, c=clients: aggregate_nested(g, c), seconds / 2))
        timings.append((best, len(glob) * CLIENTS, 4.0 * (CLIENTS + 1) * values))
    (t0, n0, _), (t1, n1, moved) = timings
    per_tensor, rate = _split(t0, n0, t1, n1, moved)
    return per_tensor, rate, (
        f"fl.aggregate.aggregate_nested of {CLIENTS} client states: {TINY} tensors of {TINY_VALUES} values in "
        f"{t0 * 1e3:.2f} ms (the per-tensor cost), {len(SHAPES) + 1} tensors of {VALUES:,} values in all in "
        f"{t1 * 1e3:.1f} ms (4 x {CLIENTS + 1} x values bytes moved), fastest of the repeats"
    )


def _encode(state: dict[str, torch.Tensor], gen: torch.Generator) -> None:
    quantize_state(state, BITS, gen, BUCKET)


def _decoder(state: dict[str, torch.Tensor], gen: torch.Generator):  # noqa: ANN202
    levels = {k: quantize_levels(t, BITS, gen, BUCKET) for k, t in state.items()}

    def decode() -> None:
        for k, (norms, signed, _) in levels.items():
            dequantize_levels(norms, signed, BITS, tuple(state[k].shape), BUCKET)

    return decode


def qsgd_rates(seconds: float) -> tuple[tuple[float, float], tuple[float, float], str]:
    """((encode s per tensor, values/s), (decode s per tensor, values/s), description)."""
    out, notes = [], []
    for name, bench in (("encode", lambda st, g: (lambda: _encode(st, g))), ("decode", _decoder)):
        timings = []
        for make in (_tiny_state, _state):
            st = make(0)
            gen = torch.Generator().manual_seed(0)
            best = min(_repeat(bench(st, gen), seconds / 4))
            timings.append((best, len(st), sum(t.numel() for t in st.values())))
        (t0, n0, _), (t1, n1, values) = timings
        out.append(_split(t0, n0, t1, n1, values))
        notes.append(f"{name} {t0 * 1e3:.2f} ms for {TINY} tiny tensors, {t1 * 1e3:.1f} ms for {values:,} values")
    return out[0], out[1], (
        f"fl.quantize.quantize_state at {BITS} bits, one norm per tensor (quantize + exact encoded length) and "
        "dequantize_levels: "
        + "; ".join(notes) + ", fastest of the repeats"
    )


def server_work_rates(seconds: float) -> tuple[dict[str, float], list[str]]:
    """The ``server_work`` section of a profile and the notes saying how each number was taken."""
    agg_t, agg, what_a = aggregate_rates(seconds / 2)
    (enc_t, enc), (dec_t, dec), what_q = qsgd_rates(seconds / 2)
    rates = {
        "aggregate_gbs": float(f"{agg / 1e9:.4g}"),
        "aggregate_tensor_us": float(f"{agg_t * 1e6:.4g}"),
        "qsgd_encode_values_per_s": float(f"{enc:.4g}"),
        "qsgd_encode_tensor_us": float(f"{enc_t * 1e6:.4g}"),
        "qsgd_decode_values_per_s": float(f"{dec:.4g}"),
        "qsgd_decode_tensor_us": float(f"{dec_t * 1e6:.4g}"),
    }
    return rates, [f"server_work.aggregate_*: {what_a}", f"server_work.qsgd_*: {what_q}"]
