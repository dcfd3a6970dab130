"""Split a train set among clients: each client is an int64 index array into the train tensors.

Methods:

- ``iid``: shuffle, then cut into near-equal parts.
- ``dirichlet``: for every class, Dirichlet(alpha) proportions over the clients (Hsu et al., 2019);
  small alpha gives few dominant classes per client, large alpha approaches iid.
- ``shards``: HeteroFL's non-iid-k. Every class is cut into label-pure shards,
  ``num_clients * classes_per_client`` shards in all, and each client receives
  ``classes_per_client`` shards of distinct labels.
- ``natural``: each client is one natural owner (FEMNIST writer, HAR subject) drawn at random.

Every random choice comes from the ``rng`` passed in, so the same generator state gives the same split.
"""

from __future__ import annotations

import numpy as np

METHODS: tuple[str, ...] = ("iid", "dirichlet", "shards", "natural")
_DIRICHLET_TRIES = 1000


class PartitionError(ValueError):
    """The requested split is impossible; the message names the problem and the fix."""


def partition(
    labels: np.ndarray,
    num_clients: int,
    method: str,
    rng: np.random.Generator,
    *,
    alpha: float = 0.5,
    classes_per_client: int = 2,
    groups: np.ndarray | None = None,
    min_size: int = 1,
) -> list[np.ndarray]:
    """Split the samples with ``labels`` among ``num_clients`` clients.

    Returns one sorted int64 index array per client; the arrays are disjoint and each holds at least
    ``max(min_size, 1)`` samples. ``iid`` and ``dirichlet`` use every sample; ``shards`` may leave
    out the classes no shard is cut from (when there are fewer shards than classes) and ``natural``
    uses only the chosen groups. Raises :class:`PartitionError` when the split cannot be made.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise PartitionError(f"partition needs a non-empty 1-D label array, got shape {labels.shape}")
    if int(num_clients) != num_clients or num_clients < 1:
        raise PartitionError(f"num_clients must be a positive integer, got {num_clients}")
    num_clients = int(num_clients)
    min_size = max(1, int(min_size))
    if method == "iid":
        parts = _iid(len(labels), num_clients, rng, min_size)
    elif method == "dirichlet":
        parts = _dirichlet(labels, num_clients, rng, alpha, min_size)
    elif method == "shards":
        parts = _shards(labels, num_clients, rng, classes_per_client)
    elif method == "natural":
        parts = _natural(labels, num_clients, rng, groups)
    else:
        raise PartitionError(f"unknown partition method {method!r}: choose one of {', '.join(METHODS)}")
    parts = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    smallest = min(len(p) for p in parts)
    if smallest < min_size:
        raise PartitionError(
            f"{method} partition gives a client only {smallest} samples (< min_size={min_size}); "
            "use fewer clients or a smaller min_size"
        )
    return parts


def label_sets(labels: np.ndarray, parts: list[np.ndarray]) -> list[np.ndarray]:
    """The sorted distinct labels each client holds."""
    labels = np.asarray(labels)
    return [np.unique(labels[p]) for p in parts]


def _iid(n: int, num_clients: int, rng: np.random.Generator, min_size: int) -> list[np.ndarray]:
    if n < num_clients * min_size:
        raise PartitionError(
            f"iid partition: {n} samples cannot give {num_clients} clients {min_size} each; "
            "use fewer clients or a smaller min_size"
        )
    return np.array_split(rng.permutation(n), num_clients)


def _dirichlet(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, alpha: float, min_size: int
) -> list[np.ndarray]:
    if not alpha > 0:
        raise PartitionError(f"dirichlet partition needs alpha > 0, got {alpha}")
    n = len(labels)
    if n < num_clients * min_size:
        raise PartitionError(
            f"dirichlet partition: {n} samples cannot give {num_clients} clients {min_size} each; "
            "use fewer clients or a smaller min_size"
        )
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    for _ in range(_DIRICHLET_TRIES):
        props = rng.dirichlet(np.full(num_clients, alpha), size=len(by_class))
        sizes = np.zeros(num_clients, dtype=np.int64)
        cuts = []
        for idx, p in zip(by_class, props, strict=True):
            bounds = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            cuts.append(bounds)
            sizes += np.diff(np.concatenate(([0], bounds, [len(idx)])))
        if sizes.min() >= min_size:
            pieces = [np.split(idx, b) for idx, b in zip(by_class, cuts, strict=True)]
            return [np.concatenate([pc[k] for pc in pieces]) for k in range(num_clients)]
    raise PartitionError(
        f"dirichlet partition: no draw in {_DIRICHLET_TRIES} tries gave all {num_clients} clients at least "
        f"{min_size} samples (alpha={alpha}, {n} samples); raise alpha, or lower num_clients or min_size"
    )


def _shards(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, classes_per_client: int
) -> list[np.ndarray]:
    classes = np.unique(labels)
    k = int(classes_per_client)
    if k < 1:
        raise PartitionError(f"shards partition needs classes_per_client >= 1, got {classes_per_client}")
    if k > len(classes):
        raise PartitionError(
            f"shards partition: classes_per_client={k} exceeds the {len(classes)} classes in the data; "
            f"use classes_per_client <= {len(classes)}"
        )
    total = num_clients * k
    # Near-equal shard counts per class; the classes that get the remainder are drawn at random.
    counts = np.full(len(classes), total // len(classes), dtype=np.int64)
    counts[rng.permutation(len(classes))[: total % len(classes)]] += 1
    shards: dict[int, list[np.ndarray]] = {}
    for ci, c in enumerate(classes):
        if counts[ci] == 0:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        if len(idx) < counts[ci]:
            raise PartitionError(
                f"shards partition: class {c} has {len(idx)} samples but needs {counts[ci]} shards "
                f"({num_clients} clients x {k} classes each); use fewer clients or classes_per_client"
            )
        shards[ci] = list(np.array_split(idx, counts[ci]))

    # Give each client k distinct classes. A class with as many shards left as clients left must be
    # taken now, else it could not be spread over distinct clients later; since the shards left sum
    # to k * clients left, there are never more than k such classes, so this always succeeds.
    remaining = counts.copy()
    assigned: list[list[int]] = []
    for left in range(num_clients, 0, -1):
        forced = np.flatnonzero(remaining == left)
        others = np.flatnonzero((remaining > 0) & (remaining < left))
        extra = k - len(forced)
        if extra > 0:
            w = remaining[others] / remaining[others].sum()
            pick = rng.choice(others, size=extra, replace=False, p=w)
            chosen = np.concatenate([forced, pick])
        else:
            chosen = forced
        remaining[chosen] -= 1
        assigned.append([int(c) for c in chosen])
    order = rng.permutation(num_clients)  # so client 0 is not always the one with forced classes
    return [np.concatenate([shards[c].pop() for c in assigned[i]]) for i in order]


def _natural(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, groups: np.ndarray | None
) -> list[np.ndarray]:
    if groups is None:
        raise PartitionError(
            "natural partition needs natural groups (FEMNIST writers, HAR subjects) but this dataset has none; "
            "use iid, dirichlet or shards"
        )
    groups = np.asarray(groups)
    if groups.shape != labels.shape:
        raise PartitionError(f"natural partition: groups shape {groups.shape} != labels shape {labels.shape}")
    ids, inverse = np.unique(groups, return_inverse=True)
    if num_clients > len(ids):
        raise PartitionError(
            f"natural partition: {num_clients} clients but only {len(ids)} natural groups in the data; "
            f"use num_clients <= {len(ids)} or another partition method"
        )
    chosen = rng.choice(len(ids), size=num_clients, replace=False)
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(len(ids) + 1))
    return [order[starts[g] : starts[g + 1]] for g in chosen]
