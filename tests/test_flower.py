"""A Flower app on the simulated fleet (``algorithm.name: flower``, ``iotfl_sim.flower``): the example app of
examples/flower_app runs unchanged, its rounds become rows, failures reach its strategy, time, energy and bytes
follow the cost model. Skipped where Flower (the flower extra) is not installed."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

flwr = pytest.importorskip("flwr")

from iotfl_sim.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flower_app"
EXTRAS = Path(__file__).resolve().parent / "flower_apps"  # ServerApps and ClientApps of these tests

TINY_PROFILE = """
name: tiny
device_class: sbc
compute: {flops: 1.0e+9, jitter: {sigma: 0}}
memory: {total_mb: 4096, free_mb: 2048, sigma_mb: 0}
power: {idle_w: 0.5, train_w: 2.0, tx_w: 1.0, rx_w: 0.75}
battery: {capacity_j: 1.0e+9}
link: {down_mbps: 1.0, up_mbps: 2.0, rtt_ms: 10}
"""


def app_folder(tmp_path: Path, scenario: str, profiles: dict[str, str] | None = None) -> Path:
    """A copy of the example app with ``scenario`` beside it (and the test ServerApps, and device profiles)."""
    folder = tmp_path / "app"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", "fleet.yaml"))
    for extra in EXTRAS.glob("*.py"):
        shutil.copy(extra, folder / extra.name)
    for name, text in (profiles or {}).items():
        (folder / "device_profiles").mkdir(exist_ok=True)
        (folder / "device_profiles" / f"{name}.yaml").write_text(text)
    (folder / "scenario.yaml").write_text(scenario)
    return folder / "scenario.yaml"


LEGACY_CLIENT = "flowerapp.legacy_client_app:app\n  metrics: [train_loss, eval_loss, accuracy]\n  accuracy_metric: accuracy"


def scenario(server: str = "flowerapp.server_app:app", groups: str = "- {profile: raspberry_pi_4b, count: 4}",
             rounds: int = 2, run_config: str = "{num-server-rounds: 2, local-epochs: 1, fraction-train: 1.0, "
             "fraction-evaluate: 1.0}", client: str = "flowerapp.client_app:app") -> str:  # fmt: skip
    return (
        f"name: fl\nseed: 0\nrounds: {rounds}\nalgorithm:\n  name: flower\n  server_app: {server}\n"
        f"  client_app: {client}\n  run_config: {run_config}\nfleet:\n  groups:\n    {groups}\n"
    )


def run(path: Path, out: Path, *extra: str) -> Path:
    assert main(["run", str(path), "--out", str(out), "--quiet", *extra]) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def rows(folder: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(folder / "rounds.csv")))


def events(folder: Path) -> list[dict]:
    return [json.loads(x) for x in open(folder / "events.jsonl")]


def test_the_example_app_runs_its_rounds_on_a_mixed_fleet(tmp_path):
    groups = "- {profile: raspberry_pi_4b, count: 2}\n    - {profile: phone_low, count: 2}"
    folder = run(app_folder(tmp_path, scenario(groups=groups)), tmp_path / "runs")
    got = rows(folder)
    assert [int(r["round"]) for r in got] == [1, 2]
    for r in got:
        # every node trains and evaluates each round: 4 train + 4 evaluate messages
        assert int(r["selected"]) == 8 and int(r["completed"]) == 8
        for col in ("train_loss", "eval_loss", "eval_acc", "acc_full", "energy_j", "bytes_down_round", "bytes_up_round"):
            assert r[col] not in ("", None), col
        assert r["acc_full"] == r["eval_acc"]
        assert 0.0 <= float(r["acc_full"]) <= 1.0
    times = [float(r["sim_time_s"]) for r in got]
    assert 0 < times[0] < times[1]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "complete"
    app = summary["flower"]
    assert app["server_app"] == "flowerapp.server_app:app" and app["rounds"] == 2
    assert app["messages_timed_by_the_host"] == 0 and app["metrics_not_recorded"] == []
    assert app["messages_not_run_at_the_stop"] == 0 and app["host_flops_per_s"] is None
    dispatched = [e["message"] for e in events(folder) if e["event"] == "dispatch"]
    assert sorted(dispatched) == ["evaluate"] * 8 + ["train"] * 8


def test_bytes_are_the_messages_real_sizes(tmp_path):
    """Every message FedAvg sends (train and evaluate) carries the global model: the app's 13,706 float32
    parameters, 4 bytes each, plus Flower's framing (metadata, record, array and chunk headers: under 8 KB). Train
    replies carry the trained model back; evaluate replies only metrics."""
    folder = run(app_folder(tmp_path, scenario(rounds=1, run_config="{num-server-rounds: 1, local-epochs: 1, "
                                               "fraction-train: 1.0, fraction-evaluate: 1.0}")),
                 tmp_path / "runs", "--set", "server.header_bytes=0")  # fmt: skip
    params = 16 * 9 + 16 + 32 * 16 * 9 + 32 + 128 * 64 + 64 + 64 * 10 + 10
    assert params == 13_706
    (row,) = rows(folder)
    down, up = float(row["bytes_down_round"]), float(row["bytes_up_round"])
    assert 8 * 4 * params < down < 8 * (4 * params + 8192)
    assert 4 * 4 * params < up < 4 * (4 * params + 8192) + 4 * 8192
    uploads = [e["bytes"] for e in events(folder) if e["event"] == "upload"]
    assert sum(uploads) == pytest.approx(up)


def test_the_same_seed_gives_the_same_rows_and_another_seed_does_not(tmp_path):
    path = app_folder(tmp_path, scenario())
    a, b = rows(run(path, tmp_path / "a")), rows(run(path, tmp_path / "b"))
    host = {k for k in a[0] if k.startswith("host_")}
    assert [{k: v for k, v in r.items() if k not in host} for r in a] == [
        {k: v for k, v in r.items() if k not in host} for r in b
    ]
    c = rows(run(path, tmp_path / "c", "--set", "algorithm.run_config.seed=1"))
    assert [r["train_loss"] for r in c] != [r["train_loss"] for r in a]


def test_time_and_energy_follow_the_profile_by_hand(tmp_path):
    """Two identical devices with no jitter and the FLOP model: each message's download takes bytes x 8 / 1 Mb/s
    + 10 ms, its work FLOPs / 1e9 s at 2 W, its reply's upload bytes x 8 / 2 Mb/s + 10 ms."""
    path = app_folder(tmp_path, scenario(groups="- {profile: tiny, count: 2}", rounds=1,
                                         run_config="{num-server-rounds: 1, local-epochs: 1, fraction-train: 1.0, "
                                         "fraction-evaluate: 1.0}"),  # fmt: skip
                      {"tiny": TINY_PROFILE})
    folder = run(path, tmp_path / "runs", "--set", "server.header_bytes=0")
    ev = events(folder)
    by_device: dict[int, list[dict]] = {}
    for e in ev:
        by_device.setdefault(e["device"], []).append(e)
    compute_s = radio_j = 0.0
    for d, es in by_device.items():
        if d < 0:
            continue
        starts = [e for e in es if e["event"] == "train_start"]
        ends = [e for e in es if e["event"] == "train_end"]
        for s, t in zip(starts, ends, strict=True):
            # the event log keeps instants to the microsecond
            assert t["t"] - s["t"] == pytest.approx(s["flops"] / 1e9, abs=2e-6)
            compute_s += s["flops"] / 1e9
        for u in (e for e in es if e["event"] == "upload"):
            radio_j += 1.0 * u["bytes"] * 8 / 2e6
    row = rows(folder)[0]
    down = float(row["bytes_down_round"])
    radio_j += 0.75 * down * 8 / 1e6
    assert float(row["energy_compute_j"]) == pytest.approx(2.0 * compute_s, rel=1e-6)
    assert float(row["energy_radio_j"]) == pytest.approx(radio_j, rel=1e-6)


def test_a_device_out_of_memory_reaches_the_strategy_as_a_failure(tmp_path):
    """One group declares 0.05 MB free: its ClientApp runs, needs more, and its reply is Flower's error reply
    (CLIENT_APP_CRASHED) among the replies the strategy's aggregate_train gets."""
    tight = TINY_PROFILE.replace("free_mb: 2048", "free_mb: 0.05").replace("name: tiny", "name: tight")
    groups = "- {profile: tiny, count: 2}\n    - {profile: tight, count: 1}"
    path = app_folder(tmp_path, scenario("servers_extra:recording", groups, rounds=2), {"tiny": TINY_PROFILE, "tight": tight})
    sys.modules.pop("servers_extra", None)
    folder = run(path, tmp_path / "runs")
    seen = sys.modules["servers_extra"].SEEN
    code = int(flwr.common.constant.ErrorCode.CLIENT_APP_CRASHED)
    assert [(s["replies"], s["errors"], s["codes"]) for s in seen] == [(3, 1, [code]), (3, 1, [code])]
    got = rows(folder)
    assert [int(r["failed_oom"]) for r in got] == [1, 1]
    assert [int(r["completed"]) for r in got] == [2, 2]


def test_the_earlier_layout_runs_its_rounds_with_its_metrics(tmp_path):
    """ServerApp(server_fn=...) with the legacy FedAvg and a NumPyClient: each round's fit and evaluate messages
    become one row; the NumPyClient's metrics (train_loss, accuracy) and its evaluation's loss (eval_loss) fill
    their columns, averaged by num_examples; the same seed gives the same rows."""
    groups = "- {profile: raspberry_pi_4b, count: 2}\n    - {profile: phone_low, count: 2}"
    path = app_folder(tmp_path, scenario("flowerapp.legacy_server_app:app", groups, client=LEGACY_CLIENT))
    folder = run(path, tmp_path / "runs")
    got = rows(folder)
    assert [int(r["round"]) for r in got] == [1, 2]
    for r in got:
        assert int(r["selected"]) == 8 and int(r["completed"]) == 8  # fraction 1.0: 4 fit + 4 evaluate messages
        for col in ("train_loss", "eval_loss", "accuracy", "energy_j", "bytes_up_round"):
            assert r[col] not in ("", None), col
        assert r["acc_full"] == r["accuracy"] and 0.0 <= float(r["accuracy"]) <= 1.0
    dispatched = sorted(e["message"] for e in events(folder) if e["event"] == "dispatch")
    assert dispatched == ["evaluate"] * 8 + ["train"] * 8
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["flower"]["rounds"] == 2 and summary["flower"]["metrics_not_recorded"] == []
    again = rows(run(path, tmp_path / "again"))
    assert [r["train_loss"] for r in again] == [r["train_loss"] for r in got]
    assert [r["sim_time_s"] for r in again] == [r["sim_time_s"] for r in got]


def test_in_the_earlier_layout_a_device_out_of_memory_is_a_failure_of_its_strategy(tmp_path):
    """The legacy strategy's aggregate_fit gets the out-of-memory node among its failures, as the exception
    Flower's GridClientProxy raises for an error reply; the other two among its results."""
    tight = TINY_PROFILE.replace("free_mb: 2048", "free_mb: 0.05").replace("name: tiny", "name: tight")
    groups = "- {profile: tiny, count: 2}\n    - {profile: tight, count: 1}"
    path = app_folder(tmp_path, scenario("servers_extra:legacy_recording", groups, client=LEGACY_CLIENT),
                      {"tiny": TINY_PROFILE, "tight": tight})  # fmt: skip
    sys.modules.pop("servers_extra", None)
    folder = run(path, tmp_path / "runs")
    seen = sys.modules["servers_extra"].LEGACY_SEEN
    assert [(s["round"], s["results"], len(s["failures"])) for s in seen] == [(1, 2, 1), (2, 2, 1)]
    for s in seen:
        assert "Message contains an Error (reason: the ClientApp ran out of memory" in s["failures"][0]
    assert [int(r["failed_oom"]) for r in rows(folder)] == [1, 1]


def test_a_strategy_asking_for_more_nodes_than_the_fleet_has_is_one_line(tmp_path, capsys):
    """The legacy FedAvg waits for min_available_clients nodes; with 4 asked of a fleet of 2 the run ends in one
    line naming the minimums (Flower's own client manager would wait a day of real time)."""
    path = app_folder(tmp_path, scenario("flowerapp.legacy_server_app:app", "- {profile: tiny, count: 2}",
                                         run_config="{num-server-rounds: 1, min-available-nodes: 4}",
                                         client=LEGACY_CLIENT), {"tiny": TINY_PROFILE})  # fmt: skip
    code = main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert "algorithm.server_app" in last and "waits for 4 available nodes" in last and "min_available_clients" in last


def test_a_grid_call_from_a_thread_of_the_apps_own_is_one_line(tmp_path, capsys):
    """Answers must come in one order every run: a Grid call from another thread than the app's ends the run in
    one line, even though the app swallows the error its thread got."""
    path = app_folder(tmp_path, scenario("servers_extra:threaded"))
    code = main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert "called its Grid from a thread of its own ('apps-own-thread')" in last


def test_two_messages_to_one_node_are_handled_one_after_the_other(tmp_path):
    """A node handles one message at a time: the second train message pushed to a busy node starts (its dispatch
    event) only once the first one's reply is uploaded; both replies come back."""
    path = app_folder(tmp_path, scenario("servers_extra:twice", "- {profile: tiny, count: 2}", rounds=1),
                      {"tiny": TINY_PROFILE})  # fmt: skip
    folder = run(path, tmp_path / "runs")
    steps = ("dispatch", "arrive", "train_start", "train_end", "upload")
    ev = [e for e in events(folder) if e["device"] >= 0 and e["event"] in steps]
    (device,) = {e["device"] for e in ev}
    kinds = [e["event"] for e in ev]
    assert kinds == list(steps) * 2, kinds
    assert ev[5]["t"] >= ev[4]["t"]
    (row,) = rows(folder)
    assert int(row["completed"]) == 2


def test_a_client_app_without_pytorch_is_timed_by_host_seconds_and_says_so(tmp_path, capsys):
    """A NumPy ClientApp records no operation: its time is its host seconds times this machine's speed over the
    device's, counted in summary.json and said in the run's last lines."""
    path = app_folder(tmp_path, scenario("servers_extra:numpy_query", "- {profile: tiny, count: 2}", rounds=1,
                                         client="numpy_client:app\n  metrics: [residual]\n  accuracy_metric: residual",
                                         run_config="{}"), {"tiny": TINY_PROFILE})  # fmt: skip
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr()
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    app = json.loads((folder / "summary.json").read_text())["flower"]
    assert app["messages_timed_by_the_host"] == 2 and app["host_flops_per_s"] > 0
    assert "2 messages ran no PyTorch operation" in out.out + out.err
    ev = events(folder)
    spans = [t["t"] - s["t"] for s, t in zip([e for e in ev if e["event"] == "train_start"],
                                             [e for e in ev if e["event"] == "train_end"], strict=True)]  # fmt: skip
    assert len(spans) == 2 and all(s > 0 for s in spans)
    assert rows(folder)[0]["residual"] not in ("", None)


def test_host_timed_work_is_host_seconds_times_the_speed_ratio():
    """By hand: 0.5 host seconds on a machine of 4e10 FLOP/s, priced on a 1e9 FLOP/s device, take 20 s."""
    import numpy as np

    from iotfl_sim.fl.cost.opcost import StepTrace
    from iotfl_sim.flower.node import NodeWork
    from iotfl_sim.sim import flower_tasks

    class Fleet:
        flops = np.array([1e9])
        train_w = np.array([2.0])

    tasks = flower_tasks.FlowerTasks.__new__(flower_tasks.FlowerTasks)
    tasks.fleet, tasks.host_timed = Fleet(), 0
    empty = StepTrace(0, (), np.zeros(0), np.zeros(0))
    original = flower_tasks.host_flops_per_s
    flower_tasks.host_flops_per_s = lambda: 4e10
    try:
        seconds, watts = tasks.price(NodeWork(None, empty, 0, 0.5), 0, 1)
    finally:
        flower_tasks.host_flops_per_s = original
    assert seconds == pytest.approx(20.0) and watts == 2.0 and tasks.host_timed == 1


@pytest.mark.parametrize("server", ["servers_extra:fedadam", "servers_extra:fedprox", "servers_extra:legacy_fedadam"])
def test_other_strategies_of_flowers_library_run(tmp_path, server):
    client = LEGACY_CLIENT if "legacy" in server else "flowerapp.client_app:app"
    folder = run(app_folder(tmp_path, scenario(server, client=client)), tmp_path / "runs")
    assert len(rows(folder)) == 2 and rows(folder)[-1]["acc_full"] != ""


def test_a_client_app_that_raises_is_one_line(tmp_path, capsys):
    path = app_folder(tmp_path, scenario())
    client = path.parent / "flowerapp" / "client_app.py"
    client.write_text(client.read_text().replace("    net, (trainloader, _) = _setup(msg, context)",
                                                 "    raise ValueError('broken on purpose')"))  # fmt: skip
    for name in [m for m in sys.modules if m.startswith("flowerapp")]:
        del sys.modules[name]
    try:
        code = main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"])
    finally:
        for name in [m for m in sys.modules if m.startswith("flowerapp")]:
            del sys.modules[name]
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 2, err
    assert "Traceback" not in err
    assert last.startswith("error: ") and "algorithm.client_app raised ValueError: broken on purpose" in last


@pytest.mark.parametrize(
    "field, ref, words",
    [
        ("server_app", "no_such_module:app", ["algorithm.server_app", "no module 'no_such_module'"]),
        ("server_app", "servers_extra:not_an_app", ["algorithm.server_app", "is a int, not a Flower ServerApp"]),
        ("client_app", "servers_extra:fedadam", ["algorithm.client_app", "is a ServerApp, not a Flower ClientApp"]),
        ("client_app", "flowerapp.client_app:nothing", ["algorithm.client_app", "has no 'nothing'"]),
    ],
)
def test_a_wrong_app_is_refused_in_one_line(tmp_path, capsys, field, ref, words):
    text = scenario()
    text = text.replace("server_app: flowerapp.server_app:app", f"server_app: {ref}") if field == "server_app" else \
        text.replace("client_app: flowerapp.client_app:app", f"client_app: {ref}")  # fmt: skip
    path = app_folder(tmp_path, text)
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "Traceback" not in err
    for w in words:
        assert w in last, (w, last)


def test_without_flower_installed_the_error_names_the_extra(tmp_path, capsys, monkeypatch):
    from importlib import metadata

    real = metadata.version

    def version(name: str) -> str:
        if name == "flwr":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    code = main(["validate", str(app_folder(tmp_path, scenario()))])
    err = capsys.readouterr().err
    assert code == 2
    assert "pip install 'iotfl-sim[flower]'" in err.strip().splitlines()[-1]


def test_numerics_torch_and_an_override_of_an_undeclared_key_are_refused(tmp_path, capsys):
    path = app_folder(tmp_path, scenario() + "numerics: torch\n")
    assert main(["validate", str(path)]) == 2
    assert "numerics: torch: a Flower app trains in its own ClientApp" in capsys.readouterr().err
    path = app_folder(tmp_path / "b", scenario(run_config="{num-server-round: 2}"))
    assert main(["validate", str(path)]) == 2
    assert "algorithm.run_config.num-server-round" in capsys.readouterr().err


LAYOUTS = {  # server app, its record of the global arrays, client app
    "message_api": ("recorded", "GLOBALS", "flowerapp.client_app:app"),
    "earlier": ("legacy_recorded", "LEGACY_GLOBALS", "flowerapp.legacy_client_app:app"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_on_an_ideal_fleet_the_global_model_equals_flowers_own_simulation(tmp_path, layout):
    """Everyone available, memory to spare, no deadline, every node every round: after each round the global
    parameters equal those of Flower's own simulation runtime (Ray, the app's pyproject.toml config) of the same app
    with the same seeds, within float tolerance (the replies are summed in another order), in both app layouts."""
    from flwr.app import Context, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.supercore.telemetry import EventType

    overrides = {"num-server-rounds": 2, "local-epochs": 1}
    server, record, client = LAYOUTS[layout]
    path = app_folder(tmp_path, scenario(f"servers_extra:{server}", "- {profile: tiny, count: 4}", rounds=2,
                                         run_config="{num-server-rounds: 2, local-epochs: 1}", client=client),
                      {"tiny": TINY_PROFILE})  # fmt: skip
    sys.modules.pop("servers_extra", None)
    run(path, tmp_path / "runs")
    extra = sys.modules["servers_extra"]
    ours = list(getattr(extra, record))
    assert len(ours) == 3  # the initial model, then after rounds 1 and 2
    getattr(extra, record).clear()

    from iotfl_sim.flower.apps import run_config

    app = path.parent
    config = run_config(app, overrides)
    sys.path.insert(0, str(app))
    try:
        flower_run = Run.create_empty(1)
        flower_run.override_config = dict(overrides)
        flower_run.primary_task_id = 1
        flower_run.federation_id = NOOP_FEDERATION_ID  # as run_simulation makes its Run
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
        _run_simulation(
            num_supernodes=4, exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
            client_app_attr=client, server_app=getattr(extra, server),
            backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
            server_app_context=Context(1, 0, {}, RecordDict(), config), app_dir=str(app), run=flower_run, is_app=True,
        )  # fmt: skip
    finally:
        sys.path.remove(str(app))
    theirs = list(getattr(extra, record))
    assert len(theirs) == 3
    for r, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6), (r, k, (a[k] - b[k]).abs().max())
    assert not torch.equal(ours[0]["fc2.weight"], ours[2]["fc2.weight"])  # the rounds did train


def test_the_example_folder_runs_unchanged_under_flowers_own_simulation(tmp_path):
    """The example's own ServerApp and ClientApp, from its own folder with its pyproject.toml's config (one round
    here), under Flower's simulation runtime on Ray, as `flwr run` on a local simulation federation starts it."""
    from flwr.app import Context, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.serverapp import ServerApp
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.supercore.telemetry import EventType

    from iotfl_sim.flower.apps import run_config

    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    overrides = {"num-server-rounds": 1, "local-epochs": 1}
    sys.path.insert(0, str(app))
    for name in [m for m in sys.modules if m.startswith("flowerapp")]:
        del sys.modules[name]
    seen: list[int] = []
    try:
        from flowerapp.server_app import app as server_app
        from flwr.serverapp.strategy import FedAvg

        original = FedAvg.aggregate_train

        def counted(self, server_round, replies):
            replies = list(replies)
            seen.append(len(replies))
            return original(self, server_round, replies)

        FedAvg.aggregate_train = counted
        assert isinstance(server_app, ServerApp)
        flower_run = Run.create_empty(1)
        flower_run.override_config = dict(overrides)
        flower_run.primary_task_id = 1
        flower_run.federation_id = NOOP_FEDERATION_ID
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
        _run_simulation(
            num_supernodes=4, exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
            client_app_attr="flowerapp.client_app:app", server_app=server_app,
            backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
            server_app_context=Context(1, 0, {}, RecordDict(), run_config(app, overrides)), app_dir=str(app),
            run=flower_run, is_app=True,
        )  # fmt: skip
    finally:
        FedAvg.aggregate_train = original
        sys.path.remove(str(app))
        for name in [m for m in sys.modules if m.startswith("flowerapp")]:
            del sys.modules[name]
    assert seen == [2]  # fraction-train 0.5 of 4 nodes, one round, every reply in


def test_a_study_of_a_flower_app_sweeps_compares_plots_and_reports(tmp_path, capsys):
    """A sweep over two seeds of the app's run config, then compare, plot and report on the study, as for any
    method's study."""
    import yaml

    path = app_folder(tmp_path, scenario(rounds=1, run_config="{num-server-rounds: 1, local-epochs: 1}"))
    study = {"name": "fl_study", "base": "scenario.yaml", "workers": 1,
             "grid": {"algorithm.run_config.seed": [0, 1]}}  # fmt: skip
    (path.parent / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    out = tmp_path / "studies"
    assert main(["sweep", str(path.parent / "study.yaml"), "--out", str(out), "--quiet"]) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    index = list(csv.DictReader(open(folder / "index.csv")))
    assert [r["status"] for r in index] == ["done", "done"]
    assert main(["compare", str(folder), "--out", str(tmp_path / "cmp")]) == 0
    assert main(["plot", str(folder), "--out", str(tmp_path / "fig")]) == 0
    assert main(["report", str(folder), "--out", str(tmp_path / "report.html")]) == 0
    assert any((tmp_path / "fig").glob("*.png")) and (tmp_path / "report.html").stat().st_size > 0
    assert any((tmp_path / "cmp").iterdir())


def test_the_servers_aggregation_is_priced_and_delays_the_next_messages(tmp_path):
    """The train replies' arrays are the server's aggregation work, priced by the server profile: the row's
    server_time_s is the server_work events' seconds, and the evaluate messages leave that long after the last
    train reply arrived (the strategy aggregates in between)."""
    path = app_folder(tmp_path, scenario(groups="- {profile: tiny, count: 2}", rounds=1,
                                         run_config="{num-server-rounds: 1, local-epochs: 1, fraction-train: 1.0, "
                                         "fraction-evaluate: 1.0}"),  # fmt: skip
                      {"tiny": TINY_PROFILE})
    folder = run(path, tmp_path / "runs")
    ev = events(folder)
    work = [e for e in ev if e["event"] == "server_work"]
    assert [w["what"] for w in work] == ["aggregate"]  # the train replies carry arrays, the evaluate ones do not
    (row,) = rows(folder)
    assert float(row["server_time_s"]) == pytest.approx(work[0]["duration"], abs=1e-6) and work[0]["duration"] > 0
    last_train_reply = max(e["t"] for e in ev if e["event"] == "upload" and e["t"] <= work[0]["t"])
    first_evaluate = min(e["t"] for e in ev if e["event"] == "dispatch" and e["message"] == "evaluate")
    assert work[0]["t"] == pytest.approx(last_train_reply, abs=1e-6)
    assert first_evaluate == pytest.approx(last_train_reply + work[0]["duration"], abs=2e-6)


def test_a_signal_stops_a_flower_run_at_the_apps_next_message(tmp_path):
    """SIGINT once the first row is written: no ClientApp starts any more (the one running finishes), the app is
    unwound at its next Grid call, and the run ends within 10 s with status interrupted and exit 128 + SIGINT, its
    rows so far kept."""
    import os
    import signal
    import subprocess
    import time

    path = app_folder(tmp_path, scenario(rounds=20, run_config="{num-server-rounds: 20, local-epochs: 1, "
                                         "fraction-train: 1.0, fraction-evaluate: 1.0}"))  # fmt: skip
    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "iotfl_sim.cli", "run", str(path), "--out", str(out), "--quiet"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            folders = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
            csv_file = folders[0] / "rounds.csv" if folders else None
            if csv_file is not None and csv_file.is_file() and len(csv_file.read_text().splitlines()) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        proc.wait(timeout=60)
        stopped_within = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr.read()
    assert stopped_within < 10, stopped_within
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert 1 <= len(rows(folder)) < 20
