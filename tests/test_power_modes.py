"""Power modes as a decision (issue 49): a group's power_policy picks a low mode on a low battery, a method may
ask for a mode per task (Assignment.power_mode), and a change costs the profile's mode_switch_s at idle power."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from conftest import TINY, base_scenario, run_events

from iotfl_sim.cli import main


def _profile() -> dict:
    p = copy.deepcopy(TINY)
    p["compute"]["power_modes"] = {
        "fast": {"flops": 1.0e8, "train_w": 1.0},
        "slow": {"flops": 5.0e7, "train_w": 0.4},
    }
    p["compute"]["default_mode"] = "fast"
    p["compute"]["mode_switch_s"] = 2.0
    p["compute"]["flops"] = 1.0e8
    p["battery"] = {"capacity_j": 1.0e6}
    return p


def _events(tmp_path, policy: dict | None, name: str) -> list[dict]:
    group = {"name": "node", "count": 1, "profile": _profile()}
    if policy is not None:
        group["power_policy"] = policy
    data = base_scenario(rounds=1, clients_per_round=1, numerics="none", fleet={"groups": [group]})
    return run_events(tmp_path, data, name)[1]


def _at(events: list[dict], kind: str) -> float:
    return next(e["t"] for e in events if e["event"] == kind)


def test_a_low_battery_trains_in_the_low_mode_after_the_switch(tmp_path):
    full = _events(tmp_path, {"low_mode": "slow", "below": 0.01}, "full")  # never that low: the default mode
    low = _events(tmp_path, {"low_mode": "slow", "below": 0.99999999}, "low")  # any draw at all puts it below
    assert not any(e["event"] == "power_mode" for e in full)
    (switch,) = [e for e in low if e["event"] == "power_mode"]
    assert (switch["was"], switch["mode"]) == ("fast", "slow")
    # the switch takes the profile's 2 s after the model arrived, then training at half the FLOP/s takes twice as long
    assert switch["t"] == pytest.approx(_at(low, "arrive") + 2.0)
    assert _at(low, "train_start") == pytest.approx(switch["t"])
    fast = _at(full, "train_end") - _at(full, "train_start")
    assert _at(low, "train_end") - _at(low, "train_start") == pytest.approx(2.0 * fast)


def test_an_unknown_low_mode_is_refused_in_one_line(tmp_path, capsys):
    data = base_scenario(numerics="none")
    data["fleet"]["groups"][0]["profile"] = _profile()
    data["fleet"]["groups"][0]["power_policy"] = {"low_mode": "turbo", "below": 0.3}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "power_policy.low_mode: 'turbo' is not a power mode of tiny (has: fast, slow)" in err
    assert err.count("\n") == 1


def _method(tmp_path, mode: str) -> Path:
    (tmp_path / f"{mode}_method.py").write_text(
        f"MODE = {mode!r}\n"
        "from iotfl_sim.strategy import Assignment, EvalTarget, Strategy, SubmodelSpec, average, select_uniform\n"
        "class Slow(Strategy):\n"
        "    def setup(self, ctx):\n"
        "        self.spec = SubmodelSpec(1.0, name='full')\n"
        "        self.state = ctx.initial_state(ctx.recipe, self.spec)\n"
        "    def select(self, rnd, fleet, rng):\n"
        "        chosen = select_uniform(fleet, self.c.clients_per_round, rng)\n"
        "        return [Assignment(int(d), self.spec, level='full', power_mode=MODE) for d in chosen]\n"
        "    def payload(self, assignment):\n"
        "        return self.state\n"
        "    def aggregate(self, rnd, updates):\n"
        "        self.state = average(self.state, updates)\n"
        "    def eval_targets(self):\n"
        "        return [EvalTarget('full', self.spec, self.state, self.c.recipe)]\n"
    )
    group = {"name": "node", "count": 1, "profile": _profile()}
    data = base_scenario(rounds=2, clients_per_round=1, numerics="none", fleet={"groups": [group]})
    data["algorithm"] = {"name": f"{mode}_method:Slow"}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_method_may_pick_the_mode_of_each_task(tmp_path):
    """A user method that asks for the slow mode on every task: the device switches once and trains slowly."""
    path = _method(tmp_path, "slow")
    assert main(["run", str(path), "--out", str(tmp_path / "m"), "--quiet"]) == 0
    run = next((tmp_path / "m").iterdir())
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [e["mode"] for e in events if e["event"] == "power_mode"] == [
        "slow"
    ]  # once: round 1 is already slow


def test_a_mode_the_profile_lacks_stops_the_run_in_one_line(tmp_path, capsys):
    path = _method(tmp_path, "turbo")
    assert main(["run", str(path), "--out", str(tmp_path / "m"), "--quiet"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert (
        len(errors) == 1
        and "power mode 'turbo', which its profile does not define (modes: fast, slow)" in errors[0]
    )
