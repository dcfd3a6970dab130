"""Measure this machine as a server profile and record it: the source of device_profiles/cloud_cpu_2vcpu.yaml and
of gpu_server_titan_xp's QSGD rates (benchmarks/profile_derivations.md).

    python benchmarks/server_profiles.py                 # measures, writes benchmarks/server_profiles.md
    python benchmarks/server_profiles.py --profile-out device_profiles/cloud_cpu_2vcpu.yaml

Runs `iotfl-sim profiles measure cloud_cpu_2vcpu --server` (2 torch threads, the VM's two vCPUs) and records the
load average before and after: a measurement taken on a busy machine is not one to ship.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT_MD = ROOT / "benchmarks" / "server_profiles.md"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--family", default="ofa_mbv3", help="the model whose real step is recorded (FedX's fine-tuning)")
    ap.add_argument("--profile-out", help="also write the measured profile here (a new file)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    from iotfl_sim.cli import main as cli

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cloud_cpu_2vcpu.yaml"
        args = ["profiles", "measure", "cloud_cpu_2vcpu", "--server", "--seconds", str(a.seconds),
                "--threads", str(a.threads), "--train-w", "40", "--idle-w", "10", "--out", str(out),
                "--family", a.family]  # fmt: skip
        assert cli(args) == 0
        text = out.read_text()
    load_after = os.getloadavg()
    prof = yaml.safe_load(text)
    c, w = prof["compute"], prof["server_work"]
    lines = [
        "# Server profiles measured here", "",
        f"`python benchmarks/server_profiles.py` on {platform.node()} ({platform.machine()}), "
        f"`iotfl-sim profiles measure cloud_cpu_2vcpu --server --seconds {a.seconds:g} --threads {a.threads} --family {a.family}`. "
        f"Load average before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f} (1 / 5 / 15 min).", "",
        "| quantity | measured |", "|---|---|",
        f"| compute.flops | {c['flops'] / 1e9:.1f} GFLOP/s |",
        f"| compute.mem_bw_gbs | {c['mem_bw_gbs']:.2f} GB/s |",
        f"| compute.op_overhead_us | {c['op_overhead_us']:.1f} us |",
        f"| server_work.aggregate_gbs | {w['aggregate_gbs']:.3g} GB/s |",
        f"| server_work.aggregate_tensor_us | {w['aggregate_tensor_us']:.3g} us |",
        f"| server_work.qsgd_encode_values_per_s | {w['qsgd_encode_values_per_s'] / 1e6:.3g} M values/s |",
        f"| server_work.qsgd_encode_tensor_us | {w['qsgd_encode_tensor_us']:.3g} us |",
        f"| server_work.qsgd_decode_values_per_s | {w['qsgd_decode_values_per_s'] / 1e6:.3g} M values/s |",
        f"| server_work.qsgd_decode_tensor_us | {w['qsgd_decode_tensor_us']:.3g} us |",
        "", "How each was taken (the profile's `sources:`):", "",
        *(f"- {s}" for s in prof["sources"]), "",
    ]  # fmt: skip
    md = "\n".join(lines)
    print(md)
    if a.profile_out:
        with open(a.profile_out, "x") as f:
            f.write(text)
    if not a.no_write:
        OUT_MD.write_text(md)


if __name__ == "__main__":
    main()
