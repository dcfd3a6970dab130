"""FedX's device setting: the simulator's per-device and per-round times next to FedX Tables I-IV (CIFAR-10 rows).

Runs scenarios/fedx_device_setting.yaml (system-only, seconds) five times: FedX-S, FedX-M, FedX-L (every device on
one sub-network, all 66 devices in one round) for Tables I-III (training time of a ~750-sample round and the
round-trip communication time per device and sub-network), then FedX (medium/small mix) and Quantized FedAvg-L
(10 devices per round, 3 rounds) for Table IV (per-round on-device computation, communication, server
quantization, aggregation, fine-tuning and total). Reads the run's events.jsonl and rounds.csv only.

    python benchmarks/fedx_device_setting.py            # writes benchmarks/fedx_device_setting.md
    python benchmarks/fedx_device_setting.py --no-write
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "fedx_device_setting.yaml"
OUT_MD = ROOT / "benchmarks" / "fedx_device_setting.md"
GROUPS = {"pi5": "Raspberry Pi 5 (Table II)", "nano": "Jetson Nano, GPU (Table III)", "qcs605": "QCS605 AI kit (Table I)"}
# FedX Tables I-III, CIFAR-10 rows: (training s, communication s) per sub-network
PAPER_DEVICE = {
    "qcs605": {"small": (24.3, 2.05), "medium": (38.0, 2.69), "large": (49.8, 3.17)},
    "pi5": {"small": (7.5, 2.05), "medium": (11.6, 2.69), "large": (14.5, 3.17)},
    "nano": {"small": (5.6, 2.05), "medium": (8.5, 2.69), "large": (20.2, 3.17)},
}
# FedX Table IV, CIFAR-10: on-device computation, communication, server quantization, aggregation, fine-tuning, total
PAPER_ROUND = {
    "FedX": (49.8, 3.17, 4.36, 0.032, 4.11, 61.5),
    "Quantized FedAvg-L": (49.8, 3.17, 9.58, 0.032, None, 62.6),
}
COLUMNS = ("on-device computation", "communication", "server quantization", "aggregation", "fine-tuning", "total")


def run(sets: list[str], out: Path) -> Path:
    from iotfl_sim.cli import main

    args = ["run", str(SCENARIO), "--out", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    (path,) = list(out.iterdir())
    return path


def events(path: Path) -> list[dict]:
    return [json.loads(x) for x in (path / "events.jsonl").read_text().splitlines()]


def task_times(ev: list[dict]) -> list[dict]:
    """Per task: group-free record of download, training and upload seconds."""
    by: dict[tuple[int, int], dict] = defaultdict(dict)
    for e in ev:
        if e["device"] < 0:
            continue
        t = by[(e["round"], e["device"])]
        t[e["event"]] = e["t"]
        if e["event"] == "dispatch":
            t["level"] = e["level"]
    out = []
    for (rnd, d), t in by.items():
        if "upload" in t:
            out.append({"round": rnd, "device": d, "level": t["level"], "train": t["train_end"] - t["train_start"],
                        "comm": (t["arrive"] - t["dispatch"]) + (t["upload"] - t["train_end"])})  # fmt: skip
    return out


def group_of(device: int) -> str:
    return ("pi5", "nano", "qcs605")[device // 22]


def rel(ours: float, paper: float | None) -> str:
    return "-" if paper is None or paper == 0 else f"{(ours - paper) / paper:+.0%}"


SERVERS = {
    "gpu_server_titan_xp": "the bundled default, FedX's own station (TITAN Xp on a Xeon E5-2637 v4): compute from "
    "the datasheet, aggregation and QSGD rates this project's code measured on the 2-vCPU VM (sourced, see "
    "benchmarks/profile_derivations.md)",
    "cloud_cpu_2vcpu": "this 2-vCPU cloud VM, every number measured by `iotfl-sim profiles measure --server` "
    "(benchmarks/server_profiles.md)",
    "gpu_server_h200": "a lent NVIDIA H200 on a 16-core Xeon host, every number measured by `iotfl-sim profiles "
    "measure --server --device cuda` (benchmarks/gpu_server.md: FedX's fine-tuning round run for real there took "
    "1.07 s (1.40 s in an earlier measurement), the profile prices it at 1.16 s)",
}
LABELS = ("FedX", "Quantized FedAvg-L")
QFEDAVG = ["algorithm.mix={large: 1.0}", "algorithm.server_data=false"]


def table_iv(tmp: Path, server: str) -> list[str]:
    """Table IV with the server priced by the profile ``server``: per-round split and the end-to-end ratio."""
    lines = ["", f"## Table IV with `server.profile: {server}`", "", f"Server: {SERVERS.get(server, server)}. "
             "One round, 10 devices in parallel (rounds 2-3 averaged; round 1 also pretrains).", "",
             "| mechanism | " + " | ".join(f"{c} s (sim / paper / rel.)" for c in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]  # fmt: skip
    quant: dict[str, float] = {}
    total: dict[str, float] = {}
    for label in LABELS:
        path = run([f"server.profile={server}", *(QFEDAVG if label != "FedX" else [])], tmp / label.replace(" ", "_"))
        ev = events(path)
        tasks = task_times(ev)
        with open(path / "rounds.csv") as f:
            rows = list(csv.DictReader(f))
        vals = []
        for rnd in (1, 2):
            ts = [t for t in tasks if t["round"] == rnd]
            work: dict[str, float] = defaultdict(float)
            for e in ev:
                if e["event"] == "server_work" and e["round"] == rnd:
                    work[e["what"]] += e["duration"]
            vals.append((max(t["train"] for t in ts), max(t["comm"] for t in ts), work["quantize"] + work["dequantize"],
                         work["aggregate"], work["fine_tune"], float(rows[rnd]["round_time_s"])))  # fmt: skip
        mean = [sum(v[i] for v in vals) / len(vals) for i in range(len(COLUMNS))]
        quant[label], total[label] = mean[2], mean[-1]
        cells_iv = []
        for ours, paper in zip(mean, PAPER_ROUND[label], strict=True):
            p = "N/A" if paper is None else f"{paper:g}"
            cells_iv.append(f"{ours:.3g} / {p} / {rel(ours, paper)}")
        lines.append(f"| {label} | " + " | ".join(cells_iv) + " |")
    q = quant["Quantized FedAvg-L"] / quant["FedX"] if quant["FedX"] > 0 else float("nan")
    e2e = total["Quantized FedAvg-L"] / total["FedX"]
    paper_e2e = PAPER_ROUND["Quantized FedAvg-L"][-1] / PAPER_ROUND["FedX"][-1]
    lines += ["", f"Server quantization (encoding downloads and decoding uploads), Quantized FedAvg-L / FedX: simulated "
              f"{q:.2f}x, paper 9.58 / 4.36 = {9.58 / 4.36:.2f}x. End to end, Quantized FedAvg-L / FedX: simulated "
              f"{e2e:.2f}x, paper Table IV (CIFAR-10) {paper_e2e:.2f}x (the abstract's 1.36x is the best case over all "
              "baselines and datasets)."]  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--server-profiles", nargs="+", default=list(SERVERS), help="server profiles to price Table IV with")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    lines = ["# FedX device setting: simulated times next to FedX Tables I-IV (CIFAR-10 rows)", "",
             "Generated by `python benchmarks/fedx_device_setting.py` from `scenarios/fedx_device_setting.yaml` "
             "(system-only; its header states the set-up). Relative error = (simulated - paper) / paper.", ""]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        cells: dict[tuple[str, str], tuple[float, float]] = {}
        for level in ("small", "medium", "large"):
            path = run([f"algorithm.mix={{{level}: 1.0}}", "clients_per_round=66", "rounds=1"], Path(tmp) / level)
            per: dict[str, list[dict]] = defaultdict(list)
            for t in task_times(events(path)):
                per[group_of(t["device"])].append(t)
            for g, ts in per.items():
                cells[(g, level)] = (sum(t["train"] for t in ts) / len(ts), sum(t["comm"] for t in ts) / len(ts))
        lines += ["## Tables I-III: one local round (~757 samples, batch 32) and the round-trip communication", "",
                  "Training times use the roofline values fitted on these same cells in calibration_fedx.md, but "
                  "on that script's module: see the notes for why the simulator's ofa_mbv3 comes out slower; communication is QSGD at the sub-network's bits (small 11, medium 9, large "
                  "9) priced as params x bits / 8 + header at 30 Mb/s (system-only runs have no weights to encode).",
                  "", "| device | sub-network | training s (sim) | paper | rel. err | communication s (sim) | paper | rel. err |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for g, label in GROUPS.items():
            for level in ("small", "medium", "large"):
                tr, cm = cells[(g, level)]
                ptr, pcm = PAPER_DEVICE[g][level]
                lines.append(f"| {label} | {level} | {tr:.1f} | {ptr} | {rel(tr, ptr)} | {cm:.2f} | {pcm} | {rel(cm, pcm)} |")
    with tempfile.TemporaryDirectory() as tmp:
        for server in a.server_profiles:
            lines += table_iv(Path(tmp) / server, server)
    lines += ["", NOTES]
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.no_write:
        OUT_MD.write_text(text)


NOTES = """## Reading the numbers

- Training: the per-op overheads (Pi 5, QCS605) and the Nano's bandwidth fraction were fitted in
  calibration_fedx.md on that script's plain-torch module. The simulator's `ofa_mbv3` (nested, parameter names
  fixed across sub-networks, non-inplace activations, BatchNorm without running statistics) traces more ATen ops
  per training step (small sub-network with momentum, no weight decay: 994 here against 737 in
  calibration_fedx.md), so the cells come out 16-32 % slow (the Nano's large sub-network 7 % fast). Refitting on this module would make the column agree by construction and is left out on purpose.
- Communication: the simulated round trip is what the sub-network's parameters cost at its bits over 30 Mb/s;
  FedX does not state the bits behind its Tables I-III times, so the error mixes that unknown with the link model.
- Server work is priced by the server profile's per-operator model (issue 23): QSGD encoding and decoding and
  aggregation from rates this project's own code reached on a host CPU, fine-tuning as training steps of the
  large sub-network traced like a device's. That model was checked against real execution on a GPU: FedX's
  fine-tuning round run for real on a lent H200 took 1.07 s (1.40 s in an earlier measurement), and `gpu_server_h200` prices it at 1.16 s
  (benchmarks/gpu_server.md).
- What stays apart from FedX's measurements is FedX's own implementation, which is not public
  (../shared/reference/official_code_notes.md): its quantizer encodes about 3x slower than this project's
  (4.36 s against 1.3 s for the same values), and its 4.11 s fine-tuning of 750 samples is 3-7x what this
  project's fine-tuning costs on any of the three servers (a TITAN Xp's 3.8x lower peak does not close it: the
  round is dispatch-bound). On a CPU server the price is itself too low: the per-kind curves underprice OFA
  MobileNetV3's depthwise 5x5/7x7 and 1x1 convolutions 3-10x (benchmarks/gpu_server.md); `cloud_cpu_2vcpu`
  therefore carries its measured OFA MobileNetV3 step (`compute.measured_steps`, 423 ms against the roofline's
  128), which makes its fine-tuning 12 s, as the VM really takes (12.5 s measured under load), where the curves
  alone said 3.0 s. Matching them would mean slowing the model down to FedX's code, a fit to the paper
  that is left out on purpose. The ratios between mechanisms (quantization Quantized FedAvg-L / FedX) depend on
  the values quantized, not on the rates, and are the comparable figures.
- Table IV's on-device column: FedX reports 49.8 s (the large sub-network on the QCS605) for FedX too, although
  its mix is medium/small; the simulated FedX round's slowest device trains the medium sub-network on a QCS605.
"""

if __name__ == "__main__":
    main()
