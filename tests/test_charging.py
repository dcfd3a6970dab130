"""Chargers on daily schedules (fleet/charging.py), what devices report (fleet.reports) and a selection that prefers
devices on power: schedules derived by hand, a charging device training without draining, the charger's grid carbon
by hand, and the one-line refusals."""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY, base_scenario

from iotfl_sim.algorithms.base import select_on_power_first
from iotfl_sim.cli import main
from iotfl_sim.fleet.charging import schedule
from iotfl_sim.fleet.fleet import Fleet
from iotfl_sim.fleet.periodic import Periodic, product_integral
from iotfl_sim.scenario.loader import load_scenario, resolve_groups
from iotfl_sim.scenario.model import ChargerConfig

H = 3600.0


def _charger(**kw) -> ChargerConfig:
    return ChargerConfig(kind="charger", **kw)


def test_a_fixed_schedule_by_hand():
    # plugged in at 22 h for 4 h on each of 2 days: [22, 26) h and [46, 50) h; the second runs past the schedule's
    # 48 h and goes on at its start, so the charger is on during [0, 2), [22, 26) and [46, 48) h
    h = schedule(_charger(power_w=5.0, start_hour=22, hours=4, start_sd_hours=0, hours_sd=0, days=2), 0, 0, 0)
    assert h.period_s == 48 * H
    assert h.offsets_s.tolist() == [0, 2 * H, 22 * H, 26 * H, 46 * H]
    assert h.values.tolist() == [5.0, 0.0, 5.0, 0.0, 5.0]
    assert h.integral(0.0, 48 * H) == pytest.approx(5.0 * 8 * H)


def test_overlapping_sessions_merge_and_a_whole_day_is_always_on():
    always = schedule(_charger(power_w=2.0, hours=24, start_sd_hours=0, hours_sd=0, days=3), 0, 0, 0)
    assert always.offsets_s.tolist() == [0.0] and always.values.tolist() == [2.0]
    # 20 h from 10 h each day: [10, 30) and [34, 54) -> wraps to [0, 6); merged with nothing else
    h = schedule(
        _charger(power_w=1.0, start_hour=10, hours=20, start_sd_hours=0, hours_sd=0, days=2), 0, 0, 0
    )
    assert h.offsets_s.tolist() == [0.0, 6 * H, 10 * H, 30 * H, 34 * H]
    assert h.values.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_day_to_day_variation_and_skipped_days():
    cfg = _charger(
        power_w=1.0, start_hour=12, hours=6, start_sd_hours=2, hours_sd=1, skip_probability=0.3, days=366
    )
    h = schedule(cfg, 7, 0, 0)
    starts = h.offsets_s[h.values > 0] / H
    lengths = h.lengths_s[h.values > 0] / H
    # sessions start near noon (sd 2 h) and last about 6 h (sd 1 h); about 30 % of the days have none
    assert abs(np.mean(starts % 24) - 12) < 0.5 and abs(np.std(starts % 24) - 2) < 0.4
    assert abs(np.mean(lengths) - 6) < 0.3
    assert abs(len(starts) / 366 - 0.7) < 0.08
    # the same seed gives the same schedule; another variant another one
    assert np.array_equal(schedule(cfg, 7, 0, 0).offsets_s, h.offsets_s)
    assert not np.array_equal(schedule(cfg, 7, 0, 1).offsets_s, h.offsets_s)


def _phone(
    charger: dict, battery: float = 1000.0, idle_w: float = 0.5, carbon: Periodic | None = None, **fleet
):
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": battery}
    profile["power"]["idle_w"] = idle_w
    group = {"name": "phone", "count": 1, "profile": profile, "harvest": {"kind": "charger", **charger}}
    sc = load_scenario(
        text=yaml.safe_dump(base_scenario(fleet={"groups": [group], **fleet}, numerics="none"))
    )
    return Fleet.build(resolve_groups(sc), 0, carbon=carbon)


FIXED = {"start_sd_hours": 0, "hours_sd": 0, "days": 1, "day_s": 100.0, "variants": 1}


def test_a_charging_device_trains_without_draining():
    # plugged in during [0, 50) of a 100 s day at 10 W; training draws 4 W: the charger runs it, the battery stays full
    fleet = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED})
    assert fleet.spend(0, 10.0, 30.0, 4.0, "compute") is None
    assert fleet.level[0] == pytest.approx(1000.0)
    assert fleet.on_power(20.0).tolist() == [True] and fleet.on_power(60.0).tolist() == [False]
    # unplugged (60-90 s) it drains 4 W x 30 s; idle 0.5 W in between (40-50 s on the charger, 50-60 s not: 5 J)
    assert fleet.spend(0, 60.0, 30.0, 4.0, "compute") is None
    assert fleet.level[0] == pytest.approx(1000.0 - 5.0 - 120.0)
    assert fleet.reported_charge().tolist() == [pytest.approx(0.875)]
    # the next day's plug-in (100-150 s) refills it: 10 W - 0.5 W idle, at the ideal cell's 100 %
    fleet.settle(0, 150.0)
    assert fleet.level[0] == pytest.approx(1000.0)


def test_a_charger_that_cannot_keep_up_still_drains_the_difference():
    fleet = _phone({"power_w": 1.0, "start_hour": 0, "hours": 24, **FIXED})  # always plugged, 1 W
    assert fleet.spend(0, 0.0, 100.0, 5.0, "compute") is None  # 5 W draw, 1 W from the charger
    assert fleet.level[0] == pytest.approx(1000.0 - 4.0 * 100)


def test_the_charger_carbon_by_hand():
    # 100 g/kWh during [0, 25) s and 400 during [25, 100) s of each 100 s; the charger (10 W) is on in [0, 50) s.
    # The phone idles at 0.5 W and starts 200 J short of its 1000 J. Over [0, 100): the charger runs the idle draw
    # (0.5 W x 50 s = 25 J) and stores 9.5 W until full: 200 J in 21.05 s, then only runs the phone.
    carbon = Periodic(np.array([0.0, 25.0]), np.array([100.0, 400.0]), 100.0)
    fleet = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED}, carbon=carbon)
    fleet.level[0] = 800.0
    fleet.settle(0, 100.0)
    assert fleet.level[0] == pytest.approx(
        1000.0 - 0.5 * 50
    )  # full at 50 s, then 50 s of idle off the charger
    grid_j = 200.0 + 25.0  # stored (ideal cell) + the draw the charger covered
    mean_intensity = (25 * 100 + 25 * 400) / 50.0  # over the plugged-in time
    assert fleet.carbon_g(100.0) == pytest.approx(grid_j * mean_intensity / 3.6e6)
    # a 90 % charger efficiency: 200 J stored took 222.2 J from the grid
    lossy = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED}, carbon=carbon)
    lossy.cells[0] = type(lossy.cells[0])(charge_efficiency=0.9)
    lossy.level[0] = 800.0
    lossy.settle(0, 100.0)
    assert lossy.carbon_g(100.0) == pytest.approx((200.0 / 0.9 + 25.0) * mean_intensity / 3.6e6)


def test_product_integral_by_hand():
    a = Periodic(np.array([0.0, 3.0]), np.array([2.0, 0.0]), 10.0)  # 2 during [0, 3) of 10
    b = Periodic(np.array([0.0, 1.0]), np.array([5.0, 7.0]), 4.0)  # 5 during [0, 1) of 4, else 7
    # [0, 3): 2 x (5 x 1 + 7 x 2) = 38; [10, 13): b's phase 2..5 -> 7 x 2 (10-12) + 5 x 1 (12-13) -> 2 x 19 = 38
    assert product_integral(a, b, 0.0, 20.0) == pytest.approx(76.0)
    assert product_integral(a, b, 1.5, 2.5) == pytest.approx(2.0 * 7.0 * 1.0)


class _View:
    def __init__(self, selectable: np.ndarray, powered: np.ndarray) -> None:
        self._mask, self._powered = selectable, powered

    def selectable_mask(self) -> np.ndarray:
        return self._mask.copy()

    def on_power(self) -> np.ndarray:
        return self._powered


def test_on_power_first_fills_the_round_from_the_others():
    rng = np.random.default_rng(0)
    selectable = np.array([True, True, True, False, True, True])
    powered = np.array([True, False, True, True, False, False])  # device 3 powered but busy
    assert select_on_power_first(_View(selectable, powered), 2, rng).tolist() == [0, 2]
    three = select_on_power_first(_View(selectable, powered), 3, rng).tolist()
    # both powered devices, and one of the selectable unpowered ones (never the busy powered 3)
    assert len(three) == 3 and {0, 2} <= set(three) and len(set(three) - {0, 2} & {1, 4, 5}) == 1


def _run(tmp_path: Path, fleet_extra: dict, algorithm: dict, name: str):
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": 5000.0}
    mains = copy.deepcopy(TINY)
    mains["battery"] = {}
    groups = [
        {"name": "phone", "count": 6, "profile": profile,
         "harvest": {"kind": "charger", "power_w": 5.0, "start_hour": 12, "hours": 6, "day_s": 10.0}},
        {"name": "box", "count": 2, "profile": mains},
    ]  # fmt: skip
    data = base_scenario(rounds=2, clients_per_round=2, numerics="none", algorithm=algorithm)
    data["fleet"] = {"groups": groups, **fleet_extra}
    data["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_preferring_on_power_needs_power_reported(tmp_path, capsys):
    path = _run(tmp_path, {}, {"name": "fedavg", "prefer": "on_power"}, "p")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "fleet.reports" in err and "power" in err and err.count("\n") == 1


def test_preferring_on_power_picks_the_powered_devices(tmp_path):
    path = _run(tmp_path, {"reports": ["power"]}, {"name": "fedavg", "prefer": "on_power"}, "q")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    run = next((tmp_path / "out").iterdir())
    # at t = 0 (hour 0 of a 10 s day) no phone is plugged in (12 h +- 1 h): the two mains boxes (ids 6, 7) are chosen
    rounds = list(csv.DictReader((run / "rounds.csv").open()))
    assert rounds
    import json

    first = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    dispatched = sorted(e["device"] for e in first if e["event"] == "dispatch" and e["round"] == 0)
    assert dispatched == [6, 7]


def test_the_view_gives_only_what_devices_report():
    from iotfl_sim.core.errors import ScenarioError
    from iotfl_sim.sim.view import ServerView

    fleet = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED})
    view = ServerView(fleet, fleet.mem_free, np.zeros(1, dtype=bool), availability=None)
    with pytest.raises(ScenarioError, match=r"fleet.reports lists battery; add it"):
        view.reported_battery()
    with pytest.raises(ScenarioError, match=r"fleet.reports lists power"):
        view.on_power()
    view.reports = frozenset({"battery", "power"})
    fleet.spend(0, 60.0, 10.0, 10.0, "compute")  # unplugged: 0.5 W x 10 s idle, then 100 J
    view.now = 70.0
    assert view.reported_battery().tolist() == [pytest.approx(1.0 - 105.0 / 1000.0)]
    assert view.on_power().tolist() == [False]


def test_rows_report_the_sampled_state_of_charge_by_hand():
    fleet = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED})  # plugged in [0, 50) of each 100 s
    assert fleet.spend(0, 60.0, 30.0, 4.0, "compute") is None  # unplugged: 5 J idle (50-60 s) + 120 J: 875 J at 90 s
    obs = fleet.observer
    assert obs.columns == ["soc_mcu", "harvest_w_mcu"]
    # 95 s: 5 s more of 0.5 W idle, off the charger; read without moving the device's own state
    assert obs.row(95.0) == {"soc_mcu": pytest.approx(0.8725), "harvest_w_mcu": 0.0}
    assert fleet.settled_at[0] == 90.0
    # 120 s: idle to 100 s (870 J), then 20 s on the charger at 10 - 0.5 W: full again
    assert obs.row(120.0) == {"soc_mcu": pytest.approx(1.0), "harvest_w_mcu": 10.0}


def test_a_rows_state_of_charge_does_not_depend_on_the_rows_before():
    """The observer continues each sampled battery from where its last row left it: a row read after many others, or
    alone on a fresh observer (a resumed run's first), gives the same bits, and agrees with one walk from the device's
    last activity. Hand check: 2,000 J, 0.5 W idle from 90 s, plugged in [0, 50) of each 100 s at 10 W (9.5 W net)."""
    from iotfl_sim.fleet.observe import Observer

    fleet = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED}, battery=2000.0)
    assert fleet.spend(0, 60.0, 30.0, 50.0, "compute") is None  # 5 J idle + 1,500 J: 495 J at 90 s
    steady = fleet.observer
    times = [95.0 + 7.3 * k for k in range(60)]
    read_in_turn = [steady.row(t)["soc_mcu"] for t in times]
    for k in (0, 13, 59):
        assert Observer(fleet).row(times[k])["soc_mcu"] == read_in_turn[k]
    for k in (57, 5, 0):  # read again, out of order, after the last: the walk kept is past these instants
        assert steady.row(times[k])["soc_mcu"] == read_in_turn[k]
    alone = Observer(fleet).row(520.0)["soc_mcu"]
    assert steady.row(560.0) and steady.row(520.0)["soc_mcu"] == alone  # kept at 550 s, in 520 s's own day
    # by hand at 300 s: idle 90-100 s (-5 J), +9.5 W x 50 s each plug-in of 100-150 and 200-250 s, idle 0.5 W the
    # other 100 s: 490 + 475 + 475 - 50 = 1,390 J at 300 s
    assert steady.row(300.0)["soc_mcu"] == pytest.approx(1390.0 / 2000.0)
    assert fleet.settled_at[0] == 90.0 and fleet.level[0] == pytest.approx(495.0)  # the device itself did not move


def test_a_battery_read_a_million_days_later_walks_only_the_days_until_it_repeats(monkeypatch):
    """The observer walks whole days once the first day after the device's last activity starts, and stops when a
    day ends where the one before ended (a charger refilling the battery): a row a million days on costs a handful
    of days. By hand (the charger of the test above: 10 W over [0, 50) of each 100 s day, 0.5 W idle, 2,000 J): 490 J
    at 100 s, then +450 J a day (475 J plugged in, 25 J idle) to 940, 1,390 and 1,840 J; the day from 400 s fills it
    (1,975 J at 500 s after 25 J idle), and so does every day after. At 10^8 + 75 s: full at 10^8 + 50 s, then
    25 s of 0.5 W idle: 1,987.5 J."""
    from iotfl_sim.fleet import observe

    fleet = _phone({"power_w": 10.0, "start_hour": 0, "hours": 12, **FIXED}, battery=2000.0)
    assert fleet.spend(0, 60.0, 30.0, 50.0, "compute") is None  # 495 J at 90 s
    days = []
    real = observe.period_level
    monkeypatch.setattr(observe, "period_level", lambda level, *a: days.append(level) or real(level, *a))
    assert fleet.observer.row(1e8 + 75.0)["soc_mcu"] == pytest.approx(1987.5 / 2000.0)
    assert days == pytest.approx([490.0, 940.0, 1390.0, 1840.0, 1975.0])  # the fifth day ends where it began
    assert observe.Observer(fleet).row(1e8 + 75.0)["soc_mcu"] == fleet.observer.row(1e8 + 75.0)["soc_mcu"]


def test_the_cached_product_integrates_as_segment_by_segment():
    from iotfl_sim.fleet import periodic

    rng = np.random.default_rng(3)
    for _ in range(20):
        a = Periodic(np.concatenate([[0.0], np.sort(rng.uniform(1, 7 * 24, 6))]), rng.uniform(0, 10, 7), 7 * 24.0, 5.0)
        b = Periodic(np.arange(24.0), rng.uniform(100, 500, 24), 24.0, 0.0)
        t0 = float(rng.uniform(0, 500))
        t1 = t0 + float(rng.uniform(0, 400))
        fast = product_integral(a, b, t0, t1)
        loop = sum(a.value(t + dt / 2) * b.value(t + dt / 2) * dt for t, dt in _fine(a, b, t0, t1))
        assert fast == pytest.approx(loop, rel=1e-9, abs=1e-6)
        assert a.cache[("product", id(b))][1] is not None  # 168 h over 24 h: the product was built
    odd, four = Periodic(np.array([0.0, 3.0]), np.array([2.0, 0.0]), 10.0), Periodic(np.zeros(1), np.ones(1), 4.0)
    assert product_integral(odd, four, 0.0, 20.0) == pytest.approx(12.0)  # a constant scales the other's integral
    a = Periodic(np.array([0.0, 3.7]), np.array([2.0, 0.5]), 10.0, 1.3)
    b = Periodic(np.array([0.0, 1.1, 2.9]), np.array([5.0, 7.0, 1.0]), 4.0)
    for t0, t1 in ((0.0, 20.0), (2.5, 97.3), (13.9, 14.2)):
        loop = sum(a.value(t + dt / 2) * b.value(t + dt / 2) * dt for t, dt in _fine(a, b, t0, t1))
        assert product_integral(a, b, t0, t1) == pytest.approx(loop, rel=1e-12)
    assert a.cache[("product", id(b))][1] is None  # 10 s and 4 s: no common period tried, the coarse loop ran
    assert periodic.MAX_PRODUCT_SEGMENTS > 0


def _fine(a: Periodic, b: Periodic, t0: float, t1: float):
    """Every span between consecutive changes of either signal (the loop the cache replaces)."""
    t = t0
    while t < t1:
        end = min(a.next_change(t), b.next_change(t), t1)
        yield t, end - t
        t = end


def _traced(tmp_path, charger: dict) -> Fleet:
    (tmp_path / "online.csv").write_text("device,online_from,online_until\n0,10,50\n0,100,150\n2,0,5\n")
    profile = copy.deepcopy(TINY)
    profile["battery"] = {"capacity_j": 1000.0}
    profile["power"]["idle_w"] = 0.5
    group = {
        "name": "phone", "count": 2, "profile": profile, "harvest": {"kind": "charger", **charger},
        "availability": {"kind": "trace", "format": "csv", "path": str(tmp_path / "online.csv")},
    }  # fmt: skip
    sc = load_scenario(text=yaml.safe_dump(base_scenario(fleet={"groups": [group]}, numerics="none")))
    return Fleet.build(resolve_groups(sc), 0)


def test_a_charger_plugged_in_whenever_the_trace_has_the_device_online(tmp_path):
    fleet = _traced(tmp_path, {"power_w": 10.0, "plugged": "online"})
    # device 0 replays trace client 0 (online 10-50 s and 100-150 s); device 1 client 1, never online
    plugged = fleet.source(0)
    assert plugged.offsets_s.tolist() == [0.0, 10.0, 50.0, 100.0, 150.0]
    assert plugged.values.tolist() == [0.0, 10.0, 0.0, 10.0, 0.0]
    assert fleet.on_power(20.0).tolist() == [True, False] and fleet.on_power(60.0).tolist() == [False, False]
    assert fleet.on_power(1e7).tolist() == [False, False]  # a CSV trace does not repeat: unplugged after it
    # online (charging) it trains without draining; the idle 0.5 W of 0-10 s is refilled there too
    assert fleet.spend(0, 20.0, 20.0, 4.0, "compute") is None
    assert fleet.level[0] == pytest.approx(1000.0)


def test_plugged_online_needs_a_trace_and_no_schedule(tmp_path, capsys):
    data = base_scenario(numerics="none")
    data["fleet"]["groups"][0]["harvest"] = {"kind": "charger", "power_w": 5, "plugged": "online"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "harvest.plugged: online follows the group's availability trace" in err and err.count("\n") == 1
    data["fleet"]["groups"][0]["harvest"]["start_hour"] = 3
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "the schedule's start_hour would be ignored" in err and err.count("\n") == 1
