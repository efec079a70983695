"""Placement-v1's episode: the placement, the witness completion and the working observation.

Memory bookkeeping is the witness's (:class:`hulk_env.completion.Witness`): its slack gives the
``slack`` column and its stash counts the ``free_memory`` column and the ``stash`` global, so a
step updates the features of the machines it touched and nothing else (``O(M)`` only when a
stash count or a replica changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hulk_env.completion import Witness
from hulk_env.env.observation import GLOBAL_INDEX, StaticParts
from hulk_env.env.observation_v1 import MACHINE_INDEX_V1, StaticPartsV1
from hulk_env.env.state import (
    EpisodeArrays,
    advance,
    flat_views,
    predecessor_machine,
    working_arrays,
)

M_FREE, M_LOAD, M_HELD = MACHINE_INDEX_V1["free_memory"], MACHINE_INDEX_V1["load"], MACHINE_INDEX_V1["layers_held"]
M_IN_REPLICA = MACHINE_INDEX_V1["in_replica"]
M_SLACK, M_WITNESS = MACHINE_INDEX_V1["slack"], MACHINE_INDEX_V1["witness"]
M_PRED, M_RING = MACHINE_INDEX_V1["pred_latency"], MACHINE_INDEX_V1["ring_latency"]  # + 1: bandwidth
G_STASH = GLOBAL_INDEX["stash"]


@dataclass(kw_only=True)
class EpisodeStateV1(EpisodeArrays):
    """A Placement-v1 episode.

    Attributes:
        static: v0's per-instance parts (sizes, reference, feature scales).
        v1: the instance's :class:`StaticPartsV1`.
        witness: the witness completion (its cursor is the episode's ``t``).
        t: decisions made.
        mask: ``[max_machines]`` bool, allowed machines for slot ``t``; ``real_mask`` its first ``M``.
        load_s, held: per machine, compute seconds per micro-batch and slots placed on it.
        replica_machines: machines holding a placed layer of the open replica.
        invalid_actions, ended, dead_end: as in v0 (a v1 episode never dead-ends).
        placement, machine_features, layer_features, layer_machine, globals_, cursor, views:
            :class:`hulk_env.env.state.EpisodeArrays`.
        pred_links, ring_links: ``[M, 2]`` views of the predecessor and ring link columns.
        pred_rows: machines whose ``holds_predecessor`` is set; ``slack_epoch``, ``stash_k``,
            ``witness_machine``, ``pred_machine``, ``ring_machine``: what the v1 columns show.
    """

    static: StaticParts
    v1: StaticPartsV1
    witness: Witness
    mask: np.ndarray
    real_mask: np.ndarray
    load_s: list[float]
    held: list[int]
    t: int = 0
    replica_machines: list[int] = field(default_factory=list)
    in_replica: list[bool] = field(default_factory=list)
    invalid_actions: int = 0
    ended: bool = False
    dead_end: bool = False
    pred_links: np.ndarray | None = None
    ring_links: np.ndarray | None = None
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
        mask=mask,
        real_mask=mask[:m],
        load_s=[0.0] * m,
        held=[0] * m,
        in_replica=[False] * m,
        **working_arrays(base, static.machine_features),
    )
    s.pred_links = s.machine_features[:m, M_PRED : M_PRED + 2]
    s.ring_links = s.machine_features[:m, M_RING : M_RING + 2]
    s.slack_epoch, s.stash_k = s.witness.epoch, s.witness.k
    s.globals_[G_STASH] = s.witness.k / base.num_micro_batches
    s.witness_machine = int(s.witness.placement[0, 0])  # its column is set in the static features
    return s


def clone_state_v1(s: EpisodeStateV1) -> EpisodeStateV1:
    """An independent copy of an episode (its arrays, lists and witness copied; the static parts
    shared, they never change): what :meth:`hulk_env.env.PlacementEnvV1.snapshot` keeps."""
    arrays = {k: getattr(s, k).copy() for k in ("machine_features", "layer_features", "layer_machine", "globals_", "cursor")}
    placement = s.placement.copy()
    mask = s.mask.copy()
    m = s.static.num_machines
    out = replace(
        s, witness=s.witness.clone(), mask=mask, real_mask=mask[:m], load_s=list(s.load_s), held=list(s.held),
        replica_machines=list(s.replica_machines), in_replica=list(s.in_replica), placement=placement,
        views=flat_views(*arrays.values(), placement), **arrays,
    )  # fmt: skip
    out.pred_links = out.machine_features[:m, M_PRED : M_PRED + 2]  # views, as in new_state_v1
    out.ring_links = out.machine_features[:m, M_RING : M_RING + 2]
    return out


def update_mask_v1(s: EpisodeStateV1) -> None:
    """The machines after which the witness can still complete the placement."""
    s.witness.allowed(out=s.real_mask)


def apply_v1(s: EpisodeStateV1, a: int) -> None:
    """Place slot ``s.t`` on ``a`` (an allowed machine): the witness's repair, then the features."""
    static = s.static
    w = s.witness
    w.commit(a)
    views = s.views
    mf, width = views.machine, views.width
    v1 = s.v1
    inverse = v1.inverse_list
    # memory: the witness's slack, and the placed slots at the witness's stash counts
    if w.epoch != s.slack_epoch:
        s.machine_features[: static.num_machines, M_SLACK] = w.slack * v1.inverse_memory
        s.slack_epoch = w.epoch
    else:
        slack = w.slack
        for i in w.touched:
            mf[i * width + M_SLACK] = float(slack[i]) * inverse[i]
    row_a = a * width
    if not s.in_replica[a]:
        s.in_replica[a] = True
        s.replica_machines.append(a)
        mf[row_a + M_IN_REPLICA] = 1.0
    if w.k != s.stash_k:  # the open replica's placed layers stash another number of micro-batches
        placed = w.placed_bytes
        for i in s.replica_machines:
            mf[i * width + M_FREE] = 1.0 - placed(i) * inverse[i]
        s.stash_k = w.k
        views.globals_[G_STASH] = w.k / static.num_micro_batches
    else:
        mf[row_a + M_FREE] = 1.0 - w.placed_bytes(a) * inverse[a]
    load = s.load_s[a] + v1.train_rows[s.t % static.num_layers][a]
    s.load_s[a] = load
    held = s.held[a] + 1
    s.held[a] = held
    mf[row_a + M_LOAD] = load / (load + static.balanced_s)
    mf[row_a + M_HELD] = held / s.placement.size
    layer_next = advance(s, a)
    if layer_next < 0:
        return
    if layer_next == 0:  # a new replica: nothing of it is placed yet
        for i in s.replica_machines:
            mf[i * width + M_IN_REPLICA] = 0.0
            s.in_replica[i] = False
        s.replica_machines = []
        s.stash_k = w.k
        views.globals_[G_STASH] = w.k / static.num_micro_batches
    own = w.row[layer_next]  # the witness's own machine for the next slot
    if own != s.witness_machine:
        mf[s.witness_machine * width + M_WITNESS] = 0.0
        mf[own * width + M_WITNESS] = 1.0
        s.witness_machine = own
    rows = s.pred_rows
    pred = rows[0] if rows else -1
    if pred != s.pred_machine:
        _link_columns(s, s.pred_links, pred)
        s.pred_machine = pred
    t = s.t
    ring = views.placement[t - static.num_layers] if t >= static.num_layers else -1
    if ring != s.ring_machine:
        _link_columns(s, s.ring_links, ring)
        s.ring_machine = ring


def adopt_witness_v1(s: EpisodeStateV1, placement: np.ndarray) -> bool:
    """Make ``placement`` the episode's witness (:meth:`hulk_env.completion.Witness.adopt`) and
    bring the columns that read the witness and the mask up to date; whether it was adopted."""
    w = s.witness
    if not w.adopt(placement):
        return False
    static, v1 = s.static, s.v1
    m = static.num_machines
    mf = s.machine_features
    mf[:m, M_SLACK] = w.slack * v1.inverse_memory
    s.slack_epoch = w.epoch
    if s.t < s.placement.size:
        placed = np.array([w.placed_bytes(i) for i in range(m)])
        mf[:m, M_FREE] = 1.0 - placed * v1.inverse_memory
        s.stash_k = w.k
        s.globals_[G_STASH] = w.k / static.num_micro_batches
        own = w.own_machine()
        if own != s.witness_machine:
            mf[s.witness_machine, M_WITNESS] = 0.0
            mf[own, M_WITNESS] = 1.0
            s.witness_machine = own
        w.allowed(out=s.real_mask)
    return True


def _link_columns(s: EpisodeStateV1, block: np.ndarray, source: int) -> None:
    if source < 0:
        block[:] = 0.0
    else:
        block[:] = s.v1.link_rows(source)


def fallback_machine_v1(s: EpisodeStateV1) -> int:
    """The machine an invalid action is replaced by: the machine of the current layer's first
    predecessor in its replica if allowed (no new link, no new stage), else the witness's own
    machine for the slot (always allowed)."""
    a = predecessor_machine(s)
    return a if a >= 0 else s.witness.own_machine()
