"""An episode's state and its dynamics: the action mask, placing a slot, the fallback machine.

Slots are placed replica-major, topological within a replica (see
:class:`hulk_env.env.PlacementEnv`); every function here updates one :class:`EpisodeState` in
place with O(M) work per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hulk_env.env.observation import GLOBAL_INDEX, LAYER_INDEX, MACHINE_INDEX, StaticParts
from hulk_env.rewards import UNPLACED

# Columns the per-step code writes (plain ints: no dict lookups on the hot path).
M_FREE, M_LOAD, M_HELD = MACHINE_INDEX["free_memory"], MACHINE_INDEX["load"], MACHINE_INDEX["layers_held"]
M_IN_REPLICA, M_PRED = MACHINE_INDEX["in_replica"], MACHINE_INDEX["holds_predecessor"]
L_PLACED, L_CURRENT = LAYER_INDEX["placed"], LAYER_INDEX["current"]
G_PROGRESS, G_REPLICA, G_STASH = GLOBAL_INDEX["progress"], GLOBAL_INDEX["replica"], GLOBAL_INDEX["stash"]


@dataclass
class EpisodeState:
    """The episode: placement so far, memory bookkeeping, working observation arrays.

    Attributes:
        static: the instance's static parts.
        placement: ``[D, L]`` machine per slot, ``-1`` unplaced.
        t: decisions made; the next slot is replica ``t // L``, layer ``t % L``.
        used_bytes: ``[M]`` memory in use with the current replica's current stash count.
        load_s: per machine, compute seconds per micro-batch placed on it.
        held: per machine, slots placed on it.
        in_replica: ``[M]`` machines holding a layer of the current replica.
        replica_stash_bytes: ``[M]`` stash bytes per micro-batch of the current replica's
            layers on each machine (what grows when the replica's stash count grows).
        depth: distinct machines of the current replica.
        stash_count: micro-batches the current replica stashes now (``min(m, depth)`` for
            1F1B, ``m`` for GPipe).
        mask: ``[max_machines]`` bool, valid machines for the next slot.
        invalid_actions: invalid actions so far.
        ended: the episode has ended (terminated or truncated).
        dead_end: it ended because no machine could take the next layer.
        machine_features, layer_features, layer_machine, globals_: working observation arrays.
        pred_rows: machines whose ``holds_predecessor`` feature is set.
    """

    static: StaticParts
    placement: np.ndarray
    t: int
    used_bytes: np.ndarray
    load_s: list[float]
    held: list[int]
    in_replica: np.ndarray
    replica_stash_bytes: np.ndarray
    depth: int
    stash_count: int
    mask: np.ndarray
    invalid_actions: int
    ended: bool
    dead_end: bool
    machine_features: np.ndarray
    layer_features: np.ndarray
    layer_machine: np.ndarray
    globals_: np.ndarray
    pred_rows: tuple[int, ...] = ()


def new_state(static: StaticParts, max_machines: int) -> EpisodeState:
    """The state at the start of an episode (nothing placed; the mask not yet set)."""
    m = static.num_machines
    return EpisodeState(
        static=static,
        placement=np.full((static.data_parallel, static.num_layers), UNPLACED, dtype=np.int64),
        t=0,
        used_bytes=np.zeros(m),
        load_s=[0.0] * m,
        held=[0] * m,
        in_replica=np.zeros(m, dtype=bool),
        replica_stash_bytes=np.zeros(m),
        depth=0,
        stash_count=static.num_micro_batches if static.gpipe else 0,
        mask=np.zeros(max_machines, dtype=bool),
        invalid_actions=0,
        ended=False,
        dead_end=False,
        machine_features=static.machine_features.copy(),
        layer_features=static.layer_features.copy(),
        layer_machine=static.layer_machine.copy(),
        globals_=static.globals_.copy(),
    )


def as_index(action: Any, n: int) -> int:
    """The action as a machine index, or -1 (an invalid action) unless it is an integer-valued
    number in ``[0, n)``: a Python or numpy integer, or a finite float with no fraction, alone or
    in a one-element array. Fractions (1.9, -0.5), NaN, infinities, strings ("1"), booleans and
    longer arrays are invalid actions, never rounded."""
    if type(action) is int:  # the common case first (a step is a few microseconds)
        return action if 0 <= action < n else -1
    value = action
    if isinstance(value, np.ndarray):
        if value.size != 1:
            return -1
        value = value.reshape(-1)[0]
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return -1
    if isinstance(value, float | np.floating) and not (math.isfinite(value) and float(value).is_integer()):
        return -1
    a = int(value)
    return a if 0 <= a < n else -1


def update_mask(s: EpisodeState) -> None:
    """Set ``s.mask`` for slot ``s.t`` (exact memory rule, see :class:`hulk_env.env.PlacementEnv`)."""
    static = s.static
    m = static.num_machines
    layer = s.t % static.num_layers
    free = static.capacity_bytes - s.used_bytes
    state_b, stash_b = static.state_bytes[layer], static.stash_bytes[layer]
    k = s.stash_count
    k_new = k if static.gpipe else min(static.num_micro_batches, s.depth + 1)
    if k_new == k:
        np.greater_equal(free, state_b + k * stash_b, out=s.mask[:m])
        return
    # A machine new to the replica raises its stash count: every machine of the replica must
    # hold (k_new - k) more micro-batches of its layers' stash.
    fits_same = free >= state_b + k * stash_b
    grow_ok = s.depth == 0 or bool(np.all(free >= (k_new - k) * s.replica_stash_bytes))
    if grow_ok:
        s.mask[:m] = (free >= state_b + k_new * stash_b) | (s.in_replica & fits_same)
    else:
        s.mask[:m] = s.in_replica & fits_same


def apply(s: EpisodeState, a: int) -> None:
    """Place slot ``s.t`` on machine ``a`` (a valid action) and update the working arrays."""
    static = s.static
    n_layers = static.num_layers
    slot = s.t
    r, layer = divmod(slot, n_layers)
    mf = s.machine_features
    used = s.used_bytes
    if not s.in_replica[a]:
        s.depth += 1
        s.in_replica[a] = True
        mf[a, M_IN_REPLICA] = 1.0
        if not static.gpipe and s.depth <= static.num_micro_batches:
            # 1F1B: the stash count min(m, depth) grows with the new machine.
            if s.depth > 1:
                used += s.replica_stash_bytes
                cap = static.memory_bytes
                mf[: static.num_machines, M_FREE] = (cap - used) / cap
            s.stash_count = s.depth
            s.globals_[G_STASH] = s.depth / static.num_micro_batches
    stash = static.stash_bytes[layer]
    used[a] += static.state_bytes[layer] + s.stash_count * stash
    s.replica_stash_bytes[a] += stash
    load = s.load_s[a] + static.train_s[layer, a]
    s.load_s[a] = load
    held = s.held[a] + 1
    s.held[a] = held
    s.placement[r, layer] = a
    s.t = t = slot + 1
    slots = s.placement.size
    cap_a = static.memory_bytes[a]
    row = mf[a]
    row[M_FREE] = (cap_a - used[a]) / cap_a
    row[M_LOAD] = load / (load + static.balanced_s)
    row[M_HELD] = held / slots
    lf = s.layer_features
    lf[slot, L_PLACED] = 1.0
    lf[slot, L_CURRENT] = 0.0
    s.layer_machine[slot] = a
    g = s.globals_
    g[G_PROGRESS] = t / slots
    for i in s.pred_rows:
        mf[i, M_PRED] = 0.0
    if t == slots:
        s.pred_rows = ()
        return
    lf[t, L_CURRENT] = 1.0
    r_next, layer_next = divmod(t, n_layers)
    if r_next != r:
        s.in_replica[:] = False
        s.replica_stash_bytes[:] = 0.0
        s.depth = 0
        mf[:, M_IN_REPLICA] = 0.0
        if not static.gpipe:
            s.stash_count = 0
            g[G_STASH] = 0.0
        g[G_REPLICA] = r_next / max(static.data_parallel - 1, 1)
    placed = s.placement[r_next]
    s.pred_rows = rows = tuple(int(placed[u]) for u in static.predecessors[layer_next])
    for i in rows:
        mf[i, M_PRED] = 1.0


def fallback_machine(s: EpisodeState) -> int:
    """The machine an invalid action is replaced by (``invalid_action="fallback"``).

    The machine of the current layer's first predecessor in the same replica if it is valid
    (no new link, no new pipeline stage), else the valid machine with the most free memory
    (lowest index on ties). The mask is never empty here: an empty one ends the episode.
    """
    static = s.static
    r, layer = divmod(s.t, static.num_layers)
    preds = static.predecessors[layer]
    if preds:
        a = int(s.placement[r, preds[0]])
        if s.mask[a]:
            return a
    m = static.num_machines
    free = np.where(s.mask[:m], static.capacity_bytes - s.used_bytes, -np.inf)
    return int(np.argmax(free))
