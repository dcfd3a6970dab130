"""HeteroFL-IoT: HeteroFL under a per-node energy budget, with a per-round proportional (or paced) selection.

Source: "关于 HETEROFL 一种用于异构设备联邦学习架构的复现与改进" (a reproduction and extension of HeteroFL,
Diao et al., ICLR 2021, for IoT nodes with an energy budget).

What the paper specifies, and how it maps here:

- Energy (§1, §3.4): every node starts with the same energy; each round of training and communication
  spends energy, more for a more complex (wider) submodel; "能量耗尽就会自动下线，无法再次参与通信"
  (a node whose energy is exhausted goes offline and never communicates again). The paper's assumption
  is that a top-level node cannot afford to be picked every round. Here the engine charges the energy
  (compute power x time for the submodel's FLOPs, radio power x air time for its bytes, so a larger
  level costs more) and a node whose battery runs dry is offline for good; a scenario gives every node
  the same battery (``fleet.groups[*].overrides.battery``) and, to match the paper's model in which only
  training and communication draw energy, zero idle power.
- Selection (§3.4: "根据复杂度的分配程度，决定每轮的客户端的复杂度占比情况，保证每个通信训练轮次，其数据量不会有
  波动。实际选择客户端时，根据服务端复杂度占比进行选择"; Algorithm 1, ClientSelect: the level shares
  a..e sum to 10, "使用比例算出本轮该选择的数量 L_t ← max(L_p × 10, 1)", "选择客户端 C_t ← L_t"):
  every round the server takes, for each level p, max(share_p x K, 1) nodes of that level (K = the
  round's size, C x M = 10 in the paper), so a2-b8 gives exactly 2 + 8 nodes every round (Fig. 5)
  where plain HeteroFL's uniform draw gives 1:9 in some rounds (Fig. 2). Counts are rounded by
  largest remainder so they sum to K. Nodes are drawn uniformly within a level, among the nodes that
  still have energy. The paper does not say what happens when a level has fewer live nodes than its
  quota; ``shortfall: fill`` (default) gives the free slots to the other levels by their shares, so a
  round keeps K nodes ("保证每轮的训练都有一定量的数据"), ``leave`` leaves them empty.
- Budget pacing, ``selection: paced`` (not in Algorithm 1; this simulator's reading of §1's knapsack idea,
  "按权重比例来分配, 保证每轮的训练都有一定量的数据, 不出现前后训练量差距过大的情况": every round has a certain
  amount of data, with no large differences between rounds). Under a tight budget, ``proportional``
  spends the top level's energy at the full share and then runs out (in
  scenarios/heterofl_iot_budget.yaml every level-a node is dry by about round 30 of 80; every later
  round is 0:10). ``paced`` spreads each level's budget over the rounds left. In round r (0-based, of
  R rounds, so R - r rounds left, this one included), for each level l (``mode: fix``: the nodes whose
  fixed level is l):

  - e_l, the expected energy of one task of level l = the task energy (compute + radio, idle excluded)
    all of the level's nodes have drawn so far / the tasks the server has sent to level l so far
    (failed ones included: a task that died mid-way drew part of a task's energy);
  - B_l = sum over the level's nodes of floor(E_d / e_l), E_d the node's energy left now (a node with
    less than e_l left cannot finish a task, so leftovers are not pooled across nodes);
  - x_l = B_l / (R - r) + c_l, with c_l the level's carry (0 at the start);
    cap_l = min(floor(x_l), clients_per_round), and the new carry c_l = x_l - floor(x_l), in [0, 1)
    (``paced_caps``; floor(x + 1e-9) so float noise never loses a whole task). Summed over rounds this
    spends B_l exactly by the last round when tasks cost e_l (floor with carry: 4 tasks over 10 rounds
    go out in rounds 2, 4, 6, 8).
  - A level with no measured task yet (no task sent, or no energy drawn: mains power) has no cap,
    and a level of mains-powered nodes (E_d = inf) never gets one: its carry stays 0.

  The round's counts are then the ``proportional`` ones (the quota max(share x K, 1), largest remainder)
  with each level's available nodes capped by cap_l, and the candidates of a level restricted to
  the live nodes with floor(E_d / e_l) >= 1; ``shortfall: fill`` hands the slots a level cannot use to
  the levels with spare nodes under their caps, by their shares (``leave``: empty). Round 0 (nothing
  measured) is the paper's mix. Deterministic: no randomness besides the uniform draw within each
  level, the same as ``proportional``'s.

  The other modes keep this meaning: a level's budget spread over what is left of the run, spent by its end.

  - ``semi_async``: as above, one selection a round.
  - ``async`` (FedBuff's buffered form, ``sim/buffered_async.py``): no rounds; each dispatch wave of k free slots
    is a selection of k. The run needs S more updates if no task fails from now on (the server's ``RunLeft``:
    (R - version) x buffer_size - buffered - in flight), so "rounds left" is S / k waves of k:
    x_l = B_l / (S / k) + c_l, which is B_l / (R - r) when every wave is a round (k = buffer_size = the
    concurrency, nothing in flight); a wave with S <= k (the run's last, or past it) may spend all that is left.
    A task in flight has drawn only part of its energy: it is left out of e_l's count (e_l = energy drawn /
    tasks ended, at most a task's part too high) and takes one task off B_l (its node will pay for it). The
    counts of a wave keep the mix among the tasks in flight and the wave's (``concurrent_quotas``), so waves of
    one slot (``dispatch: continuous``) still follow the shares.
  - ``hierarchical``: each gateway selects from its own nodes every gateway round (``ctx.rounds`` = rounds x
    gateway_rounds, round r keyed cloud round x gateway_rounds + j), so each gateway paces the budget of its
    own nodes of each level over the gateway rounds left, with its own carry and task count (``carry`` and
    ``dispatched`` then keyed by the gateway's first device); the level's fleet budget is the sum of the
    gateways', so it is spent over the run as a flat run spends it. A gateway's selection never spans a
    ``yield``, so gateways running in parallel never see each other's half-updated pace.

  What the server knows: E_d and the drawn task energy are the simulator's true state, read through the
  documented oracle path (``FleetView.true_state``: ``Fleet.energy_left``, ``Fleet.task_energy``; the
  summary's ``oracle_knowledge`` lists the method), as the paper's server knows every node's energy
  (below). FleetView exposes no battery or power figures, so ``paced`` needs ``energy_info: oracle``
  and ``mode: fix`` (in dynamic mode a level has no nodes of its own); the config refuses other
  combinations. The task count per level is the server's own.
- Baseline (§5.1, Fig. 2-4): HeteroFL with its random selection under the same energy limit:
  ``selection: random`` is that, from the same pool and with the same energy knowledge, so the two
  runs differ by the one option. ``algorithm.name: heterofl`` (plain HeteroFL) knows only what
  failed tasks tell it: a node is dropped once a task to it fails as ``depleted``.
- Which nodes "still have energy": in Algorithm 1 the server initialises and keeps the per-client
  information L_{1:K} ("初始化全局模型参数 W_g^0 和本地的各项信息 L_{1:K}") and ClientSelect decides "根据本地
  客户端的信息 L_{1:K}", i.e. the paper's server knows every node's energy state exactly (energy is its own
  counter). The engine is where the true battery lives (with compute jitter, which a declared-cost
  ledger would not reproduce, and FleetView exposes no declared power or battery figures), so
  ``energy_info: oracle`` (default) reads it through ``FleetView.true_state(self.name)``: a node is
  live if ``Fleet.alive_mask(now)`` holds for it. The run summary's ``oracle_knowledge`` lists this method.
  ``energy_info: outcomes`` uses no oracle: only the engine's record of tasks that failed as
  ``depleted`` (``FleetView.selectable``), so a node that ran dry between tasks costs one failed
  dispatch before it is dropped.
  "now" is the view's simulated clock (``FleetView.now``). With no idle draw (the paper's model) a node
  can run dry only during a task, whose failure the server sees, so ``outcomes`` and ``oracle`` select alike; they differ
  when nodes also drain while idle.
- Numerics (§3.2-3.3, Algorithm 1): HeteroFL's, inherited unchanged: nested width levels (r = 1/2 per
  level), Scaler, masked CE, static BN, count-averaged nested aggregation with label-restricted
  classifier rows. The paper's 5 levels a-e (1, 0.5, 0.25, 0.125, 0.0625) and mixes a2-b8, a2-b4-c4
  are written with HeteroFL's ``proportions`` notation.
"""

from __future__ import annotations

import numpy as np

from iotfl_sim.algorithms.base import Assignment, Eligible, FleetView, RunLeft, select_uniform
from iotfl_sim.algorithms.heterofl import HeteroFL
from iotfl_sim.scenario.algorithms import HeteroFLIoTConfig


def largest_remainder(shares: np.ndarray, k: int) -> np.ndarray:
    """Integer counts summing to ``k`` in proportion to ``shares`` (largest remainder; ties by order)."""
    shares = np.asarray(shares, dtype=np.float64)
    if k <= 0 or shares.sum() <= 0:
        return np.zeros(len(shares), dtype=np.int64)
    raw = shares / shares.sum() * k
    out = np.floor(raw + 1e-9).astype(np.int64)
    rest = k - int(out.sum())
    if rest > 0:
        order = np.argsort(-(raw - out), kind="stable")
        out[order[:rest]] += 1
    return out


def level_quotas(shares: np.ndarray, k: int) -> np.ndarray:
    """HeteroFL-IoT's per-level counts: share_p x k by largest remainder, at least 1 per level
    (Algorithm 1: L_t = max(L_p x 10, 1)) where k allows; the extra ones come from the largest counts."""
    q = largest_remainder(shares, k)
    if k >= len(q):
        for i in np.flatnonzero(q == 0):
            j = int(np.argmax(q))
            q[j] -= 1
            q[i] = 1
    return q


def fill_quotas(quota: np.ndarray, avail: np.ndarray, shares: np.ndarray, fill: bool) -> np.ndarray:
    """How many nodes to take per level: the quota capped by the live nodes of the level; with ``fill``
    the slots a level cannot use go to the levels with spare live nodes, by their shares."""
    take = np.minimum(quota, avail)
    if not fill:
        return take
    short = int(quota.sum() - take.sum())
    while short > 0:
        spare = avail - take
        open_ = spare > 0
        if not open_.any():
            break
        extra = np.minimum(largest_remainder(np.where(open_, shares, 0.0), short), spare)
        if extra.sum() == 0:  # shares of every open level are 0: take in order
            extra = np.zeros_like(take)
            extra[np.flatnonzero(open_)[0]] = 1
        take += extra
        short -= int(extra.sum())
    return take


PACE_EPS = 1e-9  # floor(x + PACE_EPS): a pace of 2.9999999999 (float noise) counts as 3


def affordable_tasks(energy_left: np.ndarray, per_task: float) -> np.ndarray:
    """Whole tasks of ``per_task`` J each node can still pay for: floor(E_d / e) (inf for mains power)."""
    return np.floor(np.asarray(energy_left, dtype=np.float64) / per_task + PACE_EPS)


def concurrent_quotas(shares: np.ndarray, k: int, in_flight: np.ndarray) -> np.ndarray:
    """A dispatch wave's counts per level under the asynchronous server: the mix kept among the tasks in flight
    (``in_flight`` per level, n in all) and the wave's ``k``: ``level_quotas(shares, n + k)`` less what each level
    has in flight, at least 0; where levels over their share leave more than ``k``, cut back to ``k`` by largest
    remainder. Nothing in flight: ``level_quotas(shares, k)``."""
    need = np.maximum(level_quotas(shares, int(in_flight.sum()) + k) - in_flight, 0)
    return need if need.sum() <= k else largest_remainder(need.astype(np.float64), k)


def paced_caps(
    tasks_left: np.ndarray, rounds_left: float, carry: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Budget pacing, floor with carry: for each level l, x_l = tasks_left_l / max(rounds_left, 1) + carry_l, the
    level's cap this round is min(floor(x_l), k) and its new carry x_l - floor(x_l), in [0, 1). A level whose
    budget is unknown or unlimited (``tasks_left`` inf or nan) gets cap k and carry 0. Returns (caps, carry)."""
    tasks_left = np.asarray(tasks_left, dtype=np.float64)
    carry = np.asarray(carry, dtype=np.float64)
    known = np.isfinite(tasks_left)
    x = np.where(known, tasks_left, 0.0) / max(float(rounds_left), 1.0) + np.where(known, carry, 0.0)
    whole = np.floor(x + PACE_EPS)
    caps = np.where(known, np.minimum(whole, k), k).astype(np.int64)
    return caps, np.where(known, np.clip(x - whole, 0.0, None), 0.0)


class HeteroFLIoT(HeteroFL):
    Config = HeteroFLIoTConfig
    checkpointed = ("state", "wire", "carry", "dispatched")

    def __init__(self, cfg: HeteroFLIoTConfig) -> None:
        super().__init__(cfg)
        self.cfg: HeteroFLIoTConfig = cfg

    def setup(self, ctx) -> None:
        super().setup(ctx)
        # paced: each level's fractional pace left over, and the tasks sent to each level so far (under a hierarchy
        # each gateway's, keyed by its first device: ``_pacing_of``)
        self.carry: np.ndarray | dict[int, np.ndarray] = np.zeros(len(self.levels))
        self.dispatched: np.ndarray | dict[int, np.ndarray] = np.zeros(len(self.levels), dtype=np.int64)

    def possible_specs(self) -> np.ndarray:
        """Proportional or paced ``dynamic``: any eligible device any level of the mix, quotas ignoring fit."""
        if self.cfg.selection != "random" and self.cfg.mode == "dynamic":
            return self.eligible[:, None] & (self.props > 0)[None, :]
        return super().possible_specs()

    # -- which nodes still have energy

    def selection_filter(self, fleet: FleetView) -> Eligible:
        """Eligible and (oracle) with energy left, evaluated on the ids asked about."""
        if self.cfg.energy_info != "oracle":
            return self.eligible
        true, now, eligible = fleet.true_state(self.name), float(fleet.now), self.eligible
        return lambda ids: eligible[ids] & true.alive_mask(now, ids)

    def live_pool(self, fleet: FleetView) -> np.ndarray:
        """Devices this method may select: not busy, not known gone, eligible, and (oracle) with energy left."""
        mask = fleet.selectable_mask() & self.eligible
        if self.cfg.energy_info == "oracle":
            mask &= fleet.true_state(self.name).alive_mask(float(fleet.now))
        return np.flatnonzero(mask)

    # -- selection

    def select(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        if self.cfg.selection == "random":
            return super().select(rnd, fleet, rng)  # HeteroFL's draw, through selection_filter
        if self.cfg.selection == "paced":
            return self._paced_fix(rnd, fleet, rng)
        if self.cfg.mode == "fix":
            return self._proportional_fix(self.live_pool(fleet), rng)
        return self._proportional_dynamic(fleet, rng)

    def _paced_fix(self, rnd: int, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        """``selection: paced`` (module docstring): the proportional selection with each level capped by its pace,
        over the devices the view selects among (a gateway's under a hierarchy)."""
        true, now, k = fleet.true_state(self.name), float(fleet.now), self.c.clients_per_round
        scope = fleet.members
        carry, dispatched = self._pacing_of(scope)
        left = self.c.run_left  # None in rounds
        flying = np.zeros(len(self.levels), dtype=np.int64) if left is None else self._in_flight(left)
        pool = self.live_pool(fleet)
        keep = np.ones(len(pool), dtype=bool)
        tasks_left = np.full(len(self.levels), np.inf)
        for i in range(len(self.levels)):
            members = np.flatnonzero(self.fixed == i if scope is None else (self.fixed == i) & scope)
            drawn = float(true.task_energy(members).sum())
            ended = dispatched[i] - flying[i]
            if ended == 0 or not drawn > 0:
                continue  # no task energy measured yet: no cap
            per_task = drawn / float(ended)
            tasks_left[i] = float(affordable_tasks(true.energy_left(now, members), per_task).sum()) - flying[i]
            in_level = self.fixed[pool] == i
            keep[in_level] = affordable_tasks(true.energy_left(now, pool[in_level]), per_task) >= 1
        # in rounds R - r rounds left, this one included; in a wave of k slots, S / k of them
        rounds_left: float = self.c.rounds - rnd if left is None else left.updates / k
        caps, carry[:] = paced_caps(tasks_left, rounds_left, carry, k)
        out = self._proportional_fix(pool[keep], rng, caps)
        dispatched += np.bincount([self.levels.index(a.level) for a in out], minlength=len(self.levels))
        return out

    def _pacing_of(self, scope: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The pacing's carry and task count per level over the devices of ``scope`` (``FleetView.members``):
        ``carry`` and ``dispatched`` themselves, or under a hierarchy each gateway's own, which ``carry`` and
        ``dispatched`` then hold keyed by the gateway's first device."""
        if scope is None:
            return self.carry, self.dispatched
        if not isinstance(self.carry, dict):  # the run's first gateway selection: nothing paced before
            self.carry, self.dispatched = {}, {}
        key = int(np.argmax(scope))
        if key not in self.carry:
            self.carry[key] = np.zeros(len(self.levels))
            self.dispatched[key] = np.zeros(len(self.levels), dtype=np.int64)
        return self.carry[key], self.dispatched[key]

    def _in_flight(self, left: RunLeft) -> np.ndarray:
        """Tasks in flight per level (an asynchronous wave's ``RunLeft``)."""
        index = {x: i for i, x in enumerate(self.levels)}
        return np.bincount([index[a.level] for a in left.in_flight if a.level in index], minlength=len(self.levels))

    def _quotas(self, k: int) -> np.ndarray:
        """The counts per level of a round of ``k`` (``level_quotas``), or of an asynchronous wave of ``k``, which
        keeps the mix among the tasks in flight and its own (``concurrent_quotas``)."""
        left = self.c.run_left
        if left is None:
            return level_quotas(self.props, k)
        return concurrent_quotas(self.props, k, self._in_flight(left))

    def _proportional_fix(
        self, pool: np.ndarray, rng: np.random.Generator, caps: np.ndarray | None = None
    ) -> list[Assignment]:
        k = self.c.clients_per_round
        by_level = [pool[self.fixed[pool] == i] for i in range(len(self.levels))]
        avail = np.array([len(p) for p in by_level], dtype=np.int64)
        if caps is not None:
            avail = np.minimum(avail, caps)
        take = fill_quotas(self._quotas(k), avail, self.props, self.cfg.shortfall == "fill")
        out = []
        for i, (members, n) in enumerate(zip(by_level, take, strict=True)):
            if n <= 0:
                continue
            chosen = (
                members
                if n >= len(members)
                else members[rng.choice(len(members), size=int(n), replace=False)]
            )
            x = self.levels[i]
            out.extend(Assignment(int(d), self.specs[x], level=x, bits=self.wire.upload_bits) for d in chosen)
        out.sort(key=lambda a: a.device)
        return out

    def _proportional_dynamic(self, fleet: FleetView, rng: np.random.Generator) -> list[Assignment]:
        # dynamic mode with by_id: any node can take any level, so pick the round's nodes uniformly and
        # hand out exactly the quota of each level among them (instead of HeteroFL's multinomial draw)
        chosen = select_uniform(fleet, self.c.clients_per_round, rng, self.selection_filter(fleet))
        k = len(chosen)
        if k == 0:
            return []
        quota = self._quotas(k)
        levels = rng.permutation(np.repeat(np.arange(len(self.levels)), quota))
        return [
            Assignment(int(d), self.specs[self.levels[i]], level=self.levels[i], bits=self.wire.upload_bits)
            for d, i in zip(chosen, levels, strict=True)
        ]
