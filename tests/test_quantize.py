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
