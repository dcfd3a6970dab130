"""Where a training step's price and its real time part, kind by kind: the roofline's per-op prices from a
profile, beside the wall time of each ATen call of a real step on this machine.

    python benchmarks/opcost_breakdown.py --profile host.yaml --family ofa_mbv3 --threads 2

Each real call is timed inside a TorchDispatchMode (its Python bookkeeping, a few us a call, lands in the
"dispatch" row, not in the kinds), so the table says which kinds the model underprices; the whole step's time
without the timing mode is the bottom line. Use it on the machine the profile was measured on, quiet.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from iotfl_sim.fl.cost import opcost  # noqa: E402
from iotfl_sim.fl.cost.measure import FAMILY_SHAPES, _repeat  # noqa: E402


class CallTimer(TorchDispatchMode):
    """Wall seconds and calls per priced kind (views and allocations are free in the model and left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        dt = time.perf_counter() - t0
        if not (func.is_view or func in opcost._FREE):
            kind = opcost.kind_of(func, args)
            self.seconds[kind] += dt
            self.calls[kind] += 1
        return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--family", default="ofa_mbv3")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from iotfl_sim.fl.recipe import ModelRecipe
    from iotfl_sim.fl.submodel import SubmodelSpec
    from iotfl_sim.scenario import safe_yaml
    from iotfl_sim.scenario.profile import DeviceProfile

    profile = DeviceProfile.model_validate(safe_yaml.load(Path(a.profile).read_text(), a.profile).data)
    r = profile.rates()
    c, h, w = FAMILY_SHAPES[a.family]
    recipe, spec = ModelRecipe(a.family, 10, c, (h, w)), SubmodelSpec(1.0)
    opts = opcost.StepOptions(0.9, False, False)
    trace = opcost.step_trace(recipe, spec, a.batch, opts)
    per_op = trace.op_times(r.flops, r.mem_bw, r.op_overhead_s, r.kernels)
    priced: dict[str, float] = defaultdict(float)
    for name, t in zip(trace.names, per_op, strict=True):
        priced[name] += float(t)
    model = recipe.build(spec)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    x, y = torch.randn(a.batch, c, h, w), torch.randint(0, 10, (a.batch,))

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    whole = min(_repeat(step, 5.0))
    timer = CallTimer()
    step()
    with timer:
        for _ in range(a.steps):
            step()
    real = {k: v / a.steps for k, v in timer.seconds.items()}
    calls = {k: v // a.steps for k, v in timer.calls.items()}
    rows = sorted(set(priced) | set(real), key=lambda k: -real.get(k, 0.0))
    print(f"{a.family} step at batch {a.batch}, {a.threads} threads, profile {profile.name}")
    print(f"{'kind':36s} {'calls':>6s} {'real ms':>9s} {'priced ms':>9s} {'priced/real':>11s}")
    for k in rows:
        re_, pr = real.get(k, 0.0), priced.get(k, 0.0)
        ratio = pr / re_ if re_ > 0 else float("nan")
        print(f"{k:36s} {calls.get(k, 0):6d} {re_ * 1e3:9.2f} {pr * 1e3:9.2f} {ratio:11.2f}")
    print(f"{'sum of timed calls':36s} {'':6s} {sum(real.values()) * 1e3:9.2f} {sum(priced.values()) * 1e3:9.2f}")
    print(f"whole step without the timing mode: {whole * 1e3:.2f} ms; priced {trace.time(r.flops, r.mem_bw, r.op_overhead_s, r.kernels) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
