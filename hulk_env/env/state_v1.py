"""Placement-v1's episode: the placement, the witness completion and the working observation.

Memory bookkeeping is the witness's (:class:`hulk_env.completion.Witness`): its slack gives the
``slack`` column and its stash counts the ``free_memory`` column and the ``stash`` global, so a
step updates the features of the machines it touched and nothing else (``O(M)`` only when a
stash count or a replica changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hulk_env.completion import Witness
from hulk_env.env.observation import GLOBAL_INDEX, LAYER_INDEX, StaticParts
from hulk_env.env.observation_v1 import MACHINE_INDEX_V1, StaticPartsV1
from hulk_env.rewards import UNPLACED

M_FREE, M_LOAD, M_HELD = MACHINE_INDEX_V1["free_memory"], MACHINE_INDEX_V1["load"], MACHINE_INDEX_V1["layers_held"]
M_IN_REPLICA, M_HOLDS_PRED = MACHINE_INDEX_V1["in_replica"], MACHINE_INDEX_V1["holds_predecessor"]
M_SLACK, M_WITNESS = MACHINE_INDEX_V1["slack"], MACHINE_INDEX_V1["witness"]
M_PRED, M_RING = MACHINE_INDEX_V1["pred_latency"], MACHINE_INDEX_V1["ring_latency"]  # + 1: bandwidth
L_PLACED, L_CURRENT = LAYER_INDEX["placed"], LAYER_INDEX["current"]
G_PROGRESS, G_REPLICA, G_STASH = GLOBAL_INDEX["progress"], GLOBAL_INDEX["replica"], GLOBAL_INDEX["stash"]


@dataclass
class EpisodeStateV1:
    """A Placement-v1 episode.

    Attributes:
        static: v0's per-instance parts (sizes, reference, feature scales).
        v1: the instance's :class:`StaticPartsV1`.
        witness: the witness completion (its cursor is the episode's ``t``).
        placement: ``[D, L]`` machine per slot, ``-1`` unplaced.
        t: decisions made.
        mask: ``[max_machines]`` bool, allowed machines for slot ``t``; ``real_mask`` its first ``M``.
        load_s, held: per machine, compute seconds per micro-batch and slots placed on it.
        replica_machines: machines holding a placed layer of the open replica.
        invalid_actions, ended, dead_end: as in v0 (a v1 episode never dead-ends).
        machine_features, layer_features, layer_machine, globals_: working observation arrays.
        pred_rows: machines whose ``holds_predecessor`` is set; ``slack_epoch``, ``stash_k``,
            ``witness_machine``, ``pred_machine``, ``ring_machine``: what the v1 columns show.
    """

    static: StaticParts
    v1: StaticPartsV1
    witness: Witness
    placement: np.ndarray
    mask: np.ndarray
    real_mask: np.ndarray
    machine_features: np.ndarray
    layer_features: np.ndarray
    layer_machine: np.ndarray
    globals_: np.ndarray
    load_s: list[float]
    held: list[int]
    t: int = 0
    replica_machines: list[int] = field(default_factory=list)
    in_replica: list[bool] = field(default_factory=list)
    invalid_actions: int = 0
    ended: bool = False
    dead_end: bool = False
    pred_rows: tuple[int, ...] = ()
    slack_epoch: int = -1
    stash_k: int = -1
    witness_machine: int = -1
    pred_machine: int = -1
    ring_machine: int = -1


def new_state_v1(static: StaticPartsV1, max_machines: int) -> EpisodeStateV1:
    """The state at the start of an episode; the mask is not set yet."""
    base = static.base
    m = base.num_machines
    mask = np.zeros(max_machines, dtype=bool)
    s = EpisodeStateV1(
        static=base,
        v1=static,
        witness=static.start.clone(),
        placement=np.full((base.data_parallel, base.num_layers), UNPLACED, dtype=np.int64),
        mask=mask,
        real_mask=mask[:m],
        machine_features=static.machine_features.copy(),
        layer_features=base.layer_features.copy(),
        layer_machine=base.layer_machine.copy(),
        globals_=base.globals_.copy(),
        load_s=[0.0] * m,
        held=[0] * m,
        in_replica=[False] * m,
    )
    s.slack_epoch, s.stash_k = s.witness.epoch, s.witness.k
    s.globals_[G_STASH] = s.witness.k / base.num_micro_batches
    s.witness_machine = int(s.witness.placement[0, 0])  # its column is set in the static features
    return s


def update_mask_v1(s: EpisodeStateV1) -> None:
    """The machines after which the witness can still complete the placement."""
    s.witness.allowed(out=s.real_mask)


def apply_v1(s: EpisodeStateV1, a: int) -> None:
    """Place slot ``s.t`` on ``a`` (an allowed machine): the witness's repair, then the features."""
    static = s.static
    w = s.witness
    w.commit(a)
    slot = s.t
    r, layer = divmod(slot, static.num_layers)
    s.placement[r, layer] = a
    s.t = t = slot + 1
    slots = s.placement.size
    mf = s.machine_features
    v1 = s.v1
    inverse = v1.inverse_list
    # memory: the witness's slack, and the placed slots at the witness's stash counts
    if w.epoch != s.slack_epoch:
        mf[: static.num_machines, M_SLACK] = w.slack * v1.inverse_memory
        s.slack_epoch = w.epoch
    else:
        slack = w.slack
        for i in w.touched:
            mf[i, M_SLACK] = float(slack[i]) * inverse[i]
    row_a = mf[a]
    if not s.in_replica[a]:
        s.in_replica[a] = True
        s.replica_machines.append(a)
        row_a[M_IN_REPLICA] = 1.0
    if w.k != s.stash_k:  # the open replica's placed layers stash another number of micro-batches
        for i in s.replica_machines:
            mf[i, M_FREE] = 1.0 - w.placed_bytes(i) * inverse[i]
        s.stash_k = w.k
        s.globals_[G_STASH] = w.k / static.num_micro_batches
    else:
        row_a[M_FREE] = 1.0 - w.placed_bytes(a) * inverse[a]
    load = s.load_s[a] + v1.train_rows[layer][a]
    s.load_s[a] = load
    held = s.held[a] + 1
    s.held[a] = held
    row_a[M_LOAD] = load / (load + static.balanced_s)
    row_a[M_HELD] = held / slots
    lf = s.layer_features
    lf[slot, L_PLACED] = 1.0
    lf[slot, L_CURRENT] = 0.0
    s.layer_machine[slot] = a
    g = s.globals_
    g[G_PROGRESS] = t / slots
    for i in s.pred_rows:
        mf[i, M_HOLDS_PRED] = 0.0
    if t == slots:
        s.pred_rows = ()
        return
    lf[t, L_CURRENT] = 1.0
    r_next, layer_next = divmod(t, static.num_layers)
    if r_next != r:  # a new replica: nothing of it is placed yet
        for i in s.replica_machines:
            mf[i, M_IN_REPLICA] = 0.0
            s.in_replica[i] = False
        s.replica_machines = []
        g[G_REPLICA] = r_next / max(static.data_parallel - 1, 1)
        s.stash_k = w.k
        g[G_STASH] = w.k / static.num_micro_batches
    row = w.row  # the witness agrees with every placed slot of the open replica
    s.pred_rows = rows = tuple([row[u] for u in static.predecessors[layer_next]])
    for i in rows:
        mf[i, M_HOLDS_PRED] = 1.0
    own = row[layer_next]  # the witness's own machine for the next slot
    if own != s.witness_machine:
        mf[s.witness_machine, M_WITNESS] = 0.0
        mf[own, M_WITNESS] = 1.0
        s.witness_machine = own
    pred = rows[0] if rows else -1
    if pred != s.pred_machine:
        _link_columns(s, M_PRED, pred)
        s.pred_machine = pred
    ring = int(s.placement[r_next - 1, layer_next]) if r_next > 0 else -1
    if ring != s.ring_machine:
        _link_columns(s, M_RING, ring)
        s.ring_machine = ring


def _link_columns(s: EpisodeStateV1, column: int, source: int) -> None:
    block = s.machine_features[: s.static.num_machines, column : column + 2]
    if source < 0:
        block[:] = 0.0
    else:
        block[:] = s.v1.link_rows(source)


def fallback_machine_v1(s: EpisodeStateV1) -> int:
    """The machine an invalid action is replaced by: the machine of the current layer's first
    predecessor in its replica if allowed (no new link, no new stage), else the witness's own
    machine for the slot (always allowed)."""
    static = s.static
    r, layer = divmod(s.t, static.num_layers)
    preds = static.predecessors[layer]
    if preds:
        a = int(s.placement[r, preds[0]])
        if s.mask[a]:
            return a
    return s.witness.own_machine()
