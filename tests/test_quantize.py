"""QSGD (fl.quantize): unbiasedness, variance, the Elias-omega / zero-run encoding and its exact length."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from iotfl_sim.fl.quantize import (
    decode_bucket,
    encode_bucket,
    encoded_bits,
    levels_of,
    omega_encode,
    omega_length,
    qsgd,
    quantize_levels,
    quantize_state,
)


def _draws(v: torch.Tensor, bits: int, n: int, bucket: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return torch.stack([qsgd(v, bits, g, bucket) for _ in range(n)])


def test_q_bits_means_2_to_the_q_intervals():
    assert levels_of(1) == 2 and levels_of(8) == 256
    with pytest.raises(ValueError):
        levels_of(0)


def test_qsgd_is_unbiased():
    v = torch.linspace(-1.0, 2.0, 48)
    s, n = levels_of(2), 4000
    q = _draws(v, 2, n, bucket=48)
    # each coordinate is a two-point draw spaced ||v|| / s apart: std <= ||v|| / (2 s)
    tol = 5 * (v.norm() / s / 2) / np.sqrt(n)
    assert (q.mean(0) - v).abs().max() < tol


def test_qsgd_variance_matches_stochastic_rounding_and_its_bound():
    v = torch.randn(64, generator=torch.Generator().manual_seed(1))
    bits, d = 3, 64
    s = levels_of(bits)
    q = _draws(v, bits, 3000, bucket=d)
    err = ((q - v) ** 2).sum(1).mean()
    frac = (s * v.abs() / v.norm()) % 1.0
    exact = (v.norm() / s) ** 2 * (frac * (1 - frac)).sum()  # sum of Bernoulli variances, by hand
    assert err == pytest.approx(float(exact), rel=0.06)
    bound = min(d / s**2, np.sqrt(d) / s) * float(v.norm()) ** 2  # QSGD Lemma 3.1
    assert float(err) <= bound


def test_signs_and_norm_are_kept_apart_and_a_lone_value_is_exact():
    g = torch.Generator().manual_seed(0)
    norms, signed, _ = quantize_levels(torch.tensor([0.0, 0.6, -0.8]), 1, g, bucket=3)  # s = 2: 1.2 and 1.6
    assert norms.tolist() == pytest.approx([1.0])
    assert signed[0] == 0 and signed[1] in (1, 2) and signed[2] in (-1, -2)
    one = torch.tensor([0.0, -3.0, 0.0])  # |x| / ||x|| = 1: level s exactly, sign kept
    assert torch.equal(qsgd(one, 4, g, bucket=3), one)


def test_omega_codes_match_the_published_table():
    table = {1: "0", 2: "100", 3: "110", 4: "101000", 5: "101010", 7: "101110", 8: "1110000", 16: "10100100000"}
    for n, code in table.items():
        assert omega_encode(n) == code
    ns = np.array([1, 2, 3, 15, 16, 17, 1000, 65535, 65536, 2**31])
    assert omega_length(ns).tolist() == [len(omega_encode(int(n))) for n in ns]


def test_encoded_length_of_a_hand_encoded_bucket():
    levels = np.array([0, 0, 3, -1, 0, 0, 0, 0])
    # norm 32 | run 2 -> omega(3) "110", sign "0", omega(3) "110" | run 0 -> omega(1) "0", sign "1", omega(1) "0"
    # | trailing run 4 -> omega(5) "101010"
    expected = "00111111100000000000000000000000" + "110" + "0" + "110" + "0" + "1" + "0" + "101010"
    assert encode_bucket(1.0, levels) == expected
    assert encoded_bits(levels, bucket=8) == len(expected) == 48
    # two buckets of 4: [0 0 3 -1] -> 32 + 3+1+3 + 1+1+1 ; [0 0 0 0] -> 32 + omega(5) 6
    assert encoded_bits(levels, bucket=4) == 32 + 7 + 3 + 32 + 6


@pytest.mark.parametrize("bits,bucket", [(1, 7), (3, 64), (8, 512)])
def test_encode_decode_round_trip_and_fast_length(bits, bucket):
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(1000, generator=g) * (torch.rand(1000, generator=g) < 0.4)
    norms, signed, _ = quantize_levels(x, bits, g, bucket)
    v = signed.numpy()
    total = 0
    for b in range(len(norms)):
        chunk = v[b * bucket : (b + 1) * bucket]
        code = encode_bucket(float(norms[b]), chunk)
        total += len(code)
        norm, back = decode_bucket(code, len(chunk))
        assert np.array_equal(back, chunk)
        assert np.float32(norm) == norms[b].numpy()
    assert encoded_bits(signed, bucket) == total


def test_quantize_state_bytes_and_passthrough_at_32_bits():
    g = torch.Generator().manual_seed(0)
    state = {"w": torch.randn(300, generator=g), "b": torch.zeros(5)}
    raw, nbytes = quantize_state(state, 32, g)
    assert nbytes == 305 * 4 and torch.equal(raw["w"], state["w"])
    q, nbytes = quantize_state(state, 4, torch.Generator().manual_seed(3), bucket=100)
    g2 = torch.Generator().manual_seed(3)
    bits = sum(encoded_bits(quantize_levels(t, 4, g2, 100)[1], 100) for t in state.values())
    assert nbytes == -(-bits // 8)
    assert torch.equal(q["b"], state["b"])  # an all-zero bucket stays zero: norm 0, one run token


# ---------------------------------------------------------------------------------------------- per tensor


def test_per_tensor_sends_one_norm_the_l2_norm_of_the_whole_tensor():
    x = torch.full((40, 40), 0.25)  # 1600 values, more than a 512 bucket: ||x|| = 0.25 x 40 = 10 by hand
    x[0, 0] = -0.25
    norms, signed, _ = quantize_levels(x, 3, torch.Generator().manual_seed(0), bucket=None)
    assert norms.tolist() == [10.0]
    # s |x| / ||x|| = 8 x 0.25 / 10 = 0.2 for every value: level 0 or 1, with the value's sign
    assert set(signed.tolist()) <= {0, 1, -1} and signed[0] in (0, -1) and signed.numel() == 1600
    assert quantize_levels(x, 3, torch.Generator().manual_seed(0), bucket=512)[0].numel() == 4  # ceil(1600 / 512)


def test_per_tensor_values_land_on_the_s_plus_1_levels_with_their_signs():
    v = torch.randn(3, 50, generator=torch.Generator().manual_seed(2))
    bits = 3
    s, norm = levels_of(bits), float(v.norm())
    q = qsgd(v, bits, torch.Generator().manual_seed(5), bucket=None)
    k = q / (norm / s)  # must be integers k in {-s, ..., s}
    assert torch.allclose(k, k.round(), atol=1e-4)
    k = k.round()
    assert k.abs().max() <= s
    assert torch.all((k == 0) | (torch.sign(k) == torch.sign(v)))  # a non-zero level keeps its value's sign
    # stochastic rounding: |k| is floor or ceil of s |v| / ||v||
    exact = s * v.abs() / norm
    assert torch.all((k.abs() >= exact.floor() - 1e-4) & (k.abs() <= exact.ceil() + 1e-4))


def test_per_tensor_qsgd_is_unbiased_within_a_hoeffding_bound():
    v = torch.randn(20, generator=torch.Generator().manual_seed(3))
    bits, n = 2, 4000
    s = levels_of(bits)
    g = torch.Generator().manual_seed(11)
    mean = torch.stack([qsgd(v, bits, g, bucket=None) for _ in range(n)]).double().mean(0)
    # each draw of coordinate i lies in an interval of length ||v|| / s: Hoeffding gives
    # P(|mean - v_i| >= t) <= 2 exp(-2 n t^2 s^2 / ||v||^2); a union bound over the d = 20 values at total
    # failure probability 1e-6 gives t = (||v|| / s) sqrt(ln(2 d / 1e-6) / (2 n))
    t = float(v.norm()) / s * np.sqrt(np.log(2 * 20 / 1e-6) / (2 * n))
    assert float((mean - v.double()).abs().max()) < t
    # and it is not trivially met: one draw alone is off by more than t somewhere
    assert float((qsgd(v, bits, g, bucket=None) - v).abs().max()) > t


def test_per_tensor_wire_bytes_of_seven_values_at_3_bits_counted_by_hand():
    # ||x|| = sqrt(36 + 16 + 4 + 4 + 4) = 8 and s = 2^3 = 8: s |x_i| / ||x|| = |x_i| are whole levels, no draw
    x = torch.tensor([6.0, 0.0, -4.0, 2.0, 0.0, -2.0, 2.0])
    norms, signed, _ = quantize_levels(x, 3, torch.Generator().manual_seed(0), bucket=None)
    assert norms.tolist() == [8.0] and signed.tolist() == [6, 0, -4, 2, 0, -2, 2]
    expected = (
        "01000001000000000000000000000000"  # the norm 8.0 as IEEE float32 (0x41000000)
        + "0" + "0" + "101100"  # run 0 -> omega(1), sign +, omega(6)
        + "100" + "1" + "101000"  # run 1 -> omega(2), sign -, omega(4)
        + "0" + "0" + "100"  # run 0, +, omega(2)
        + "100" + "1" + "100"  # run 1, -, omega(2)
        + "0" + "0" + "100"  # run 0, +, omega(2); no trailing zeros, no padding
    )  # fmt: skip
    assert len(expected) == 67 and encode_bucket(8.0, signed.numpy()) == expected
    assert encoded_bits(signed, bucket=None) == 67
    q, nbytes = quantize_state({"w": x}, 3, torch.Generator().manual_seed(0), bucket=None)
    assert nbytes == 9 and torch.equal(q["w"], x)  # ceil(67 / 8); the levels were exact
    # two tensors: their bits add up before the rounding to bytes (67 + 67 = 134 bits -> 17 bytes, not 18)
    assert quantize_state({"a": x, "b": x}, 3, torch.Generator().manual_seed(0), bucket=None)[1] == 17


def test_per_tensor_8_bit_error_energy_is_an_order_of_magnitude_above_bucketed():
    # the point: with 512-value buckets 8 bits lose almost nothing, per tensor they do not
    from iotfl_sim.fl.models.fedx import build_fedx_model, level_specs

    torch.manual_seed(0)
    model = build_fedx_model("harwild", level_specs("harwild")["small"], num_classes=6, in_channels=9, image_size=(1, 128))
    state = {k: v for k, v in model.state_dict().items() if torch.is_floating_point(v)}
    energy = sum(float((v.double() ** 2).sum()) for v in state.values())

    def error(bucket):
        q, nbytes = quantize_state(state, 8, torch.Generator().manual_seed(1), bucket)
        return sum(float(((q[k] - state[k]).double() ** 2).sum()) for k in state) / energy, nbytes

    per_tensor, tensor_bytes = error(None)
    bucketed, bucket_bytes = error(512)
    assert per_tensor >= 10 * bucketed
    assert per_tensor > 0.01 and bucketed < 0.001  # a trade-off left to study vs almost lossless
    assert tensor_bytes < bucket_bytes  # fewer norms and more zero levels
