"""benchmarks/claims.py: every study file in scenarios/claims/ validates and names every variant its group's
claims read, and the verdict rule gives the verdicts its docstring states on hand-made seed values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import claims  # noqa: E402

from iotfl_sim.study import read_study  # noqa: E402


@pytest.mark.parametrize("group", claims.GROUPS)
def test_claim_studies_validate_and_hold_every_variant(group):
    names = {}
    for scale in claims.SCALES:
        path = claims.study_file(group, scale)
        study = read_study(path, check=False)  # the schema, every point's overrides and scenario; no data read
        assert study.spec.name == f"claims_{group}_{scale}"
        seeds = study.spec.grid["seed"]
        assert seeds == list(range(len(seeds))) and len(seeds) >= 3  # seeds 0..n-1, n >= 3 (5 in restated groups)
        names[scale] = study.spec.zip_["name"]
        needed = set().union(*(claims.variants_of(c) for c in claims.CLAIMS[group]))
        assert needed <= set(names[scale]), f"{path.name}: no variant {sorted(needed - set(names[scale]))}"
    assert names["smoke"] == names["hour"] == names["paper"]  # the same variants at every scale


def _data(**variants):
    return {n: {s: {"acc_full": v} for s, v in enumerate(vals)} for n, vals in variants.items()}


def test_verdict_rule_by_hand():
    up = claims.gt("x", "", "acc_full", "a", "b")
    # means 0.91 vs 0.81, stds 0.01: 0.90 > 0.82, bands apart
    assert claims.judge(up, _data(a=[0.90, 0.91, 0.92], b=[0.80, 0.81, 0.82]))[0] == "reproduced"
    assert claims.judge(up, _data(a=[0.80, 0.81, 0.82], b=[0.90, 0.91, 0.92]))[0] == "not reproduced"
    # means 0.86 vs 0.85, stds 0.04 and 0.01: bands overlap
    assert claims.judge(up, _data(a=[0.82, 0.86, 0.90], b=[0.84, 0.85, 0.86]))[0] == "inconclusive"
    # lower is better: 0.1 < 0.3 with bands apart
    down = claims.gt("x", "", "acc_full", "a", "b", lower=True)
    assert claims.judge(down, _data(a=[0.09, 0.10, 0.11], b=[0.29, 0.30, 0.31]))[0] == "reproduced"
    one_seed = _data(a=[0.9], b=[0.1])
    assert claims.judge(up, one_seed)[0] == "inconclusive"  # no band from one seed


def test_peak_and_gain_rules_by_hand():
    peak = claims.Claim("p", "", "peak", "acc_full", ("m50",), sweep=("m0", "m50", "m100"))
    d = _data(m0=[0.60, 0.61, 0.62], m50=[0.70, 0.71, 0.72], m100=[0.64, 0.65, 0.66])
    assert claims.judge(peak, d)[0] == "reproduced"
    d = _data(m0=[0.60, 0.61, 0.62], m50=[0.64, 0.65, 0.66], m100=[0.70, 0.71, 0.72])
    assert claims.judge(peak, d)[0] == "not reproduced"
    # per-seed gains a1 - b1 = 0.20, 0.21, 0.22 against a2 - b2 = 0.02, 0.03, 0.04
    gain = claims.Claim("g", "", "gain", "acc_full", ("a1", "b1"), ("a2", "b2"))
    d = _data(a1=[0.70, 0.71, 0.72], b1=[0.50, 0.50, 0.50], a2=[0.72, 0.73, 0.74], b2=[0.70, 0.70, 0.70])
    assert claims.judge(gain, d)[0] == "reproduced"
