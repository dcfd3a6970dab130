"""Each device's own test data, for a method whose utility is "the average accuracy across devices using their
testing data" (FedX Section IV-D, fedx.txt:213): Acc = 1/N sum_u (1/|D_u^test|) sum_{x in D_u^test} 1[theta_u(x) = y].

A device's test data follows its own label distribution: over the classes it trains on, its train label
histogram; the classes the server holds (FedX's disjoint split) are in every device's test data at their share
of the test set ("Testing includes all classes", fedx.txt:196). Under FedX's IID split this is the test set's
own class mix; under a label-skewed split it is the device's. The accuracy on it is taken in expectation over
the draw of the test samples: sum_c p_u(c) a(c), with a(c) the model's accuracy on the test samples of class c,
so no sampling noise enters and every device's figure uses the whole test set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from iotfl_sim.fl.evaluate import class_correct


def label_distributions(
    train_labels: np.ndarray, parts: Sequence[np.ndarray], test_labels: np.ndarray, num_classes: int,
    server_classes: Sequence[int] | None,
) -> np.ndarray:  # fmt: skip
    """p[u, c]: device u's test label distribution (rows sum to 1): with s the server classes' share of the test
    set, (1 - s) x the device's train histogram over its classes, and s x the server classes' test mix."""
    test_counts = np.bincount(np.asarray(test_labels), minlength=num_classes).astype(np.float64)
    held = np.zeros(num_classes, dtype=bool)
    if server_classes:
        held[np.asarray(server_classes)] = True
    s = test_counts[held].sum() / test_counts.sum() if held.any() else 0.0
    server_mix = test_counts * held / test_counts[held].sum() if held.any() else np.zeros(num_classes)
    p = np.zeros((len(parts), num_classes))
    for u, idx in enumerate(parts):
        h = np.bincount(np.asarray(train_labels)[idx], minlength=num_classes).astype(np.float64)
        h[held] = 0.0
        own = h / h.sum() if h.sum() > 0 else np.zeros(num_classes)
        p[u] = (1.0 - s) * own + s * server_mix
    return p


def device_accuracy(p: np.ndarray, model_of: np.ndarray, class_acc: np.ndarray) -> float:
    """The mean over devices with a model (``model_of[u]`` >= 0, an index into ``class_acc``'s rows) of
    sum_c p[u, c] class_acc[model_of[u], c]; NaN when no device has one."""
    held = np.flatnonzero(np.asarray(model_of) >= 0)
    if held.size == 0:
        return float("nan")
    per_device = np.einsum("uc,uc->u", p[held], np.asarray(class_acc, dtype=np.float64)[np.asarray(model_of)[held]])
    return float(per_device.mean())


EVAL_BATCH = 100  # scoring batch (the engine's default evaluation batch)


class DeviceTest:
    """A run's per-device test data (``label_distributions`` from the strategy's context) and the figure
    ``acc_devices``: each model's per-class accuracy on the test set, weighted by each holder's distribution."""

    LABEL = "devices"

    def __init__(self, ctx: Any, server_classes: Sequence[int] | None) -> None:
        ds = ctx.data
        self.ctx = ctx
        self.p = label_distributions(ds.y_train.numpy(), ctx.parts, ds.y_test.numpy(), ctx.num_classes, server_classes)
        self.counts = np.bincount(ds.y_test.numpy(), minlength=ctx.num_classes).astype(np.float64)

    def figures(self, recipe: Any, models: Sequence[tuple], model_of: np.ndarray) -> dict[str, float]:
        """{"acc_devices": ...} for ``models`` (``(spec, state)`` each) and each device's model index (-1: none)."""
        ds, c = self.ctx.data, self.ctx
        acc = np.zeros((len(models), c.num_classes))
        for j, (spec, state) in enumerate(models):
            hits = class_correct(recipe, spec, state, c.calib_x, ds.x_test, ds.y_test, EVAL_BATCH, c.num_classes).numpy()
            acc[j] = np.divide(hits, self.counts, out=np.zeros(c.num_classes), where=self.counts > 0)
        return {f"acc_{self.LABEL}": device_accuracy(self.p, model_of, acc)}
