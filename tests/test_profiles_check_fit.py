"""`iotfl-sim profiles check` and `profiles fit` (issue 46): predictions beside measured training, derived by hand;
a fit that recovers known parameters; measurement files refused with one line naming the row and column."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from iotfl_sim.cli import main
from iotfl_sim.fl.cost import check, fit
from iotfl_sim.fl.cost.corpus import MAX_FILE_BYTES, MAX_ROWS, CorpusError, Measurement, read_corpus

HEADER = "row,device,device_class,power_mode,profile,model,width,input_shape,classes,batch_size,steps,time,energy,power,how_read,source"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("IOTFL_PROFILES", raising=False)


def profile_yaml(path: Path, flops: float, mem_bw_gbs: float, op_overhead_us: float, train_w: float) -> Path:
    path.write_text(yaml.safe_dump({
        "name": path.stem, "device_class": "sbc",
        "compute": {"flops": flops, "mem_bw_gbs": mem_bw_gbs, "op_overhead_us": op_overhead_us, "jitter": {"dist": "none"}},
        "memory": {"total_mb": 1024, "free_mb": 512}, "power": {"idle_w": 1.0, "train_w": train_w, "tx_w": 0.5, "rx_w": 0.4},
        "link": {"radio": "wifi", "down_mbps": 10, "up_mbps": 10}, "sources": ["test profile"],
    }))  # fmt: skip
    return path


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and err.endswith("\n"), err
    (line,) = err.splitlines()
    assert line.startswith("error: "), line
    return line


# ------------------------------------------------------------------------------------------------ by hand

# The mlp of 1 x 28 x 28 inputs: Linear(784, 200), Scaler, BatchNorm1d, ReLU, Linear(200, 200), Scaler, BatchNorm1d,
# ReLU, Linear(200, 10). The cost model counts 2 FLOPs per multiply-add of a matmul and 1 per output element of every
# other op (fl/cost/opcost.py's docstring). One SGD step with momentum at batch b:
MM = 784 * 200 + 200 * 200 + 200 * 10  # multiply-adds of one sample's forward pass
PARAMS = MM + 200 + 200 + 10 + 2 * (200 + 200)  # weights, biases, two batch norms' scale and shift: 200,010


def mlp_step_flops(b: int) -> int:
    forward_mm = 2 * b * MM
    # backward: every weight's gradient (one forward's FLOPs) and the inputs' gradient of layers 2 and 3 (layer 1's
    # input needs none)
    backward_mm = 2 * b * MM + 2 * b * (200 * 200 + 200 * 10)
    hidden = b * 200
    forward_rest = (
        2 * hidden  # Scaler: x / rate
        + 2 * (hidden + 200 + 200)  # native_batch_norm: the output, the saved mean and inverse std
        + 2 * hidden  # relu
        + b * 10 + 2 + 1  # log_softmax, nll_loss (the loss and its total weight), Python's sum adding 0 to it
    )
    backward_rest = (
        1 + b * 10 + b * 10  # ones_like (the loss's gradient), nll_loss_backward, log_softmax backward
        + 10 + 200 + 200  # the biases' gradients: a sum over the batch
        + 2 * hidden  # relu backward
        + 2 * (hidden + 200 + 200)  # batch norm backward: the input's, the scale's and the shift's gradients
        + 2 * hidden  # Scaler backward
    )
    optimizer = 3 * PARAMS  # momentum buffer mul_, add_ of the gradient, the parameter's add_
    return forward_mm + backward_mm + forward_rest + backward_rest + optimizer


def test_the_hand_count_is_what_the_model_holds():
    """The two counts used below, written out: 28,814,204 FLOPs at batch 32, 7,655,084 at batch 8."""
    assert mlp_step_flops(32) == 28_814_204
    assert mlp_step_flops(8) == 7_655_084


def test_check_prints_the_hand_derived_errors_of_a_two_row_file(tmp_path, monkeypatch, capsys):
    """A profile of 1 GFLOP/s with no per-op overhead and a bandwidth no op is bound by (1e9 GB/s): a step takes its
    FLOPs / 1e9 s. Row a: 5 steps at batch 32 measured 0.2 s and 1 W; row b: 10 steps at batch 8, 100 ms and 150 mJ;
    training power 2 W."""
    monkeypatch.chdir(tmp_path)
    profile_yaml(tmp_path / "hand.yaml", 1e9, 1e9, 0.0, 2.0)
    (tmp_path / "two.csv").write_text(
        HEADER + "\n"
        "a,board,sbc,,,mlp,1,1x28x28,10,32,5,0.2 s,,1 W,table,hand\n"
        "b,board,mcu,,,mlp,1,1x28x28,10,8,10,100 ms,150 mJ,,table,hand\n"
    )
    t_a, t_b = 5 * mlp_step_flops(32) / 1e9, 10 * mlp_step_flops(8) / 1e9  # 0.14407102 s, 0.07655084 s
    err_t = {"a": t_a / 0.2 - 1, "b": t_b / 0.1 - 1}  # -27.96 %, -23.45 %
    err_e = {"a": 2 * t_a / (1 * 0.2) - 1, "b": 2 * t_b / 0.150 - 1}  # +44.07 %, +2.07 %
    assert main(["profiles", "check", "hand.yaml", "--against", "two.csv", "--csv", "rows.csv"]) == 0
    out = capsys.readouterr().out
    for r in "ab":
        (line,) = [x for x in out.splitlines() if x.startswith(f"two.csv:{r} ")]
        assert re.findall(r"[+-]\d+\.\d %", line) == [f"{100 * err_t[r]:+.1f} %", f"{100 * err_e[r]:+.1f} %"], line
    assert [f"{100 * e:+.1f} %" for e in (*err_t.values(), *err_e.values())] == ["-28.0 %", "-23.4 %", "+44.1 %", "+2.1 %"]
    (overall,) = [x for x in out.splitlines() if x.startswith("all ")]
    med_t, med_e = (abs(err_t["a"]) + abs(err_t["b"])) / 2, (abs(err_e["a"]) + abs(err_e["b"])) / 2
    assert f"{100 * med_t:.1f} %    {100 * abs(err_t['a']):.1f} % (two.csv:a)" in overall
    assert f"{100 * med_e:.1f} %    {100 * abs(err_e['a']):.1f} % (two.csv:a)" in overall
    assert "(P): 1 row(s) publish power" in out  # row a's energy is its power x its time
    with open("rows.csv", newline="") as fh:
        rows = {r["row"]: r for r in csv.DictReader(fh)}
    assert float(rows["a"]["predicted_time_s"]) == pytest.approx(t_a, rel=1e-12)
    assert float(rows["b"]["predicted_energy_j"]) == pytest.approx(2 * t_b, rel=1e-12)
    assert float(rows["a"]["measured_energy_j"]) == pytest.approx(0.2) and rows["a"]["energy_from_power"] == "1"
    assert float(rows["b"]["time_error"]) == pytest.approx(err_t["b"], rel=1e-12)


def test_check_plot_writes_an_image(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    profile_yaml(tmp_path / "hand.yaml", 1e9, 1e9, 0.0, 2.0)
    (tmp_path / "one.csv").write_text(HEADER + "\na,board,sbc,,,mlp,1,1x8x8,10,4,2,0.01 s,,,table,hand\n")
    assert main(["profiles", "check", "hand.yaml", "--against", "one.csv", "--plot", "p.png"]) == 0
    assert Path("p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote p.png" in capsys.readouterr().out


def test_check_auto_prices_each_row_on_its_own_profile_and_names_an_unknown_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    profile_yaml(tmp_path / "slow.yaml", 1e9, 1e9, 0.0, 2.0)
    profile_yaml(tmp_path / "fast.yaml", 2e9, 1e9, 0.0, 2.0)
    rows = "a,b,sbc,,slow.yaml,mlp,1,1x8x8,10,4,2,1 s,,,t,s\nb,b,sbc,,fast.yaml,mlp,1,1x8x8,10,4,2,1 s,,,t,s\nc,b,sbc,,,mlp,1,1x8x8,10,4,2,1 s,,,t,s\n"
    (tmp_path / "c.csv").write_text(HEADER + "\n" + rows)
    assert main(["profiles", "check", "auto", "--against", "c.csv", "--csv", "out.csv"]) == 0
    assert "not checked (1 rows name no profile): c.csv:c" in capsys.readouterr().out
    with open("out.csv", newline="") as fh:
        got = {r["row"]: float(r["predicted_time_s"]) for r in csv.DictReader(fh)}
    assert set(got) == {"a", "b"} and got["a"] == pytest.approx(2 * got["b"], rel=1e-12)  # half the FLOP/s
    (tmp_path / "d.csv").write_text(HEADER + "\na,b,sbc,,no_such_board,mlp,1,1x8x8,10,4,2,1 s,,,t,s\n")
    line = one_error_line(main(["profiles", "check", "auto", "--against", "d.csv"]), *capsys.readouterr())
    assert "row 'a' (line 2), column profile" in line and "no_such_board" in line


def test_a_row_power_mode_the_profile_has_is_priced_in_it():
    from iotfl_sim.scenario.loader import load_profile

    nano = load_profile("jetson_nano")
    m = Measurement("f.csv", 2, "r", "Nano", "edge_gpu", "5W", "", "mlp", 1.0, (1, 8, 8), 10, 4, 2, 1.0, None, 4.0, "t", "s")
    five = check.check_row(m, nano)
    assert five.mode == "5w" and five.energy_j == pytest.approx(4.5 * five.time_s)  # the 5w mode's train_w
    other = check.check_row(Measurement(**{**m.__dict__, "power_mode": "15W"}), nano)
    assert other.mode == "" and "not one of jetson_nano's" in other.note and other.energy_j == pytest.approx(7.0 * other.time_s)


# ----------------------------------------------------------------------------------------------------- fit

TRUE = {"flops": 2.0e10, "mem_bw_gbs": 6.0, "op_overhead_us": 40.0, "train_w": 5.0}
# workloads whose times depend on each parameter differently: overhead-bound, memory-bound and compute-bound steps
LOADS = [("mlp", 1.0, (1, 28, 28), 1), ("mlp", 1.0, (1, 28, 28), 64), ("cnn_small", 1.0, (3, 32, 32), 32),
         ("conv", 0.5, (3, 32, 32), 8), ("cnn2", 1.0, (1, 28, 28), 16)]  # fmt: skip


def synthetic_rows(tmp_path: Path) -> Path:
    """Measurements made by the model itself with the TRUE parameters (time and energy; some rows give power)."""
    from iotfl_sim.scenario.loader import load_profile

    true = load_profile(str(profile_yaml(tmp_path / "true.yaml", **TRUE)))
    lines = [HEADER]
    for i, (fam, w, shape, b) in enumerate(LOADS):
        for steps in (3, 7):
            m = Measurement("x", 0, "", "", "sbc", "", "", fam, w, shape, 10, b, steps, 1.0, None, None, "", "")
            t = check.check_row(m, true).time_s
            energy, power = (f"{TRUE['train_w'] * t!r} J", "") if steps == 3 else ("", f"{TRUE['train_w']} W")
            lines.append(f"r{i}s{steps},board,sbc,,,{fam},{w},{'x'.join(map(str, shape))},10,{b},{steps},{t!r} s,{energy},{power},derived,model")
    (tmp_path / "syn.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "syn.csv"


def test_fit_recovers_known_parameters_within_one_percent(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    synthetic_rows(tmp_path)
    # the start: every parameter off by 1.5-2.5x
    profile_yaml(tmp_path / "start.yaml", flops=3.2e10, mem_bw_gbs=3.0, op_overhead_us=100.0, train_w=7.5)
    assert main(["profiles", "fit", "start.yaml", "--against", "syn.csv", "--out", "fitted.yaml"]) == 0
    out = capsys.readouterr().out
    got = yaml.safe_load(Path("fitted.yaml").read_text())
    assert got["compute"]["flops"] == pytest.approx(TRUE["flops"], rel=0.01)
    assert got["compute"]["mem_bw_gbs"] == pytest.approx(TRUE["mem_bw_gbs"], rel=0.01)
    assert got["compute"]["op_overhead_us"] == pytest.approx(TRUE["op_overhead_us"], rel=0.01)
    assert got["power"]["train_w"] == pytest.approx(TRUE["train_w"], rel=0.01)
    assert got["name"] == "fitted" and "kept from the base" not in out
    assert "held-out (leave-one-workload-out" in out
    (src,) = [s for s in got["sources"] if "profiles fit start.yaml --against syn.csv" in s]
    assert "syn.csv:r0s3" in src and "compute.flops, compute.mem_bw_gbs, compute.op_overhead_us, power.train_w" in src


def test_a_fit_keeps_the_bases_kernel_rates_relative_to_its_dense_rate(tmp_path, monkeypatch, capsys):
    """A base whose grouped (depthwise) convolutions run at 1/10 of its dense FLOP/s; rows made by a board 2x as
    fast with its grouped convolutions at 1/10 of that. The fit scales the kernel rates with the dense rate, so it
    recovers the board's FLOP/s and writes the kernels at 1/10 of it (left absolute, the depthwise rows would pull
    the dense rate off)."""
    monkeypatch.chdir(tmp_path)

    def with_kernels(path: Path, flops: float) -> Path:
        profile_yaml(path, flops=flops, mem_bw_gbs=TRUE["mem_bw_gbs"], op_overhead_us=TRUE["op_overhead_us"], train_w=5.0)
        data = yaml.safe_load(path.read_text())
        data["compute"]["kernels"] = {k: {"flops": flops / 10} for k in ("convolution_grouped", "convolution_backward_grouped")}
        path.write_text(yaml.safe_dump(data))
        return path

    from iotfl_sim.scenario.loader import load_profile

    true = load_profile(str(with_kernels(tmp_path / "true.yaml", 2e10)))
    lines = [HEADER]
    for i, (fam, w, shape, b) in enumerate([("mobilenetv2", 0.25, (3, 32, 32), 8), *LOADS[1:4]]):
        m = Measurement("x", 0, "", "", "sbc", "", "", fam, w, shape, 10, b, 3, 1.0, None, None, "", "")
        t = check.check_row(m, true).time_s
        lines.append(f"r{i},board,sbc,,,{fam},{w},{'x'.join(map(str, shape))},10,{b},3,{t!r} s,,5 W,derived,model")
    Path("syn.csv").write_text("\n".join(lines) + "\n")
    with_kernels(tmp_path / "start.yaml", 1e10)
    assert main(["profiles", "fit", "start.yaml", "--against", "syn.csv", "--out", "fitted.yaml"]) == 0
    capsys.readouterr()
    got = yaml.safe_load(Path("fitted.yaml").read_text())
    flops = got["compute"]["flops"]
    assert flops == pytest.approx(2e10, rel=0.01)
    for k in ("convolution_grouped", "convolution_backward_grouped"):
        assert got["compute"]["kernels"][k]["flops"] == pytest.approx(flops / 10, rel=1e-4)
    assert any("compute.kernels FLOP/s of start scaled by 2" in x for x in got["sources"]), got["sources"]


def test_a_fitted_train_w_replaces_the_bases_activity_levels(tmp_path, monkeypatch, capsys):
    """A base with work-dependent power levels: the levels would override a fitted train_w (fl.cost.energy), so
    the fit drops them and says so, and the fitted profile charges train_w x time."""
    monkeypatch.chdir(tmp_path)
    synthetic_rows(tmp_path)
    start = profile_yaml(tmp_path / "start.yaml", flops=3.2e10, mem_bw_gbs=3.0, op_overhead_us=100.0, train_w=7.5)
    data = yaml.safe_load(start.read_text())
    data["power"].update(compute_w=9.0, memory_w=4.0)
    start.write_text(yaml.safe_dump(data))
    assert main(["profiles", "fit", "start.yaml", "--against", "syn.csv", "--out", "fitted.yaml"]) == 0
    capsys.readouterr()
    got = yaml.safe_load(Path("fitted.yaml").read_text())
    assert "compute_w" not in got["power"] and "memory_w" not in got["power"]
    assert any("power.compute_w, power.memory_w of start dropped" in x for x in got["sources"])
    from iotfl_sim.scenario.loader import load_profile

    m = Measurement("x", 0, "", "", "sbc", "", "", "mlp", 1.0, (1, 28, 28), 10, 8, 3, 1.0, None, None, "", "")
    row = check.check_row(m, load_profile(str(Path("fitted.yaml").resolve())))
    assert row.energy_j == pytest.approx(got["power"]["train_w"] * row.time_s, rel=1e-12)


def test_one_workload_fits_one_time_parameter_and_says_which_were_kept(tmp_path, monkeypatch, capsys):
    """Two step counts of one workload are one equation: FLOP/s and overhead trade off exactly."""
    monkeypatch.chdir(tmp_path)
    syn = synthetic_rows(tmp_path)
    Path("one.csv").write_text("".join(x for x in syn.read_text().splitlines(True) if x.startswith(("row,", "r2s"))))
    profile_yaml(tmp_path / "start.yaml", flops=3.2e10, mem_bw_gbs=3.0, op_overhead_us=100.0, train_w=7.5)
    assert main(["profiles", "fit", "start.yaml", "--against", "one.csv", "--out", "f.yaml"]) == 0
    out = capsys.readouterr().out
    assert out.count("kept from the base: the rows cannot separate it from flops") == 2, out
    assert "held-out: none (one workload" in out
    got = yaml.safe_load(Path("f.yaml").read_text())
    assert got["compute"]["mem_bw_gbs"] == 3.0 and got["compute"]["op_overhead_us"] == 100.0
    # asked for both, it refuses, naming one it cannot determine, and writes nothing
    code = main(["profiles", "fit", "start.yaml", "--against", "one.csv", "--out", "g.yaml", "--params", "flops,op_overhead"])
    line = one_error_line(code, *capsys.readouterr())
    assert "cannot determine" in line and "--params" in line and not Path("g.yaml").exists()


def test_synthetic_rows_are_recovered_in_process():
    """The fit itself (no files): from a start off by 2x, every parameter to 0.1 %."""
    from iotfl_sim.scenario.loader import load_profile

    base = load_profile("raspberry_pi_4b")
    true = check.with_values(base.rates(), flops=2e10, mem_bw=6e9, op_overhead_s=40e-6, train_w=5.0)
    rows = []
    for i, (fam, w, shape, b) in enumerate(LOADS):
        m = Measurement("s.csv", i, f"r{i}", "", "sbc", "", "", fam, w, shape, 10, b, 5, 1.0, None, 5.0, "", "")
        rows.append(Measurement(**{**m.__dict__, "time_s": check.predict_seconds(m, true)}))
    start = check.with_values(base.rates(), flops=4e10, mem_bw=3e9, op_overhead_s=80e-6)
    f = fit.fit(base, rows, start)
    assert f.rates.flops == pytest.approx(2e10, rel=1e-3) and f.rates.mem_bw == pytest.approx(6e9, rel=1e-3)
    assert f.rates.op_overhead_s == pytest.approx(40e-6, rel=1e-3) and f.rates.train_w == pytest.approx(5.0)
    held, short = fit.leave_one_workload_out(base, rows, start)
    assert short == 0 and max(abs(c.time_err) for c in held) < 1e-3  # the model predicts itself out of sample


# ----------------------------------------------------------------------------------------------- bad files

GOOD = "a,board,sbc,,,mlp,1,1x8x8,10,4,2,1 s,3 J,,table,hand"


def _replace(col: str, value: str) -> str:
    cells = GOOD.split(",")
    cells[HEADER.split(",").index(col)] = value
    return HEADER + "\n" + ",".join(cells) + "\n"


BAD = {
    "missing_columns": (HEADER.replace(",time", "").replace(",source", "") + "\n" + GOOD + "\n",
                        ["line 1 (the header)", "missing columns time, source", "add them"]),
    "unknown_column": (HEADER + ",Energy\n" + GOOD + ",3\n", ["line 1 (the header)", "column 'Energy'", "rename it"]),
    "negative_time": (_replace("time", "-3 s"), ["row 'a' (line 2), column time", "not a positive finite", "e.g. '10.9 s'"]),
    "nan_energy": (_replace("energy", "nan J"), ["row 'a' (line 2), column energy", "not a positive finite"]),
    "inf_power": (_replace("power", "inf W"), ["row 'a' (line 2), column power", "not a positive finite"]),
    "zero_time": (_replace("time", "0 ms"), ["row 'a' (line 2), column time", "not a positive finite"]),
    "nan_width": (_replace("width", "nan"), ["row 'a' (line 2), column width", "in (0, 1]"]),
    "zero_steps": (_replace("steps", "0"), ["row 'a' (line 2), column steps", "whole number from 1"]),
    "fractional_batch": (_replace("batch_size", "2.5"), ["row 'a' (line 2), column batch_size", "whole number"]),
    "unit_unknown": (_replace("time", "3 sec"), ["row 'a' (line 2), column time", "unit 'sec' is not one of s, ms, min, h"]),
    "unit_missing": (_replace("energy", "3"), ["row 'a' (line 2), column energy", "no unit (J, kJ, mJ, Wh, mWh)"]),
    "unit_case": (_replace("energy", "3 kj"), ["row 'a' (line 2), column energy", "unit 'kj'"]),
    "not_a_number": (_replace("power", "about 3 W"), ["row 'a' (line 2), column power", "not a number with a unit"]),
    "unknown_class": (_replace("device_class", "laptop"), ["row 'a' (line 2), column device_class", "mcu, sbc, edge_gpu, phone, server, other"]),
    "unknown_model": (_replace("model", "resnet50"), ["row 'a' (line 2), column model", "not a model family"]),
    "bad_shape": (_replace("input_shape", "32x32"), ["row 'a' (line 2), column input_shape", "'3x32x32'"]),
    "empty_source": (_replace("source", ""), ["row 'a' (line 2), column source", "empty"]),
    "duplicate_ids": (HEADER + "\n" + GOOD + "\n" + GOOD + "\n", ["row 'a' (line 3), column row", "used on line 2 too"]),
    "extra_cell": (HEADER + "\n" + GOOD + ",x\n", ["row 'a' (line 2), column after source", "17 cells"]),
    "header_only": (HEADER + "\n", ["a header and no rows"]),
    "empty": ("", ["empty file"]),
    "yaml_not_csv": ("name: board\ncompute:\n  flops: 1e9\n", ["line 1 (the header)", "not a column of the format"]),
    "unbuildable": (_replace("model", "conv").replace("1x8x8", "1x4x4"), ["row 'a' (line 2), column model", "cannot build conv"]),
}


def _bad_file(tmp_path: Path, case: str) -> Path:
    if case == "latin1":
        p = tmp_path / "m.csv"
        p.write_bytes((HEADER + "\n" + GOOD.replace("board", "b\xf6rd") + "\n").encode("latin-1"))
    elif case == "binary_png":
        p = tmp_path / "m.csv"
        p.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    elif case == "too_large":
        p = tmp_path / "m.csv"
        p.write_text(HEADER + "\n" + GOOD + "\n" + "#" * MAX_FILE_BYTES + "\n")
    elif case == "too_many_rows":
        p = tmp_path / "m.csv"
        p.write_text(HEADER + "\n" + "".join(GOOD.replace("a,", f"r{i},", 1) + "\n" for i in range(MAX_ROWS + 1)))
    elif case == "folder_without_csv":
        p = tmp_path / "folder"
        p.mkdir()
        (p / "notes.txt").write_text("x")
    else:
        p = tmp_path / "m.csv"
        p.write_text(BAD[case][0])
    return p


EXTRA = {
    "latin1": ["line 2 is not UTF-8", "save the file as UTF-8"],
    "binary_png": ["a binary file, not CSV text"],
    "too_large": ["over the limit of 4194304", "split"],
    "too_many_rows": [f"more than {MAX_ROWS} rows"],
    "folder_without_csv": ["a folder with no *.csv files"],
}


# the reader is shared: a few cases through fit suffice
CASES = [("check", c) for c in (*BAD, *EXTRA)] + [
    ("fit", c) for c in ("negative_time", "unit_unknown", "duplicate_ids", "binary_png", "missing_columns", "unbuildable")
]


@pytest.mark.parametrize(("command", "case"), CASES)
def test_a_bad_measurement_file_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, case, command):
    monkeypatch.chdir(tmp_path)
    path = _bad_file(tmp_path, case)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    extra = ["--csv", "t.csv", "--plot", "p.png"] if command == "check" else ["--out", "new.yaml"]
    code = main(["profiles", command, "raspberry_pi_4b", "--against", str(path), *extra])
    out, err = capsys.readouterr()
    line = one_error_line(code, out, err)
    assert out == ""
    for needle in BAD.get(case, ("", []))[1] or EXTRA[case]:
        assert needle in line, (needle, line)
    if case not in ("folder_without_csv", "too_large", "too_many_rows", "empty", "binary_png", "latin1", "header_only"):
        assert str(path) in line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written or changed


def test_an_existing_output_is_never_overwritten(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("m.csv").write_text(HEADER + "\n" + GOOD + "\n")
    Path("keep.yaml").write_text("mine\n")
    code = main(["profiles", "fit", "raspberry_pi_4b", "--against", "m.csv", "--out", "keep.yaml"])
    assert "keep.yaml already exists" in one_error_line(code, *capsys.readouterr())
    assert Path("keep.yaml").read_text() == "mine\n"
    code = main(["profiles", "check", "raspberry_pi_4b", "--against", "m.csv", "--plot", "new.yaml"])
    assert "does not end in .png" in one_error_line(code, *capsys.readouterr())


def test_a_folder_reads_every_csv_in_it_and_labels_rows_by_file(tmp_path):
    (tmp_path / "x.csv").write_text(HEADER + "\n" + GOOD + "\n")
    (tmp_path / "y.csv").write_text(HEADER + "\n" + GOOD + "\n")  # the same id in another file is another row
    rows = read_corpus(tmp_path)
    assert [m.label for m in rows] == ["x.csv:a", "y.csv:a"]
    assert rows[0].time_s == 1.0 and rows[0].energy_j == 3.0 and rows[0].input_shape == (1, 8, 8)


@pytest.mark.parametrize(("text", "seconds"), [("10.9 s", 10.9), ("250 ms", 0.25), ("2 min", 120.0), ("1.5 h", 5400.0)])
def test_time_units(tmp_path, text, seconds):
    (tmp_path / "u.csv").write_text(_replace("time", text))
    assert read_corpus(tmp_path / "u.csv")[0].time_s == pytest.approx(seconds)


@pytest.mark.parametrize(("col", "text", "si"), [
    ("energy", "68 J", 68.0), ("energy", "1.2 kJ", 1200.0), ("energy", "500 mJ", 0.5), ("energy", "2 Wh", 7200.0),
    ("energy", "10 mWh", 36.0), ("power", "6.2 W", 6.2), ("power", "350 mW", 0.35),
])  # fmt: skip
def test_energy_and_power_units(tmp_path, col, text, si):
    (tmp_path / "u.csv").write_text(_replace(col, text))
    m = read_corpus(tmp_path / "u.csv")[0]
    assert (m.energy_j if col == "energy" else m.power_w) == pytest.approx(si)


# ------------------------------------------------------------------------------- depth, samples, power_scope

FULL = "row,device,device_class,model,width,depth,input_shape,classes,batch_size,steps,samples,time,energy,power,power_scope,how_read,source"


def full_row(**cells: str) -> str:
    """One row of the full format: an mlp of 1x28x28 at batch 32, 3 steps, 0.2 s, 1 W, with ``cells`` replaced."""
    row = {"row": "a", "device": "board", "device_class": "sbc", "model": "mlp", "width": "1", "depth": "",
           "input_shape": "1x28x28", "classes": "10", "batch_size": "32", "steps": "3", "samples": "", "time": "0.2 s",
           "energy": "", "power": "1 W", "power_scope": "", "how_read": "table", "source": "hand"}  # fmt: skip
    row.update(cells)
    return ",".join(row[c] for c in FULL.split(","))


def test_samples_price_the_full_steps_and_one_step_of_the_remainder(tmp_path, monkeypatch, capsys):
    """70 samples at batch 32 over 3 steps: 2 steps of 32 and one of 6, each priced as the hand count says (1 GFLOP/s,
    no overhead); the same 3 steps without `samples` are 3 full steps."""
    monkeypatch.chdir(tmp_path)
    profile_yaml(tmp_path / "hand.yaml", 1e9, 1e9, 0.0, 2.0)
    Path("s.csv").write_text(FULL + "\n" + full_row(row="part", samples="70") + "\n" + full_row(row="full") + "\n")
    assert main(["profiles", "check", "hand.yaml", "--against", "s.csv", "--csv", "out.csv"]) == 0
    assert "x3 (70)" in capsys.readouterr().out  # the table names the partial step
    with open("out.csv", newline="") as fh:
        got = {r["row"]: r for r in csv.DictReader(fh)}
    part = (2 * mlp_step_flops(32) + mlp_step_flops(6)) / 1e9  # 0.0622... s
    assert float(got["part"]["predicted_time_s"]) == pytest.approx(part, rel=1e-12)
    assert float(got["full"]["predicted_time_s"]) == pytest.approx(3 * mlp_step_flops(32) / 1e9, rel=1e-12)
    assert got["part"]["samples"] == "70" and got["full"]["samples"] == "96"


@pytest.mark.parametrize(("samples", "ok"), [("65", True), ("96", True), ("64", False), ("97", False), ("0", False)])
def test_samples_must_end_in_a_partial_last_step(tmp_path, samples, ok):
    """3 steps of 32 cover 65 to 96 samples: 64 would be 2 steps, 97 a fourth."""
    (tmp_path / "s.csv").write_text(FULL + "\n" + full_row(samples=samples) + "\n")
    if ok:
        assert read_corpus(tmp_path / "s.csv")[0].samples_total == int(samples)
        return
    with pytest.raises(CorpusError) as e:
        read_corpus(tmp_path / "s.csv")
    assert "row 'a' (line 2), column samples" in str(e.value) and "\n" not in str(e.value)


def test_depth_prices_fedx_sub_network_as_fedx_builds_it(tmp_path):
    """An ofa_mbv3 row of depth 2 and width 3/6 is FedX's small sub-network (d2, e3) as algorithms.fedx builds it:
    the same seconds as pricing that spec, fewer than the full-depth net at the same width, and its model has
    the parameters FedX's Table reports for small with a 200-class head (2.41 M; without BN affine here 2.407 M)."""
    from iotfl_sim.algorithms.fedx import fedx_levels
    from iotfl_sim.fl.cost import opcost
    from iotfl_sim.fl.models.build import build_model
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.scenario.loader import load_profile

    rows = [
        full_row(row="d2", model="ofa_mbv3", width="0.5", depth="2", input_shape="3x16x16", batch_size="4", steps="2", samples="6"),
        full_row(row="full", model="ofa_mbv3", width="0.5", input_shape="3x16x16", batch_size="4", steps="2", samples="6"),
    ]
    (tmp_path / "d.csv").write_text(FULL + "\n" + "\n".join(rows) + "\n")
    d2, full = read_corpus(tmp_path / "d.csv")
    assert d2.depth == 2 and full.depth is None and d2.workload != full.workload
    assert check.spec_of(d2) == dataclasses.replace(fedx_levels("ofa_mbv3")["small"], name="")
    rates = load_profile("raspberry_pi_5").rates()
    small = opcost.device_train_seconds(
        ModelRecipe("ofa_mbv3", 10, 3, (16, 16)), fedx_levels("ofa_mbv3")["small"], 6, 1, 4, rates.flops,
        (rates.flops, rates.mem_bw, rates.op_overhead_s, rates.kernels, rates.steps), check.STEP,
    )  # fmt: skip
    assert check.predict_seconds(d2, rates) == small
    assert check.predict_seconds(full, rates) > 1.2 * small
    import torch

    with torch.device("meta"):
        net = build_model("ofa_mbv3", check.spec_of(d2), num_classes=200, in_channels=3, image_size=(16, 16))
    assert sum(p.numel() for p in net.parameters()) == pytest.approx(2.41e6, rel=0.01)


@pytest.mark.parametrize(("cells", "needles"), [
    ({"depth": "2"}, ["column depth", "mlp has no depth", "ofa_mbv3"]),
    ({"model": "ofa_mbv3", "input_shape": "3x32x32", "depth": "5"}, ["column depth", "whole number from 1 to 4"]),
    ({"model": "ofa_mbv3", "input_shape": "3x32x32", "depth": "2", "width": "0.55"}, ["column width", "e / 6"]),
    ({"power_scope": "wall"}, ["column power_scope", "'wall' is not a power scope", "board or rails"]),
    ({"device_class": "jetson"}, ["column device_class", "edge_gpu"]),
])  # fmt: skip
def test_a_bad_depth_or_power_scope_is_one_line_naming_row_and_column(tmp_path, monkeypatch, capsys, cells, needles):
    monkeypatch.chdir(tmp_path)
    Path("b.csv").write_text(FULL + "\n" + full_row(**cells) + "\n")
    line = one_error_line(main(["profiles", "check", "raspberry_pi_4b", "--against", "b.csv", "--csv", "o.csv"]), *capsys.readouterr())
    assert "b.csv: row 'a' (line 2)" in line and not Path("o.csv").exists()
    for n in needles:
        assert n in line, (n, line)


def test_rails_energy_is_summarised_apart_and_not_fitted_as_board_power(tmp_path, monkeypatch, capsys):
    """Two rows: board power 1 W, rails power 0.5 W. The board summary holds only the board row's energy error
    (2 W x t / (1 W x 0.2 s) - 1), the rails column only the rails row's; a fit sets train_w to the board row's 1 W,
    not the geometric mean with the rails row's 0.5 W."""
    monkeypatch.chdir(tmp_path)
    profile_yaml(tmp_path / "hand.yaml", 1e9, 1e9, 0.0, 2.0)
    rows = [full_row(row="b", power_scope="board"), full_row(row="r", power="500 mW", power_scope="rails", batch_size="8")]
    Path("p.csv").write_text(FULL + "\n" + "\n".join(rows) + "\n")
    assert main(["profiles", "check", "hand.yaml", "--against", "p.csv"]) == 0
    out = capsys.readouterr().out
    t_b, t_r = 3 * mlp_step_flops(32) / 1e9, 3 * mlp_step_flops(8) / 1e9
    e_b, e_r = 2 * t_b / 0.2 - 1, 2 * t_r / (0.5 * 0.2) - 1  # +116.1 %, -8.1 %
    (overall,) = [x for x in out.splitlines() if x.startswith("all ")]
    cells = re.findall(r"(\d+)\s+(\d+\.\d) %", overall)  # rows and median of time, board energy, rails energy
    assert cells[1:] == [("1", f"{100 * abs(e_b):.1f}"), ("1", f"{100 * abs(e_r):.1f}")], overall
    assert "(R): power_scope rails" in out and "(P) (R)" in out
    assert main(["profiles", "fit", "hand.yaml", "--against", "p.csv", "--out", "f.yaml", "--params", "flops,train_w"]) == 0
    assert yaml.safe_load(Path("f.yaml").read_text())["power"]["train_w"] == pytest.approx(1.0)
    Path("r.csv").write_text(FULL + "\n" + rows[1] + "\n")
    code = main(["profiles", "fit", "hand.yaml", "--against", "r.csv", "--out", "g.yaml", "--params", "flops,train_w"])
    capsys.readouterr()
    assert code == 2 and not Path("g.yaml").exists()
