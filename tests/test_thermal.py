"""Thermal throttling model: every expected value is derived by hand in the test (closed forms of the RC node and
the averaged bang-bang rule), and the piecewise solution is checked against an independent Euler simulation of
the ODE with the firmware's threshold rules."""

import math
from pathlib import Path

import pytest

from iotfl_sim.fleet.thermal import (
    RPI4,
    Thermal,
    cool,
    onset_time,
    run_work,
    temperature_at,
    work_phases,
)

# R = 10 K/W, tau = 100 s, limits 80/85 °C, clocks 0.5/0.25
TH = Thermal(r_k_per_w=10.0, tau_s=100.0, soft_c=80.0, hard_c=85.0, soft_clock=0.5, hard_clock=0.25)
# the same node with a shallower soft step, so that the soft-throttled device keeps heating past 85 °C
TH2 = Thermal(r_k_per_w=10.0, tau_s=100.0, soft_c=80.0, hard_c=85.0, soft_clock=0.75, hard_clock=0.25)
AMB = 25.0


def test_onset_closed_form_by_hand():
    # P = 6 W: steady 25 + 60 = 85; t = -100 ln((80 - 85) / (40 - 85)) = 100 ln 9
    assert onset_time(TH, 40.0, AMB, 6.0) == pytest.approx(100.0 * math.log(9.0), rel=1e-12)
    assert onset_time(TH, 40.0, AMB, 6.0) == pytest.approx(219.7225, abs=1e-4)


def test_onset_edges():
    assert onset_time(TH, 80.0, AMB, 6.0) == 0.0  # already at the limit
    assert onset_time(TH, 90.0, AMB, 1.0) == 0.0  # above it
    assert onset_time(TH, 40.0, AMB, 5.0) == math.inf  # steady 75 < 80
    assert onset_time(TH, 40.0, AMB, 5.5) == math.inf  # steady exactly 80: approached, never reached


def test_never_throttles_when_steady_below_soft():
    # idle 2 W, full 5 W: steady at full clock 75 °C < 80
    w = 500.0
    res = run_work(TH, 40.0, AMB, 2.0, 5.0, w)
    assert res.duration_s == pytest.approx(w)
    assert res.energy_j == pytest.approx(5.0 * w)
    assert res.end_c == pytest.approx(75.0 + (40.0 - 75.0) * math.exp(-5.0))
    assert res.throttled_s == 0.0
    assert res.onset_s is None


def test_work_finishes_before_onset():
    # full 6 W reaches 80 °C at 100 ln 9 = 219.7 s; 100 s of work ends before it
    res = run_work(TH, 40.0, AMB, 2.0, 6.0, 100.0)
    assert res.duration_s == pytest.approx(100.0)
    assert res.energy_j == pytest.approx(600.0)
    assert res.end_c == pytest.approx(85.0 - 45.0 * math.exp(-1.0))
    assert res.onset_s is None


def test_holding_phase_by_hand():
    # idle 2, full 6: P(f) = 2 + 4 f. Full clock heads for 85 °C; at the soft clock 0.5, P = 4 W -> 65 °C < 80,
    # so the firmware oscillates at 80 °C: P(f*) = (80 - 25) / 10 = 5.5 W -> f* = 3.5 / 4 = 0.875.
    t1 = 100.0 * math.log(9.0)  # full-clock phase, wall = work
    w = 400.0
    hold_wall = (w - t1) / 0.875
    res = run_work(TH, 40.0, AMB, 2.0, 6.0, w)
    assert res.onset_s == pytest.approx(t1)
    assert res.duration_s == pytest.approx(t1 + hold_wall)
    assert res.throttled_s == pytest.approx(hold_wall)
    assert res.end_c == pytest.approx(80.0)
    assert res.energy_j == pytest.approx(6.0 * t1 + 5.5 * hold_wall)
    ph = work_phases(TH, 40.0, AMB, 2.0, 6.0, w)
    assert [p.holding for p in ph] == [False, True]
    assert ph[1].clock == pytest.approx(0.875)


def test_rising_throttled_phase_then_hold_at_hard_by_hand():
    # TH2, idle 2, full 8: P(f) = 2 + 6 f.
    # full: 8 W -> 105 °C; t1 = 100 ln((105 - 40) / (105 - 80)) = 100 ln 2.6
    # soft 0.75: 6.5 W -> 90 °C > 85, keeps rising: t2 = 100 ln((90 - 80) / (90 - 85)) = 100 ln 2, work 0.75 t2
    # hard 0.25: 3.5 W -> 60 °C < 85: hold at 85 with P(f*) = 6 W -> f* = 4 / 6
    t1 = 100.0 * math.log(2.6)
    t2 = 100.0 * math.log(2.0)
    w = 300.0
    hold_wall = (w - t1 - 0.75 * t2) / (4.0 / 6.0)
    res = run_work(TH2, 40.0, AMB, 2.0, 8.0, w)
    assert res.onset_s == pytest.approx(t1)
    assert res.duration_s == pytest.approx(t1 + t2 + hold_wall)
    assert res.throttled_s == pytest.approx(t2 + hold_wall)
    assert res.end_c == pytest.approx(85.0)
    assert res.energy_j == pytest.approx(8.0 * t1 + 6.5 * t2 + 6.0 * hold_wall)


def test_work_ends_inside_rising_throttled_phase():
    # as above, 120 s of work: 120 - 100 ln 2.6 left after onset, done at 0.75 of the clock
    t1 = 100.0 * math.log(2.6)
    wall2 = (120.0 - t1) / 0.75
    res = run_work(TH2, 40.0, AMB, 2.0, 8.0, 120.0)
    assert res.duration_s == pytest.approx(t1 + wall2)
    assert res.end_c == pytest.approx(90.0 - 10.0 * math.exp(-wall2 / 100.0))
    assert res.end_c < 85.0
    assert res.energy_j == pytest.approx(8.0 * t1 + 6.5 * wall2)
    assert res.throttled_s == pytest.approx(wall2)


def test_starting_above_hard_limit_cools_then_holds():
    # TH2 at 95 °C: hard clock 3.5 W -> 60 °C, falls to 85 in 100 ln((95 - 60) / (85 - 60)) = 100 ln 1.4;
    # at 85 the soft clock (steady 90) would push it back up: hold at 85 with f* = 2/3
    t1 = 100.0 * math.log(1.4)
    w = 100.0
    hold_wall = (w - 0.25 * t1) / (2.0 / 3.0)
    res = run_work(TH2, 95.0, AMB, 2.0, 8.0, w)
    assert res.onset_s == 0.0
    assert res.duration_s == pytest.approx(t1 + hold_wall)
    assert res.throttled_s == pytest.approx(t1 + hold_wall)
    assert res.energy_j == pytest.approx(3.5 * t1 + 6.0 * hold_wall)
    assert res.end_c == pytest.approx(85.0)


def test_hot_start_with_cool_full_clock_recovers_full_speed():
    # TH at 82 °C, idle 2 full 5: soft clock 3.5 W -> 60 °C; falls to 80 in 100 ln((82 - 60) / (80 - 60)) = 100 ln 1.1;
    # at 80 the full clock's steady 75 °C is below the threshold, so it runs on unthrottled
    t1 = 100.0 * math.log(1.1)
    w = 200.0
    rest = w - 0.5 * t1
    res = run_work(TH, 82.0, AMB, 2.0, 5.0, w)
    assert res.throttled_s == pytest.approx(t1)
    assert res.duration_s == pytest.approx(t1 + rest)
    assert res.end_c == pytest.approx(75.0 + 5.0 * math.exp(-rest / 100.0))
    assert res.energy_j == pytest.approx(3.5 * t1 + 5.0 * rest)


TRAJECTORIES = [  # (model, start, idle W, full W, work s): held at a limit, rising through both, starting hot
    (TH, 40.0, 2.0, 6.0, 400.0),
    (TH2, 40.0, 2.0, 8.0, 300.0),
    (TH2, 95.0, 2.0, 8.0, 100.0),
    (TH, 82.0, 2.0, 5.0, 200.0),
]


@pytest.mark.parametrize("th,t0,idle,full,work", TRAJECTORIES)
def test_continuity_and_work_conservation(th, t0, idle, full, work):
    ph = work_phases(th, t0, AMB, idle, full, work)
    assert ph[0].start_c == t0
    for a, b in zip(ph, ph[1:], strict=False):
        assert b.start_s == pytest.approx(a.start_s + a.duration_s)
        assert b.start_c == pytest.approx(a.end_c)
        # the closed-form end of a phase is its curve at its end
        assert temperature_at(ph, th.tau_s, a.start_s + a.duration_s) == pytest.approx(a.end_c)
    assert sum(p.clock * p.duration_s for p in ph) == pytest.approx(work)


def _euler(th, t0, amb, idle, full, work, dt=0.005):
    """Independent check: explicit Euler on C dT/dt = P - (T - amb)/R with the firmware's rule applied each step
    (full clock below soft_c, soft_clock below hard_c, hard_clock at and above); returns wall, energy, end T."""
    temp, done, wall, energy = t0, 0.0, 0.0, 0.0
    c = th.tau_s / th.r_k_per_w
    while done < work:
        f = 1.0 if temp < th.soft_c else (th.soft_clock if temp < th.hard_c else th.hard_clock)
        step = min(dt, (work - done) / f)
        p = idle + (full - idle) * f
        temp += step * (p - (temp - amb) / th.r_k_per_w) / c
        done += f * step
        wall += step
        energy += p * step
    return wall, energy, temp


@pytest.mark.parametrize("th,t0,idle,full,work", TRAJECTORIES)
def test_against_euler_simulation(th, t0, idle, full, work):
    res = run_work(th, t0, AMB, idle, full, work)
    wall, energy, end = _euler(th, t0, AMB, idle, full, work)
    assert res.duration_s == pytest.approx(wall, rel=2e-3)
    assert res.energy_j == pytest.approx(energy, rel=2e-3)
    assert res.end_c == pytest.approx(end, abs=0.05)


def test_cool_closed_form():
    # idle 2 W -> 45 °C; after one tau from 80: 45 + 35 / e
    assert cool(TH, 80.0, AMB, 2.0, 100.0) == pytest.approx(45.0 + 35.0 * math.exp(-1.0))
    assert cool(TH, 80.0, AMB, 2.0, 0.0) == 80.0
    assert cool(TH, 80.0, AMB, 2.0, 1e9) == pytest.approx(45.0)


def test_zero_work():
    res = run_work(TH, 50.0, AMB, 2.0, 6.0, 0.0)
    assert res == (0.0, 0.0, 50.0, 0.0, None)


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(r_k_per_w=0.0), "r_k_per_w"),
        (dict(r_k_per_w=-1.0), "r_k_per_w"),
        (dict(tau_s=0.0), "tau_s"),
        (dict(tau_s=math.inf), "tau_s"),
        (dict(hard_clock=0.0), "hard_clock"),
        (dict(hard_clock=0.6, soft_clock=0.5), "hard_clock"),
        (dict(soft_clock=1.2), "soft_clock"),
        (dict(soft_c=85.0, hard_c=85.0), "soft_c"),
        (dict(soft_c=90.0, hard_c=85.0), "soft_c"),
    ],
)
def test_parameter_validation(kw, msg):
    base = dict(r_k_per_w=10.0, tau_s=100.0)
    base.update(kw)
    with pytest.raises(ValueError, match=msg):
        Thermal(**base)


def test_bad_work_arguments():
    with pytest.raises(ValueError, match="work_s"):
        run_work(TH, 40.0, AMB, 2.0, 6.0, -1.0)
    with pytest.raises(ValueError, match="full_w"):
        run_work(TH, 40.0, AMB, 6.0, 2.0, 10.0)


def test_rpi4_profile_by_hand():
    # idle 56 °C at 24.5 °C ambient, 3.1 -> 6.2 W: full-clock steady 24.5 + 6.2 * 10.2 = 87.74 °C > 80;
    # onset = 110 ln((87.74 - 56) / (87.74 - 80)); at 1000 MHz 3.1 + 3.1 * 2/3 = 5.1667 W -> 77.2 °C < 80, so it holds
    # at 80 with P(f*) = 55.5 / 10.2 W, f* = (55.5 / 10.2 - 3.1) / 3.1
    s = 24.5 + 6.2 * 10.2
    assert onset_time(RPI4, 56.0, 24.5, 6.2) == pytest.approx(110.0 * math.log((s - 56.0) / (s - 80.0)))
    ph = work_phases(RPI4, 56.0, 24.5, 3.1, 6.2, 600.0)
    assert ph[-1].holding
    assert ph[-1].clock == pytest.approx((55.5 / 10.2 - 3.1) / 3.1)


# ---------------------------------------------------------------- in a run


def _train_spans(tmp_path, thermal: dict | None, name: str) -> tuple[Path, list[tuple[float, float]]]:
    """The run folder and the (start, end) of each training of a one-device run, with ``thermal`` on its group."""
    import copy

    from conftest import TINY, base_scenario, run_events

    profile = copy.deepcopy(TINY)
    profile["compute"]["flops"] = 2.0e5  # a task of minutes: long enough to heat up
    profile["power"].update(idle_w=0.1, train_w=6.0)
    profile["battery"] = {}
    profile["thermal"] = {"r_k_per_w": 10.0, "tau_s": 100.0, "soft_clock": 0.5, "hard_clock": 0.25}
    group = {"name": "hot", "count": 1, "profile": profile}
    if thermal is not None:
        group["thermal"] = thermal
    data = base_scenario(rounds=1, clients_per_round=1, numerics="none", fleet={"groups": [group]})
    run, events = run_events(tmp_path, data, name)
    start = [e["t"] for e in events if e["event"] == "train_start"]
    end = [e["t"] for e in events if e["event"] == "train_end"]
    return run, list(zip(start, end, strict=True))


def test_a_long_task_slows_as_the_closed_form_says(tmp_path):
    _, (cold,) = _train_spans(tmp_path, None, "cold")
    run, (hot,) = _train_spans(tmp_path, {"ambient_c": 25.0}, "hot")
    work = cold[1] - cold[0]
    # idle steady state 25 + 0.1 x 10 = 26 C; full power 6 W heads for 85 C: 80 C after 100 ln(59 / 5) s. The soft
    # clock (0.1 + 5.9 x 0.5 = 3.05 W, steady 55.5 C) would pull it back, so it holds at 80 C at the clock whose power
    # is (80 - 25) / 10 = 5.5 W: (5.5 - 0.1) / 5.9
    onset = 100.0 * math.log(59.0 / 5.0)
    f_hold = (5.5 - 0.1) / 5.9
    assert work > onset  # the test's premise: the task outlasts the full-clock phase
    assert hot[1] - hot[0] == pytest.approx(onset + (work - onset) / f_hold, rel=1e-6)
    # the row reports the mean clock of that training: its full-clock work over its wall time, and 80 C held
    import csv

    (row,) = csv.DictReader((run / "rounds.csv").open())
    assert float(row["clock_mcu"]) == pytest.approx(work / (hot[1] - hot[0]), rel=1e-6)
    assert float(row["temp_c_mcu"]) < 80.0  # cooling since the task ended (the upload came after it)


def test_the_scenario_names_every_published_board():
    from iotfl_sim.fleet.thermal import THERMAL_BOARDS
    from iotfl_sim.scenario.model import THERMAL_BOARDS as NAMES

    assert set(NAMES) == set(THERMAL_BOARDS)
