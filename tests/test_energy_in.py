"""Energy in and the battery it fills (fleet/harvest.py, fleet/irradiance.py): hand-derived states of charge with
efficiencies, Peukert's effect and fade, harvested energy over hand-made irradiance traces in each format, the
integrator against a segment-by-segment one, and the bundled sample trace on a real fleet."""

from __future__ import annotations

import copy
import functools
import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY, base_scenario

from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.harvest import Cell, Harvest, depletion_time, walk
from iotfl_sim.fleet.irradiance import IrradianceError, read_irradiance, solar_harvest
from iotfl_sim.fleet.periodic import Periodic
from iotfl_sim.scenario.loader import load_scenario, resolve_groups

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "scenarios" / "traces" / "solar_turin_june_pvgis.csv"


# ---------------------------------------------------------------- the cell, by hand


def test_efficiencies_and_fade_by_hand():
    # 10 W in during [0, 10) of a 20 s period, the device draws 2 W, 80 % charging and 50 % discharging efficiency
    h = Harvest.window(10.0, 0.0, 10.0, 20.0)
    cell = Cell(charge_efficiency=0.8, discharge_efficiency=0.5)
    # from 50 J: the window stores 0.8 x (10 - 2) x 10 = 64 J (capped at 100), then 2 W / 0.5 = 4 J/s for 10 s
    step = walk(50.0, 100.0, 0.0, 20.0, 2.0, h, cell)
    assert step.level == pytest.approx(60.0) and step.dead_at is None and step.drawn_j == pytest.approx(40.0)
    # from 30 J: 30 + 64 = 94 (not capped), then 94 - 40 = 54
    assert walk(30.0, 100.0, 0.0, 20.0, 2.0, h, cell).level == pytest.approx(54.0)
    # with nothing coming in, 20 J at 4 J/s: empty after 5 s, having drawn the 20 J
    empty = walk(20.0, 100.0, 10.0, 40.0, 2.0, None, cell)
    assert (
        empty.dead_at == pytest.approx(15.0) and empty.level == 0.0 and empty.drawn_j == pytest.approx(20.0)
    )


def test_peukert_above_the_rated_power_only():
    cell = Cell(peukert=1.2, rated_w=1.0)
    # 4 W is 4x the rated power: the cell drains 4 x 4 ** 0.2 W = 5.278 W, so 100 J last 100 / 5.278 s
    assert depletion_time(100.0, 100.0, 0.0, 4.0, None, cell) == pytest.approx(100.0 / (4.0 * 4.0**0.2))
    # below the rated power no bonus: 0.5 W empties 100 J in 200 s
    assert depletion_time(100.0, 100.0, 0.0, 0.5, None, cell) == pytest.approx(200.0)
    # the rate effect is on what the battery supplies: 5 W drawn with 3 W coming in is a 2 W deficit
    h = Harvest.window(3.0, 0.0, 100.0, 100.0)  # always on
    assert depletion_time(100.0, 100.0, 0.0, 5.0, h, cell) == pytest.approx(100.0 / (2.0 * 2.0**0.2))


def test_fade_shrinks_the_capacity_per_equivalent_full_cycle():
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": 100.0, "fade_per_cycle": 0.1, "discharge_efficiency": 0.5}
    profile["power"]["idle_w"] = 0.0
    group = {
        "name": "d",
        "count": 1,
        "profile": profile,
        "harvest": {"power_w": 10.0, "start_hour": 0, "hours": 12, "day_s": 20.0},
    }
    sc = load_scenario(text=yaml.safe_dump(base_scenario(fleet={"groups": [group]}, numerics="none")))
    fleet = Fleet.build(resolve_groups(sc), 0)
    # the window is [0, 10) of each 20 s day: 1 W for 10 s at 50 % drains 20 J of stored energy, 0.2 cycles,
    # so the capacity fades 0.1 x 0.2 = 2 %: 98 J, and the level (100 - 20 = 80) is below it
    assert fleet.spend(0, 10.0, 10.0, 1.0, "compute") is None
    assert fleet.capacity_j[0] == pytest.approx(98.0) and fleet.level[0] == pytest.approx(80.0)
    # the next window (20-30 s) refills it to the faded capacity, not the nominal one
    fleet.settle(0, 30.0)
    assert fleet.level[0] == pytest.approx(98.0)
    assert fleet.battery_left(0) == pytest.approx(98.0)


def test_mains_powered_profiles_have_no_chemistry():
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"charge_efficiency": 0.9}
    data = base_scenario(fleet={"groups": [{"name": "d", "count": 1, "profile": profile}]}, numerics="none")
    with pytest.raises(Exception, match="mains-powered device .* has no battery chemistry"):
        load_scenario(text=yaml.safe_dump(data))


# ---------------------------------------------------------------- the integrator against a simple one


def _segment_by_segment(level, cap, t0, t1, draw, h, cell):
    """The level one segment at a time (the integrator's closed forms over whole periods not used)."""
    t, drawn = t0, 0.0
    while t < t1:
        p0 = t - (t - h.origin_s) % h.period_s
        bounds = (
            [p0 + o for o in h.offsets_s] + [p0 + h.period_s + o for o in h.offsets_s] + [p0 + 2 * h.period_s]
        )
        end = min(t1, min(b for b in bounds if b > t + 1e-9))
        k = int(np.searchsorted(h.offsets_s, (end - 1e-7 - h.origin_s) % h.period_s, side="right")) - 1
        net = h.values[k] - draw
        if net >= 0:
            rate = cell.charge_efficiency * net
        else:
            rate = net / cell.discharge_efficiency * max(1.0, (-net / cell.rated_w) ** (cell.peukert - 1.0))
        if rate < 0 and level + rate * (end - t) <= 0:
            return 0.0, t + level / -rate, drawn + level
        drawn += max(0.0, -rate * (end - t))
        level, t = min(cap, level + rate * (end - t)), end
    return level, None, drawn


def test_walk_matches_a_segment_by_segment_integration():
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 5)
        offsets = np.array([0.0] + sorted(float(o) for o in rng.sample(range(1, 100), n - 1)))
        power = np.array([rng.choice([0.0, rng.uniform(0, 5)]) for _ in range(n)])
        h = Harvest(offsets, power, 100.0, rng.uniform(0, 100))
        cell = Cell(
            rng.choice([1, 0.9]), rng.choice([1, 0.8]), rng.choice([1, 1.2]), rng.choice([math.inf, 1.0])
        )
        cap = rng.uniform(10, 500)
        level, draw, t0 = rng.uniform(0.1, cap), rng.uniform(0, 4), rng.uniform(0, 300)
        t1 = t0 + rng.choice([rng.uniform(0, 50), rng.uniform(0, 5000)])
        got = walk(level, cap, t0, t1, draw, h, cell)
        want = _segment_by_segment(level, cap, t0, t1, draw, h, cell)
        assert got.level == pytest.approx(want[0], rel=1e-9, abs=1e-7)
        assert (got.dead_at is None) == (want[1] is None)
        if got.dead_at is not None:
            assert got.dead_at == pytest.approx(want[1], rel=1e-9)
        assert got.drawn_j == pytest.approx(want[2], rel=1e-9, abs=1e-7)
        far = _segment_by_segment(level, cap, t0, t0 + 2e4, draw, h, cell)[1]
        dies = depletion_time(level, cap, t0, draw, h, cell)
        assert dies == pytest.approx(far, rel=1e-9) if far is not None else dies > t0 + 2e4


# ---------------------------------------------------------------- irradiance traces


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_harvested_energy_over_a_hand_made_trace(tmp_path):
    # hourly: 0, 500, 1000, 0 W/m2; a 0.01 m2 panel at 20 %: 0, 1, 2, 0 W; the trace repeats every 4 hours
    trace = read_irradiance(_write(tmp_path / "t.csv", "time_s,w_m2\n0,0\n3600,500\n7200,1000\n10800,0\n"))
    assert trace.period_s == 14400.0
    h = solar_harvest(trace, area_m2=0.01, efficiency=0.2)
    assert h.integral(0.0, 14400.0) == pytest.approx(3600.0 + 7200.0)
    assert h.integral(5400.0, 9000.0) == pytest.approx(1800.0 * 1.0 + 1800.0 * 2.0)
    assert h.integral(0.0, 3 * 14400.0 + 3600.0 + 900.0) == pytest.approx(3 * 10800.0 + 900.0)
    # time 0 an hour into the trace: the first hour brings 1 W x 3600 s
    assert solar_harvest(trace, 0.01, 0.2, start_s=3600.0).integral(0.0, 3600.0) == pytest.approx(3600.0)
    # a device drawing 0.5 W from 1000 J: the first 4 hours bring 10800 J and cost 7200; capped at 2000 J
    step = walk(1000.0, 2000.0, 0.0, 14400.0, 0.5, h, Cell())
    # 0-1 h: -1800 -> dead? no: 1000 - 1800 < 0, it empties at 2000 s
    assert step.dead_at == pytest.approx(2000.0)
    step = walk(2000.0, 2000.0, 0.0, 14400.0, 0.5, h, Cell())
    # 0-1 h: 200 J; 1-2 h: +1800 -> 2000; 2-3 h: +5400, capped at 2000; 3-4 h: -1800 -> 200
    assert step.dead_at is None and step.level == pytest.approx(200.0)


PVGIS = """Latitude (decimal degrees):\t45.000
Longitude (decimal degrees):\t8.000
Radiation database:\tPVGIS-SARAH

time,Gb(i),Gd(i),Gr(i),H_sun,T2m,WS10m,Int
20160101:0010,0.0,0.0,0.0,0.0,3.44,1.43,0.0
20160101:0110,100.0,50.0,10.0,8.06,3.87,1.22,1.0
20160101:0210,-0.0,0.0,0.0,0.0,2.43,1.51,0.0

Gb(i): Beam (direct) irradiance on the inclined plane (plane of the array) (W/m2)
"""
NSRDB = """Source,Location ID,City,State,Country,Latitude,Longitude,Time Zone
NSRDB,145809,-,-,-,32.21,-110.94,-7
Year,Month,Day,Hour,Minute,GHI,DNI,DHI,Temperature
2019,6,1,11,0,800,900,100,30
2019,6,1,11,30,850,910,105,31
2019,6,1,12,0,900,920,110,32
"""
PVLIB = """,ghi,dni,dhi,poa_global
2019-06-01 11:00:00-07:00,800,900,100,700
2019-06-01 11:15:00-07:00,820,900,100,720
2019-06-01 11:30:00-07:00,840,900,100,740
"""


def test_each_format_read_by_hand(tmp_path):
    pv = read_irradiance(_write(tmp_path / "pvgis.csv", PVGIS))  # POA = Gb + Gd + Gr; the legend ignored
    assert pv.times_s.tolist() == [0.0, 3600.0, 7200.0] and pv.values.tolist() == [0.0, 160.0, 0.0]
    assert pv.period_s == 3 * 3600.0
    ns = read_irradiance(_write(tmp_path / "nsrdb.csv", NSRDB))
    assert ns.times_s.tolist() == [0.0, 1800.0, 3600.0] and ns.values.tolist() == [800.0, 850.0, 900.0]
    assert read_irradiance(tmp_path / "nsrdb.csv", "nsrdb", column="DNI").values.tolist() == [
        900.0,
        910.0,
        920.0,
    ]
    pl = read_irradiance(_write(tmp_path / "pvlib.csv", PVLIB))  # poa_global when present
    assert pl.times_s.tolist() == [0.0, 900.0, 1800.0] and pl.values.tolist() == [700.0, 720.0, 740.0]
    assert read_irradiance(tmp_path / "pvlib.csv", "pvlib", column="ghi").values[0] == 800.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("time_s,w_m2\n0,1\n", "1 data row(s)"),
        ("time_s,w_m2\n0,1\n10,2\n5,3\n", "(data row 3): time does not increase"),
        (
            "time_s,w_m2\n0,1\n10,2\n20,3\n50,3\n",
            "(data row 4): a gap of 30 s before this row (the usual step is 10 s)",
        ),
        ("time_s,w_m2\n0,1\n10,-50\n", "irradiance -50 W/m2 is outside [-20, 2000]"),
        ("time_s,w_m2\n0,1\n10,5000\n", "irradiance 5000 W/m2"),
        ("time_s,w_m2\n0,1\n10,sunny\n", ":3: w_m2 'sunny' is not a number"),
        ("time_s,w_m2\n0,1\n10,nan\n", ":3: w_m2 is nan"),
        ("time_s,watts\n0,1\n10,2\n", "has no column 'w_m2'"),
        ("time,G(h)\n2016010:0010,1\n", "is not YYYYMMDD:HHMM"),
    ],
)
def test_bad_traces_one_line_each(tmp_path, text, expected):
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(IrradianceError) as e:
        read_irradiance(path, "csv" if text.startswith("time_s") else "auto")
    assert expected in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_small_negative_readings_count_as_zero(tmp_path):
    trace = read_irradiance(_write(tmp_path / "t.csv", "time_s,w_m2\n0,-3\n60,400\n"))
    assert trace.values.tolist() == [0.0, 400.0]


# ---------------------------------------------------------------- the bundled sample on a fleet


def test_bundled_sample_keeps_a_solar_sensor_alive(tmp_path):
    sample = read_irradiance(SAMPLE)
    assert sample.period_s == 7 * 86400.0  # a June week of hourly PVGIS TMY values
    # its mean daily irradiation by hand from the file: the G(h) column summed over the week, x 1 h, / 7
    rows = [r.split(",") for r in SAMPLE.read_text().splitlines()[1:]]
    assert sample.values.sum() == pytest.approx(sum(max(0.0, float(r[3])) for r in rows))
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": 20000.0, "charge_efficiency": 0.9, "discharge_efficiency": 0.95}
    profile["power"]["idle_w"] = 0.3  # 26 kJ a day: 20 kJ last 18.5 hours
    solar = {"kind": "solar", "area_m2": 0.01, "efficiency": 0.18, "trace": str(SAMPLE)}
    data = base_scenario(fleet={"groups": [{"name": "d", "count": 1, "profile": profile}]}, numerics="none")
    dark = Fleet.build(resolve_groups(load_scenario(text=yaml.safe_dump(data))), 0)
    assert dark.depleted_at[0] == pytest.approx(20000.0 * 0.95 / 0.3)
    data["fleet"]["groups"][0]["harvest"] = solar
    lit = Fleet.build(resolve_groups(load_scenario(text=yaml.safe_dump(data))), 0)
    # about 0.01 x 0.18 x 7.4 kWh/m2 = 48 kJ a day in: the sensor outlives the dark one (alive past a week)
    assert lit.depleted_at[0] > 7 * 86400.0


def _mixed_fleet() -> Fleet:
    """A charger group (an LTE-like tail is charged as lumps), a solar group that runs dry at night, a plain cell
    and mains devices, with a carbon trace: every kind of battery the fleet tracks, and deaths."""
    grid = Periodic(np.arange(24) * 3600.0, 200.0 + 20.0 * np.arange(24), 86400.0)
    return Fleet.build(_mixed_groups(), 0, carbon=grid)


@functools.cache
def _mixed_groups() -> list:
    """``_mixed_fleet``'s groups, read once (the scenario's validation costs five times the fleet's build)."""
    small = copy.deepcopy(TINY)
    small["power"]["idle_w"] = 0.4  # a full battery lasts 3 hours at idle: deaths between tasks
    small["battery"] = {"capacity_j": 5000.0, "charge_efficiency": 0.9, "discharge_efficiency": 0.95,
                        "peukert": 1.05, "rated_hours": 1.0, "fade_per_cycle": 0.002}  # fmt: skip
    big = copy.deepcopy(small)
    big["battery"]["capacity_j"] = 20000.0  # lasts the night: the panel refills it
    mains = copy.deepcopy(TINY)
    mains["battery"] = {"capacity_j": None}
    groups = [
        {"name": "plugged", "count": 6, "profile": small,
         "harvest": {"kind": "charger", "power_w": 3.0, "start_hour": 1, "hours": 10, "start_sd_hours": 1.5,
                     "variants": 3, "days": 2}},
        {"name": "panel", "count": 6, "profile": big,
         "harvest": {"kind": "solar", "area_m2": 0.03, "efficiency": 0.18, "trace": str(SAMPLE)}},
        {"name": "cell", "count": 4, "profile": small},
        {"name": "wall", "count": 2, "profile": mains},
    ]  # fmt: skip
    data = base_scenario(fleet={"groups": groups}, numerics="none")
    return resolve_groups(load_scenario(text=yaml.safe_dump(data)))


def test_a_depletion_found_late_is_the_one_found_at_once():
    """A tracked battery's depletion instant is found when something needs it, not after each activity: on 200
    random sequences of tasks, tails and reads, a fleet that finds each at once gives every answer and every
    figure bit for bit as the lazy one does."""
    rng = random.Random(7)
    for _ in range(200):
        lazy, eager = _mixed_fleet(), _mixed_fleet()
        eager._defer_depletion = lambda d, t, f=eager: (f._unsolved.__setitem__(d, (t, math.inf)), f._solve_depletion(d))
        answers: list[list] = [[], []]
        t = 0.0
        for _ in range(80):
            d, t = rng.randrange(lazy.n), t + rng.choice([0.0, rng.uniform(0, 60), rng.uniform(0, 2000)])
            phases = [(rng.uniform(1, 30), rng.uniform(0.5, 3.0), "radio"), (rng.uniform(10, 300), 2.5, "compute"),
                      (rng.uniform(1, 30), 1.2, "radio")]  # fmt: skip
            tails, read = [rng.uniform(-0.2, 1.0) for _ in phases], rng.random()  # a tail < 0: one cut short
            for f, out in zip((lazy, eager), answers, strict=True):
                s = t
                out.append(f.alive(d, s))
                for (dur, w, kind), tail in zip(phases, tails, strict=True):
                    dead = f.spend(d, s, dur, w, kind)
                    out.append(dead)
                    if dead is not None:
                        break
                    s += dur
                    if kind == "radio":
                        out.append(f.charge_lump(d, s, tail, "radio"))
                if read < 0.3:
                    out.append(f.alive_count(s))
                elif read < 0.5:
                    out.append(f.energy_left(s, np.arange(f.n)).tolist())
        assert answers[0] == answers[1]
        for name in ("depleted_at", "level", "capacity_j", "settled_at", "dead"):
            assert np.array_equal(getattr(lazy, name), getattr(eager, name)), name
        assert lazy.digest() == eager.digest() and lazy.carbon_g(t) == eager.carbon_g(t)


def test_depletion_after_a_task_by_hand():
    """A cell with 80 % discharge efficiency and nothing coming in: 4,000 J stored; a 100 s task at 2 W draws
    250 J stored, so 3,750 J are left at t = 100 s, which idle draw of 0.4 W (0.5 W stored) empties 7,500 s later.
    The instant is found after the task, when asked for."""
    profile = copy.deepcopy(TINY)
    profile["power"]["idle_w"] = 0.4
    profile["battery"] = {"capacity_j": 4000.0, "discharge_efficiency": 0.8}
    data = base_scenario(fleet={"groups": [{"name": "d", "count": 1, "profile": profile}]}, numerics="none")
    f = Fleet.build(resolve_groups(load_scenario(text=yaml.safe_dump(data))), 0)
    assert f.depleted_at[0] == pytest.approx(4000.0 / 0.5)
    assert f.spend(0, 0.0, 100.0, 2.0, "compute") is None
    assert f.level[0] == pytest.approx(4000.0 - 250.0)
    assert f.alive(0, 100.0 + 7499.0) and not f.alive(0, 100.0 + 7501.0)
    assert f.depleted_at[0] == pytest.approx(100.0 + 7500.0)


def test_a_battery_left_with_a_rounding_of_charge_is_empty_at_once():
    """A battery whose charge would last less than a rounding of the clock after an activity is dead at that
    instant, as if its depletion had been found at once (white box: the lazy depletion's edge)."""
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": 4000.0, "discharge_efficiency": 0.8}
    data = base_scenario(fleet={"groups": [{"name": "d", "count": 1, "profile": profile}]}, numerics="none")
    f = Fleet.build(resolve_groups(load_scenario(text=yaml.safe_dump(data))), 0)
    f.level[0], f.settled_at[0] = 1e-300, 100.0  # what an activity ending at 100 s with that much left leaves
    f._defer_depletion(0, 100.0)
    assert not f.alive(0, 100.0)
