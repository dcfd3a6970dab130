"""Checks of benchmarks/peers.py and peers_job.py: the peers' model is iotfl-sim's, the jobs are the ones the
issue names, and the memory of a process tree is measured."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers  # noqa: E402
from peers_job import PlainCNN  # noqa: E402

from iotfl_sim.fl.recipe import ModelRecipe  # noqa: E402
from iotfl_sim.fl.submodel import SubmodelSpec  # noqa: E402


@pytest.mark.parametrize("family,classes", [("conv", 10), ("cnn_small", 62)])
def test_peer_model_is_iotfl_sims_model(family, classes):
    torch.manual_seed(0)
    ours = ModelRecipe(family, classes, 1, (28, 28), "none", False).build(SubmodelSpec(1.0))
    peer = PlainCNN(family, 1, classes)
    theirs, mine = list(ours.parameters()), list(peer.parameters())
    assert [p.shape for p in theirs] == [p.shape for p in mine]
    assert not peer.classifier.bias.any()  # both zero the classifier's bias at init
    with torch.no_grad():
        for a, b in zip(theirs, mine, strict=True):
            b.copy_(a)
    x = torch.randn(4, 1, 28, 28)
    ours.eval()
    peer.eval()
    assert torch.allclose(ours(x), peer(x), atol=1e-6, rtol=0)


def test_jobs_are_the_issues():
    conv = peers.Job.of("conv", peers.conv_scenario(3))
    assert (conv.dataset, conv.family, conv.devices, conv.per_round, conv.epochs, conv.batch) == ("mnist", "conv", 100, 10, 1, 50)
    # executors.py leaves clipping out, so iotfl-sim's default (local.clip_grad_norm: 1.0) holds and the peers clip too
    assert (conv.lr, conv.momentum, conv.clip, conv.rounds) == (0.05, 0.9, 1.0, 3)
    iot = peers.Job.of("iot", peers.iot_scenario(5))
    assert (iot.dataset, iot.family, iot.devices, iot.per_round, iot.rounds) == ("femnist", "cnn_small", 1000, 100, 5)
    assert "executor" not in peers.conv_scenario(3) and "executor" not in peers.iot_scenario(5)
    assert peers.Job.loads(iot.dumps()) == iot


def test_tree_sampler_sees_a_grandchild_s_memory():
    # a child that starts a grandchild touching 200 MiB: the sampler must find it through the tree
    grandchild = "b = b'x' * (200 << 20); import time; time.sleep(2.5)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    sampler = peers.TreeSampler()
    sampler.start()
    proc = subprocess.Popen([sys.executable, "-c", child])
    time.sleep(0.3)
    assert proc.pid in peers.descendants(peers.os.getpid())
    proc.wait()
    sampler.stop()
    assert sampler.peak_procs >= 2
    assert sampler.peak_kb >= 200 * 1024
    assert peers.memory_kb(peers.os.getpid())[0] > 0


def test_report_ratios_and_verdicts():
    # conv job: iotfl-sim's fastest 10 s, Flower's 25 s -> 2.50x (target 2x met); memory medians 100 vs 350 MB ->
    # 3.50x (target 4x NOT met); accuracies 0.40 vs 0.405 -> 0.50 points (within 1)
    def r(side, rep, wall, mb, acc):
        return peers.Result("conv", side, rep, "t", (0.1, 0.2, 0.3), wall, wall, mb, "PSS", 1, [acc], [2.0], 0)

    results = [r("iotfl-sim", 0, 12.0, 100, 0.40), r("flower", 0, 25.0, 350, 0.405),
               r("iotfl-sim", 1, 10.0, 100, 0.40), r("flower", 1, 30.0, 350, 0.405)]
    args = peers.argparse.Namespace(repeat=2, argv=["--repeat", "2"], flgo_threads=1, venvs=peers.VENVS)
    text = peers.report(results, args, {"conv": 3}, {"iotfl-sim": "x"}, "abc", "t0", "t1")
    assert "iotfl-sim is **2.50x** faster (fastest runs; medians 2.50x)" in text  # 27.5 / 11.0 = 2.50 as well
    assert "Speed target >= 2x: **met**" in text
    assert "uses **3.50x** less memory" in text and "Memory target <= 1/4 of Flower's: **NOT met**" in text
    assert "differ by 0.50 points (within 1 point)" in text
    assert "SMOKE RUN" in text  # fewer than 3 repetitions
