"""benchmarks/energy_in_published.py: the fade a published cycle-life point implies reproduces that point through
``walk``, Peukert's share follows the closed form, the bundled PVGIS week integrates to its hand-summed irradiation,
and the committed record is what the script writes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import energy_in_published as bench  # noqa: E402


@pytest.mark.parametrize(("retained", "cycles"), [(0.8, 500), (0.8, 300), (0.6, 250)])
def test_implied_fade_reproduces_the_published_point(retained, cycles):
    fade = bench.implied_fade(retained, cycles)
    got = bench.capacity_after(fade, cycles)
    assert got == pytest.approx(retained, rel=0.01)
    # the linear reading of the same point (the docs' 0.0004 for 80 % after 500) leaves more: full cycles compound
    assert bench.capacity_after((1 - retained) / cycles, cycles) > retained + 0.01


@pytest.mark.parametrize("k", [1.02, 1.1])
def test_peukert_share_is_the_closed_form(k):
    for c in (0.1, 0.2, 1.0, 2.0):
        assert bench.delivered_share(c, k) == pytest.approx(max(1.0, c / 0.2) ** -(k - 1.0), rel=1e-9)


def test_bundled_week_integrates_to_its_irradiation():
    s = bench.solar_rows()
    assert s["ghi"] == pytest.approx(bench.PVGIS_WEEK, abs=5e-4)
    assert s["walk"] == pytest.approx(s["panel"], rel=1e-9)


def test_record_is_current():
    assert bench.OUT_MD.read_text() == bench.render(), f"rerun: {bench.COMMAND}"
