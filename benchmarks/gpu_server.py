"""Measure a GPU machine as a server profile, and check the profile against a real FedX fine-tuning round on it.

    python benchmarks/gpu_server.py --name gpu_server_h200 --out-dir OUT     # on the GPU machine

1. ``iotfl-sim profiles measure NAME --server --device cuda --family ofa_mbv3``: compute (peak FLOP/s, bandwidth,
   per-op overhead, kernel curves) on the GPU; aggregation and QSGD rates on the host CPU, where this project's
   server does them; power from ``nvidia-smi`` (idle draw before, the highest draw sampled during the training
   check) rather than a datasheet.
2. FedX's fine-tuning (eq. 5: one epoch of SGD over 750 server samples at batch 32, the L2 pull towards the
   aggregate, the ``large`` OFA MobileNetV3 sub-network at CIFAR-10 shapes) run for real with this project's
   ``fl.server_train.nested_sgd`` on the GPU and on the host CPU, next to the price the measured profile gives
   the same work (``sim.server_cost.ServerCost``, the model a simulated run uses).

Writes NAME.yaml and gpu_server.md into --out-dir (benchmarks/gpu_server.md is the copy recorded in the repo).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FINETUNE_SAMPLES, FINETUNE_BATCH, GAMMA, LR = 750, 32, 1e-4, 0.01  # FedX's fine-tuning (fedx.py, eq. 5)


def smi(query: str) -> list[str]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True
    )
    return [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]


class PowerSampler:
    """Samples the board's power draw every 100 ms in a thread while the block runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(float(smi("power.draw")[0]))
            except (OSError, ValueError, subprocess.CalledProcessError):
                return
            self._stop.wait(0.1)

    def __enter__(self) -> PowerSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def fine_tune_seconds(device: str, repeats: int) -> list[float]:
    """Wall seconds of FedX's fine-tuning round run by nested_sgd on ``device`` (after one warm-up round)."""
    from iotfl_sim.algorithms.fedx import fedx_levels
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.server_train import nested_sgd

    recipe = ModelRecipe("ofa_mbv3", 10, 3, (32, 32))
    spec = fedx_levels("ofa_mbv3")["large"]
    torch.manual_seed(0)
    state = {k: v.detach().to(device) for k, v in recipe.build(spec).state_dict().items()}
    x = torch.randn(FINETUNE_SAMPLES, 3, 32, 32).to(device)
    y = torch.randint(0, 10, (FINETUNE_SAMPLES,)).to(device)
    times = []
    for i in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        nested_sgd(recipe, [spec], state, x, y, epochs=1, batch_size=FINETUNE_BATCH, lr=LR, seed=i, ref=state, gamma=GAMMA)
        if device == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    return times


def priced_fine_tune(profile_path: Path) -> float:
    from iotfl_sim.algorithms.base import TrainWork
    from iotfl_sim.algorithms.fedx import fedx_levels
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.scenario import safe_yaml
    from iotfl_sim.scenario.profile import DeviceProfile
    from iotfl_sim.sim.server_cost import ServerCost

    profile = DeviceProfile.model_validate(safe_yaml.load(profile_path.read_text(), str(profile_path)).data)
    recipe = ModelRecipe("ofa_mbv3", 10, 3, (32, 32))
    work = TrainWork(recipe, fedx_levels("ofa_mbv3")["large"], FINETUNE_SAMPLES, 1, FINETUNE_BATCH, 0.0, True)
    return ServerCost(profile).price(work).seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="gpu_server")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget of `profiles measure`")
    ap.add_argument("--repeats", type=int, default=3, help="timed fine-tuning rounds per device (after a warm-up)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu_server.py: PyTorch sees no CUDA GPU here; run it on the GPU machine", file=sys.stderr)
        return 2
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = out_dir / f"{a.name}.yaml"
    gpu, driver, limit_w = smi("name,driver_version,power.limit")
    idle_w = float(smi("power.draw")[0])
    from iotfl_sim.cli import main as cli

    with PowerSampler() as power:
        t0 = time.perf_counter()
        rc = cli(["profiles", "measure", a.name, "--server", "--device", "cuda", "--family", "ofa_mbv3",
                  "--seconds", str(a.seconds), "--idle-w", f"{idle_w:.0f}", "--train-w", limit_w, "--out", str(profile)])  # fmt: skip
        measure_s = time.perf_counter() - t0
    if rc:
        return rc
    busy_w = max(power.samples, default=float("nan"))
    gpu_times = fine_tune_seconds("cuda", a.repeats)
    cpu_times = fine_tune_seconds("cpu", 1)
    priced = priced_fine_tune(profile)
    import yaml

    prof = yaml.safe_load(profile.read_text())
    prof["sources"] = [
        f"power: idle_w is nvidia-smi's power.draw before measuring ({idle_w:.0f} W), train_w the board's power.limit "
        f"({limit_w} W); the highest draw sampled while measuring was {busy_w:.0f} W"
        if s == "power: given on the command line" else s
        for s in prof["sources"]
    ]
    profile.write_text(yaml.safe_dump(prof, sort_keys=False, width=200))
    c, w = prof["compute"], prof["server_work"]
    med_gpu = statistics.median(gpu_times)
    lines = [
        f"# GPU server profile `{a.name}`, measured", "",
        f"`python benchmarks/gpu_server.py --name {a.name}` on a lent {gpu} (driver {driver}, torch {torch.__version__}, "
        f"host {platform.machine()} with {torch.get_num_threads()} torch threads); `profiles measure` took "
        f"{measure_s:.0f} s.", "",
        "| quantity | measured |", "|---|---|",
        f"| compute.flops (fp32 conv, fwd+bwd) | {c['flops'] / 1e12:.2f} TFLOP/s |",
        f"| compute.mem_bw_gbs | {c['mem_bw_gbs']:.0f} GB/s |",
        f"| compute.op_overhead_us | {c['op_overhead_us']:.1f} us |",
        f"| server_work.aggregate_gbs (host CPU) | {w['aggregate_gbs']:.3g} GB/s |",
        f"| server_work.qsgd_encode_values_per_s (host CPU) | {w['qsgd_encode_values_per_s'] / 1e6:.3g} M values/s |",
        f"| server_work.qsgd_decode_values_per_s (host CPU) | {w['qsgd_decode_values_per_s'] / 1e6:.3g} M values/s |",
        f"| power: idle draw / board limit / highest draw sampled | {idle_w:.0f} / {limit_w} / {busy_w:.0f} W |",
        "", "## FedX fine-tuning round (750 samples, batch 32, large sub-network, eq. 5's L2 pull)", "",
        "| | seconds |", "|---|---|",
        f"| run for real on the GPU (`nested_sgd`, median of {len(gpu_times)}) | {med_gpu:.3f} "
        f"({', '.join(f'{t:.3f}' for t in gpu_times)}) |",
        f"| run for real on the host CPU ({torch.get_num_threads()} threads, 1 round) | {cpu_times[0]:.3f} |",
        f"| priced by the measured profile (`ServerCost`, what a simulated run charges) | {priced:.3f} "
        f"({priced / med_gpu:.2f}x the GPU's real time) |",
        "| FedX Table IV (CIFAR-10), TITAN Xp | 4.11 |",
        "", "The profile's `sources:`:", "", *(f"- {s}" for s in prof["sources"]), "",
    ]  # fmt: skip
    md = "\n".join(lines)
    (out_dir / "gpu_server.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
