"""Evaluation with static BatchNorm (HeteroFL's sBN).

Models train without running statistics. Before testing, a copy with tracking is given the
weights and a no-grad, train-mode pass over training data with momentum=None (a cumulative
average) computes the statistics used for testing only. The Scaler is kept in eval mode (identity)
during that pass so the statistics match what the layer sees at test time; for the global model the
Scaler ratio is 1 and this is exactly HeteroFL's procedure. The pass records each batch's figures and
accumulates them afterwards (``running_statistics``), with the same bits, so executors can split it.

Image models evaluate in the layout ``fl.layout`` gives them (channels_last), in batches of about 100, which
beat batches of 1,000 on a CPU (activations stay in cache). Scoring runs a twin of each model
(``fl.scoring_model``: each ConvUnit's BatchNorm folded into its convolution, its ReLU in place; the same function
with the fold's own last-bit rounding). Results are the same whichever executor scores.
"""

from __future__ import annotations

import copy
import threading

import torch
from torch import nn

from iotfl_sim.fl.data.images import Images
from iotfl_sim.fl.layout import batch_layout, model_layout
from iotfl_sim.fl.objectives import final_logits
from iotfl_sim.fl.recipe import ModelRecipe
from iotfl_sim.fl.scoring_model import scoring_model
from iotfl_sim.fl.submodel import SubmodelSpec
from iotfl_sim.fl.train import load_weights

State = dict[str, torch.Tensor]


_SKELETONS = threading.local()  # per thread: the thread executor's workers each load states into their own
_MAX_SKELETONS = 64
_PROTOTYPES: dict[tuple[ModelRecipe, SubmodelSpec], nn.Module] = {}
_PROTOTYPES_LOCK = threading.Lock()


def eval_prototype(recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
    """The evaluation model of ``spec`` as built, never loaded or run: what ``eval_skeleton`` copies and what
    questions about its structure (``has_batch_norm``, ``shared_layers``) read. Built once per process: building a
    model draws from torch's global RNG (its initialisation), a copy draws nothing, so an evaluation running beside
    the caller's next training (``Learning.start_evaluation``, which builds the prototypes first) cannot move the
    stream a model with dropout trains from."""
    key = (recipe, spec)
    with _PROTOTYPES_LOCK:
        model = _PROTOTYPES.get(key)
        if model is None:
            if len(_PROTOTYPES) >= _MAX_SKELETONS:
                _PROTOTYPES.clear()
            model = _PROTOTYPES[key] = model_layout(recipe.build(spec, track_bn=True))
    return model


def forget_prototypes() -> None:
    """Drop every prototype: a run's end (``sim.engine``), so a process running many keeps none of their models."""
    with _PROTOTYPES_LOCK:
        _PROTOTYPES.clear()


def eval_skeleton(recipe: ModelRecipe, spec: SubmodelSpec) -> nn.Module:
    """The evaluation model of ``spec`` (BatchNorm with running statistics), a copy of its prototype made once per
    thread and reused."""
    cache: dict[tuple[ModelRecipe, SubmodelSpec], nn.Module] = _SKELETONS.__dict__.setdefault("models", {})
    model = cache.get((recipe, spec))
    if model is None:
        if len(cache) >= _MAX_SKELETONS:
            cache.clear()
        model = cache[(recipe, spec)] = copy.deepcopy(eval_prototype(recipe, spec))
    return model


def _norms(model: nn.Module) -> dict[str, nn.modules.batchnorm._BatchNorm]:
    """The BatchNorm layers that keep running statistics, by module name."""
    return {k: m for k, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats}


def has_batch_norm(model: nn.Module) -> bool:
    """Does static-BN calibration apply to ``model`` (a BatchNorm layer with running statistics)?"""
    return bool(_norms(model))


@torch.inference_mode()
def calibrate_bn(model: nn.Module, x: Images, batch_size: int) -> None:
    """Static-BN statistics of ``model`` from ``x``, loaded into it."""
    (figures,) = batch_figures_group([model], [{}], x, batch_size)
    load_statistics(model, running_statistics([figures]))


@torch.inference_mode()
def batch_scores(model: nn.Module, x: Images, y: torch.Tensor, batch_size: int) -> list[tuple[int, float]]:
    """(correct, summed cross-entropy) per batch of ``model`` in eval mode (a multi-exit model: its last exit).

    Executors score slices of the test set that start on batch boundaries and add the per-batch figures
    in batch order (``combine``), so the totals are the same bits however the batches were shared out.
    """
    model.eval()
    model = scoring_model(model)
    out = []
    for start in range(0, len(x), batch_size):
        logits = final_logits(model(batch_layout(x[start : start + batch_size])))
        yb = y[start : start + batch_size]
        out.append((int((logits.argmax(1) == yb).sum()), float(nn.functional.cross_entropy(logits, yb, reduction="sum"))))
    return out


def class_correct(
    recipe: ModelRecipe, spec: SubmodelSpec, state: State, calib_x: Images, x: Images, y: torch.Tensor, batch_size: int,
    num_classes: int,
) -> torch.Tensor:  # fmt: skip
    """Correct predictions per true class (a tensor of ``num_classes`` counts) of ``state`` as ``spec`` over (x, y),
    static BN calibrated on ``calib_x`` first: ``evaluate``'s model and scoring, counted by class."""
    model = prepared(recipe, spec, state)
    calibrate_bn(model, calib_x, batch_size)
    model.eval()
    model = scoring_model(model)
    out = torch.zeros(num_classes, dtype=torch.int64)
    with torch.no_grad():  # not inference_mode: the cached skeleton's tensors are loaded again outside it
        for start in range(0, len(x), batch_size):
            yb = y[start : start + batch_size]
            hit = final_logits(model(batch_layout(x[start : start + batch_size]))).argmax(1) == yb
            out += torch.bincount(yb[hit], minlength=num_classes)
    return out


def combine(scores: list[tuple[int, float]], n: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) from per-batch figures, summed in batch order."""
    correct, loss = 0, 0.0
    for c, s in scores:
        correct += c
        loss += s
    n = max(n, 1)
    return correct / n, loss / n


def accuracy(model: nn.Module, x: Images, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` in eval mode over all of ``x``."""
    return combine(batch_scores(model, x, y, batch_size), len(x))


def prepared(recipe: ModelRecipe, spec: SubmodelSpec, state: State) -> nn.Module:
    """The cached evaluation skeleton of ``spec`` (BN with running statistics) holding ``state``."""
    model = eval_skeleton(recipe, spec)
    load_weights(model, state, partial=True)
    return model


def evaluate(
    recipe: ModelRecipe,
    spec: SubmodelSpec,
    state: State,
    calib_x: Images,
    test_x: Images,
    test_y: torch.Tensor,
    batch_size: int,
) -> tuple[float, float]:
    model = prepared(recipe, spec, state)
    calibrate_bn(model, calib_x, batch_size)
    return accuracy(model, test_x, test_y, batch_size)


# -- several submodels at once, sharing a common prefix ------------------------------------------------------
#
# AdaptiveFL's pool keeps every channel of the layer groups below a model's start layer, so up to 7 evaluated
# models hold the full model's weights in their first (most expensive, full-resolution) conv layers. Their
# ``features`` prefix is then computed once per batch and branched, in calibration (the train-mode BN statistics
# of a shared layer see the same inputs through the same weights, so they are the same numbers) and in scoring.
# Every model still runs exactly its own ops on exactly its own inputs: the scores are the same bits as one
# model at a time.


def _config(module: nn.Module) -> tuple:
    """What makes two modules compute the same function besides their tensors: types and plain attributes."""
    return tuple(
        (type(m).__name__, tuple(sorted((k, v) for k, v in vars(m).items() if isinstance(v, int | float | str | bool | tuple))))
        for m in module.modules()
    )


def shared_layers(a: nn.Module, b: nn.Module, state_a: State, state_b: State) -> int:
    """How many leading ``features`` layers models ``a`` and ``b`` (holding ``state_a``/``state_b``) share."""
    fa, fb = getattr(a, "features", None), getattr(b, "features", None)
    if not (isinstance(fa, nn.Sequential) and isinstance(fb, nn.Sequential)):
        return 0
    if not (hasattr(a, "forward_head") and hasattr(b, "forward_head")):
        return 0
    n = 0
    for j, (ma, mb) in enumerate(zip(fa, fb, strict=False)):
        if _config(ma) != _config(mb):
            break
        names = [f"features.{j}.{k}" for k, _ in ma.named_parameters()]
        if not all(
            k in state_a and k in state_b and state_a[k].shape == state_b[k].shape and torch.equal(state_a[k], state_b[k])
            for k in names
        ):
            break
        n += 1
    return n


def _tree_forward(models: list[nn.Module], idx: list[int], j: int, h: torch.Tensor, share: list[list[int]],
                  out: dict[int, torch.Tensor], ran: dict[tuple[int, int], int]) -> None:
    """Outputs of models ``idx`` into ``out``; they share ``features[:j]``, whose output is ``h`` (j = 0: the input)."""
    rest = list(idx)
    if j > 0:
        for i in [i for i in rest if len(models[i].features) == j]:  # every layer shared: only the head is its own
            out[i] = models[i].forward_head(h)
            rest.remove(i)
    while rest:
        a = rest[0]
        group = [b for b in rest if b == a or share[a][b] > j]
        rest = [b for b in rest if b not in group]
        model = models[a]
        if len(group) == 1:
            out[a] = model(h) if j == 0 else model.forward_head(model.features[j:](h))
            continue
        for b in group:
            ran[(b, j)] = a
        _tree_forward(models, group, j + 1, model.features[j](h), share, out, ran)


def _share_matrix(models: list[nn.Module], states: list[State]) -> list[list[int]]:
    n = len(models)
    share = [[0] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            share[a][b] = share[b][a] = shared_layers(models[a], models[b], states[a], states[b])
    return share


# -- static-BN statistics from per-batch figures -------------------------------------------------------------
#
# In train mode a BatchNorm layer normalises with its batch's own mean and variance, so the calibration pass over
# one batch does not depend on the batches before it: only the running statistics carry over. Calibration
# therefore records, per BatchNorm call, the batch mean and unbiased variance the kernel computed (a momentum-1
# update of reset statistics is exactly those figures) and accumulates them afterwards in batch order with the
# arithmetic of PyTorch's cumulative average (``momentum=None``). Slices of the calibration set may then run in
# different processes and give the same bits as one pass (tests/test_eval_cost.py checks it against PyTorch's own
# update, layouts and BatchNorm kinds included).

Figures = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Per BatchNorm layer (module name): the batch mean and unbiased variance of each call, stacked (calls, channels)."""


def _recorder(means: list[torch.Tensor], variances: list[torch.Tensor]):
    def hook(m: nn.modules.batchnorm._BatchNorm, inputs: tuple, output: torch.Tensor) -> None:
        means.append(m.running_mean.clone())
        variances.append(m.running_var.clone())
        m.reset_running_stats()  # finite again, whatever this batch held: the next call's update is exact

    return hook


@torch.inference_mode()
def batch_figures_group(models: list[nn.Module], states: list[State], x: Images, batch_size: int) -> list[Figures]:
    """Per model, the ``Figures`` of its BatchNorm layers over the batches of ``x`` (train-mode BatchNorm, the rest in
    eval mode: the Scaler is the identity), the shared prefix run once: a shared layer's figures are listed under
    every model that shares it. Models without BatchNorm are not run.

    Each layer's statistics point, for batch t, at row t of a table of reset rows (means 0, variances 1), which its
    momentum-1 update overwrites with the batch's figures: no hook, copy or reset per call. If some layer ran more than
    once in a batch, or in some batches only, the pass is recorded again call by call (``_figures_by_hooks``)."""
    named = [_norms(model) for model in models]
    if not any(named):
        return [{} for _ in models]
    batches = -(-len(x) // batch_size)
    rows = [
        {k: (m.running_mean.new_zeros(batches, m.num_features), m.running_var.new_ones(batches, m.num_features)) for k, m in norms.items()}
        for norms in named
    ]
    ran: dict[tuple[int, int], int] = {}
    with _calibrating(models, named):
        share = _share_matrix(models, states)
        for t, start in enumerate(range(0, len(x), batch_size)):
            for norms, table in zip(named, rows, strict=True):
                for k, m in norms.items():
                    m._buffers["running_mean"], m._buffers["running_var"] = table[k][0][t], table[k][1][t]
            _tree_forward(models, list(range(len(models))), 0, batch_layout(x[start : start + batch_size]), share, {}, ran)
        counts = [{k: int(m.num_batches_tracked) for k, m in norms.items()} for norms in named]
    if any(c not in (0, batches) for per_model in counts for c in per_model.values()):
        return _figures_by_hooks(models, named, states, x, batch_size)
    figures = [
        {k: table[k] if per_model[k] else (table[k][0][:0], table[k][1][:0]) for k in table}
        for table, per_model in zip(rows, counts, strict=True)
    ]
    return _shared_figures(figures, ran)


class _calibrating:
    """BatchNorm layers of ``models`` in train mode with momentum 1 and a call counter from 0 (the rest of each model
    in eval mode: the Scaler is the identity), each layer's statistics, momentum and mode put back on leaving."""

    def __init__(self, models: list[nn.Module], named: list[dict[str, nn.modules.batchnorm._BatchNorm]]) -> None:
        self.models, self.layers = models, [m for norms in named for m in norms.values()]

    def __enter__(self) -> None:
        self.saved = [(m.momentum, dict(m._buffers)) for m in self.layers]
        for model in self.models:
            model.eval()
        for m in self.layers:
            m.momentum = 1.0
            m._buffers["num_batches_tracked"] = torch.zeros((), dtype=torch.long)
            m.train()

    def __exit__(self, *exc: object) -> None:
        for m, (momentum, buffers) in zip(self.layers, self.saved, strict=True):
            m.momentum = momentum
            m._buffers.update(buffers)
        for model in self.models:
            model.eval()


def _figures_by_hooks(models: list[nn.Module], named: list[dict[str, nn.modules.batchnorm._BatchNorm]], states: list[State],
                      x: Images, batch_size: int) -> list[Figures]:
    """``batch_figures_group`` recorded call by call by a forward hook on every layer, for models with a BatchNorm
    layer that ran more than once in a batch or in some batches only."""
    calls = [{k: ([], []) for k in norms} for norms in named]
    handles = [m.register_forward_hook(_recorder(*rec[k])) for norms, rec in zip(named, calls, strict=True) for k, m in norms.items()]
    ran: dict[tuple[int, int], int] = {}
    try:
        with _calibrating(models, named):
            for m in (m for norms in named for m in norms.values()):
                m.reset_running_stats()
            share = _share_matrix(models, states)
            for start in range(0, len(x), batch_size):
                _tree_forward(models, list(range(len(models))), 0, batch_layout(x[start : start + batch_size]), share, {}, ran)
    finally:
        for h in handles:
            h.remove()
    figures = [
        {k: (_stack(mu, norms[k]), _stack(var, norms[k])) for k, (mu, var) in rec.items()}
        for rec, norms in zip(calls, named, strict=True)
    ]
    return _shared_figures(figures, ran)


def _shared_figures(figures: list[Figures], ran: dict[tuple[int, int], int]) -> list[Figures]:
    """``figures`` with each shared prefix layer's figures (``_tree_forward``'s ``ran``) under every model sharing it."""
    for (b, j), a in ran.items():
        if a != b:  # the layer ran once, as model a's: model b's copy saw the same inputs through the same weights
            prefix = f"features.{j}."
            for k in figures[b]:
                if k.startswith(prefix):
                    figures[b][k] = figures[a][k]
    return figures


def _stack(values: list[torch.Tensor], m: nn.modules.batchnorm._BatchNorm) -> torch.Tensor:
    return torch.stack(values) if values else torch.empty(0, m.num_features)


def running_statistics(parts: list[Figures]) -> State:
    """The static-BN statistics (``running_mean``, ``running_var``, ``num_batches_tracked`` of every BatchNorm
    layer) from the ``Figures`` of consecutive slices of the calibration set, in order: what one pass over all of
    it with ``momentum=None`` leaves."""
    merged = {k: (torch.cat([p[k][0] for p in parts]), torch.cat([p[k][1] for p in parts])) for k in (parts[0] if parts else {})}
    by_calls: dict[int, list[str]] = {}
    for k, (means, _) in merged.items():
        by_calls.setdefault(len(means), []).append(k)
    out: State = {}
    for calls, names in by_calls.items():
        # the update is elementwise: the layers with as many calls are accumulated as one row of channels
        widths = [merged[k][0].shape[1] for k in names]
        mean, var = cumulative_average(torch.cat([merged[k][0] for k in names], 1), torch.cat([merged[k][1] for k in names], 1))
        for k, m, v in zip(names, mean.split(widths), var.split(widths), strict=True):
            out[f"{k}.running_mean"], out[f"{k}.running_var"] = m.clone(), v.clone()
            out[f"{k}.num_batches_tracked"] = torch.tensor(calls, dtype=torch.long)
    return out


def cumulative_average(means: torch.Tensor, variances: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(running mean, running variance) a float32 BatchNorm with ``momentum=None`` holds after calls with these
    per-call figures (rows), from reset statistics (0, 1). Its CPU update, operation for operation: call t weighs
    by f = float32(1/t); mean = f*mean_t + (1-f)*mean in float32; variance = f*var_t + float32((1-f)*variance)
    summed in float64, rounded to float32."""
    if means.dtype != torch.float32:
        raise TypeError(f"static-BN statistics are float32 here, got {means.dtype}")
    mean = torch.zeros(means.shape[1])
    var = torch.ones(means.shape[1])
    wide = variances.double()
    for t in range(len(means)):
        f = torch.tensor(1.0 / (t + 1), dtype=torch.float32)
        g = 1 - f
        mean = f * means[t] + g * mean
        var = (f.double() * wide[t] + (g * var).double()).float()
    return mean, var


def load_statistics(model: nn.Module, stats: State) -> None:
    """Copy static-BN statistics (``running_statistics``) into ``model``'s BatchNorm buffers."""
    buffers = dict(model.named_buffers())
    for k, v in stats.items():
        buffers[k].copy_(v)


@torch.inference_mode()
def batch_scores_group(
    models: list[nn.Module], states: list[State], x: Images, y: torch.Tensor, batch_size: int
) -> list[list[tuple[int, float]]]:
    """``batch_scores`` of every model (states include the calibrated statistics), the shared prefix run once."""
    for model in models:
        model.eval()
    scored = [scoring_model(m) for m in models]
    states = [s if f is m else dict(f.state_dict()) for m, f, s in zip(models, scored, states, strict=True)]
    models = scored
    share = _share_matrix(models, states)
    scores: list[list[tuple[int, float]]] = [[] for _ in models]
    for start in range(0, len(x), batch_size):
        out: dict[int, torch.Tensor] = {}
        _tree_forward(models, list(range(len(models))), 0, batch_layout(x[start : start + batch_size]), share, out, {})
        yb = y[start : start + batch_size]
        for i, o in out.items():
            logits = final_logits(o)
            scores[i].append((int((logits.argmax(1) == yb).sum()), float(nn.functional.cross_entropy(logits, yb, reduction="sum"))))
    return scores
