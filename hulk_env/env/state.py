"""An episode's state and its dynamics: the action mask, placing a slot, the fallback machine.

Slots are placed replica-major, topological within a replica (see
:class:`hulk_env.env.PlacementEnv`); every function here updates one :class:`EpisodeState` in
place with O(M) work per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from hulk_env.env.observation import (
    GLOBAL_INDEX,
    LAYER_FEATURES,
    LAYER_INDEX,
    MACHINE_INDEX,
    StaticParts,
)
from hulk_env.rewards import UNPLACED

# Columns the per-step code writes (plain ints: no dict lookups on the hot path).
M_FREE, M_LOAD, M_HELD = MACHINE_INDEX["free_memory"], MACHINE_INDEX["load"], MACHINE_INDEX["layers_held"]
M_IN_REPLICA, M_PRED = MACHINE_INDEX["in_replica"], MACHINE_INDEX["holds_predecessor"]
L_PLACED, L_CURRENT = LAYER_INDEX["placed"], LAYER_INDEX["current"]
G_PROGRESS, G_REPLICA, G_STASH = GLOBAL_INDEX["progress"], GLOBAL_INDEX["replica"], GLOBAL_INDEX["stash"]
LAYER_WIDTH = len(LAYER_FEATURES)


@dataclass(kw_only=True)
class EpisodeArrays:
    """An episode's placement and working observation arrays (v0's and v1's states alike; made
    by :func:`working_arrays`).

    Attributes:
        placement: ``[D, L]`` machine per slot, ``-1`` unplaced.
        machine_features, layer_features, layer_machine, globals_, cursor: working observation
            arrays (the observation copies them).
        views: :class:`FlatViews` of them and the placement (the per-step scalar writes).
    """

    placement: np.ndarray
    machine_features: np.ndarray
    layer_features: np.ndarray
    layer_machine: np.ndarray
    globals_: np.ndarray
    cursor: np.ndarray
    views: FlatViews


@dataclass(kw_only=True)
class EpisodeState(EpisodeArrays):
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
            layers on each machine (what grows when the replica's stash count grows; under
            plan settings at each machine's rate, ``StaticParts.plan_stash_bytes``).
        depth: distinct machines of the current replica.
        stash_count: micro-batches the current replica stashes now (``min(m, depth)`` for
            1F1B, ``m`` for GPipe).
        mask: ``[max_machines]`` bool, valid machines for the next slot.
        invalid_actions: invalid actions so far.
        ended: the episode has ended (terminated or truncated).
        dead_end: it ended because no machine could take the next layer.
        pred_rows: machines whose ``holds_predecessor`` feature is set.
        placement, machine_features, layer_features, layer_machine, globals_, cursor, views:
            :class:`EpisodeArrays`.
    """

    static: StaticParts
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
    pred_rows: tuple[int, ...] = ()


class FlatViews(NamedTuple):
    """Flat ``memoryview``s of an episode's working arrays: a scalar write through one costs a
    quarter of a numpy item assignment (the same float32 rounding), and a step makes a dozen.

    Attributes:
        machine: ``machine_features`` row-major; ``width`` its columns (machine ``i``, column
            ``c`` is item ``i * width + c``).
        layer: ``layer_features`` row-major (``len(LAYER_FEATURES)`` columns).
        layer_machine, globals_, cursor: those arrays.
        placement: the ``[D, L]`` placement row-major (slot ``t`` is item ``t``).
    """

    machine: memoryview
    width: int
    layer: memoryview
    layer_machine: memoryview
    globals_: memoryview
    cursor: memoryview
    placement: memoryview


def flat_views(
    machine_features: np.ndarray, layer_features: np.ndarray, layer_machine: np.ndarray, globals_: np.ndarray,
    cursor: np.ndarray, placement: np.ndarray,
) -> FlatViews:
    """:class:`FlatViews` of freshly made (C-contiguous) working arrays."""
    return FlatViews(
        memoryview(machine_features.reshape(-1)),
        machine_features.shape[1],
        memoryview(layer_features.reshape(-1)),
        memoryview(layer_machine),
        memoryview(globals_),
        memoryview(cursor),
        memoryview(placement.reshape(-1)),
    )


def working_arrays(static: StaticParts, machine_features: np.ndarray) -> dict[str, Any]:
    """An episode's fresh working arrays at its start (v0 and v1 alike), as keyword arguments of
    its state: the placement, the observed per-step arrays (``machine_features`` is the version's
    table at the start) and their :class:`FlatViews`."""
    placement = np.full((static.data_parallel, static.num_layers), UNPLACED, dtype=np.int64)
    arrays = {
        "machine_features": machine_features.copy(),
        "layer_features": static.layer_features.copy(),
        "layer_machine": static.layer_machine.copy(),
        "globals_": static.globals_.copy(),
        "cursor": np.zeros(1, dtype=np.float32),
    }
    return {"placement": placement, **arrays, "views": flat_views(*arrays.values(), placement)}


def new_state(static: StaticParts, max_machines: int) -> EpisodeState:
    """The state at the start of an episode (nothing placed; the mask not yet set)."""
    m = static.num_machines
    return EpisodeState(
        static=static,
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
        **working_arrays(static, static.machine_features),
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


def observation(s: EpisodeState | Any) -> dict[str, np.ndarray]:
    """The keys v0 and v1 observe alike, as fresh arrays (each version adds its keys about
    pairs of machines: a dict literal here and item assignments there beat merging dicts)."""
    static = s.static
    return {
        "machine_mask": static.machine_mask.copy(),
        "machine_features": s.machine_features.copy(),
        "layer_mask": static.layer_mask.copy(),
        "layer_features": s.layer_features.copy(),
        "layer_machine": s.layer_machine.copy(),
        "edges": static.edges.copy(),
        "edge_mask": static.edge_mask.copy(),
        "cursor": s.cursor.copy(),
        "globals": s.globals_.copy(),
        "action_mask": s.mask.astype(np.float32),
    }


def update_mask(s: EpisodeState) -> None:
    """Set ``s.mask`` for slot ``s.t`` (exact memory rule, see :class:`hulk_env.env.PlacementEnv`;
    under plan settings with each machine's own slot rates, as ``cost.memory_use_bytes``)."""
    static = s.static
    m = static.num_machines
    layer = s.t % static.num_layers
    free = static.capacity_bytes - s.used_bytes
    if static.plan_state_bytes is None:
        state_b, stash_b = static.state_bytes[layer], static.stash_bytes[layer]
    else:  # plan settings: every machine its own rates ([M] rows; the same formulas below)
        state_b, stash_b = static.plan_state_bytes[layer], static.plan_stash_bytes[layer]
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
    layer = s.t % static.num_layers
    views = s.views
    mf, width = views.machine, views.width
    used = s.used_bytes
    if not s.in_replica[a]:
        s.depth += 1
        s.in_replica[a] = True
        mf[a * width + M_IN_REPLICA] = 1.0
        if not static.gpipe and s.depth <= static.num_micro_batches:
            # 1F1B: the stash count min(m, depth) grows with the new machine.
            if s.depth > 1:
                used += s.replica_stash_bytes
                cap = static.memory_bytes
                s.machine_features[: static.num_machines, M_FREE] = (cap - used) / cap
            s.stash_count = s.depth
            views.globals_[G_STASH] = s.depth / static.num_micro_batches
    if static.plan_state_bytes is None:
        stash = static.stash_bytes[layer]
        used[a] += static.state_bytes[layer] + s.stash_count * stash
    else:
        stash = float(static.plan_stash_bytes[layer, a])
        used[a] += float(static.plan_state_bytes[layer, a]) + s.stash_count * stash
    s.replica_stash_bytes[a] += stash
    load = s.load_s[a] + static.train_s[layer, a]
    s.load_s[a] = load
    held = s.held[a] + 1
    s.held[a] = held
    cap_a = static.memory_bytes[a]
    row = a * width
    mf[row + M_FREE] = (cap_a - used[a]) / cap_a
    mf[row + M_LOAD] = load / (load + static.balanced_s)
    mf[row + M_HELD] = held / s.placement.size
    if advance(s, a) == 0:  # a new replica: nothing of it is placed yet
        s.in_replica[:] = False
        s.replica_stash_bytes[:] = 0.0
        s.depth = 0
        s.machine_features[:, M_IN_REPLICA] = 0.0
        if not static.gpipe:
            s.stash_count = 0
            views.globals_[G_STASH] = 0.0


def advance(s: EpisodeState | Any, a: int) -> int:
    """The part of placing slot ``s.t`` on ``a`` that v0 and v1 share: the placement, the cursor
    (``s.t`` and its observed array), the layer features, ``layer_machine``, ``progress``, the ``replica`` global and the
    ``holds_predecessor`` column (its index is the same in both versions' tables).

    Returns:
        the layer of the next slot (0: it opens a new replica, whose own columns the caller
        resets), or -1 when the episode is complete.
    """
    static = s.static
    views = s.views
    mf, width, lf = views.machine, views.width, views.layer
    slot = s.t
    views.placement[slot] = a
    s.t = t = slot + 1
    views.cursor[0] = t
    slots = s.placement.size
    lf[slot * LAYER_WIDTH + L_PLACED] = 1.0
    lf[slot * LAYER_WIDTH + L_CURRENT] = 0.0
    views.layer_machine[slot] = a
    views.globals_[G_PROGRESS] = t / slots
    for i in s.pred_rows:
        mf[i * width + M_PRED] = 0.0
    if t == slots:
        s.pred_rows = ()
        return -1
    lf[t * LAYER_WIDTH + L_CURRENT] = 1.0
    n_layers = static.num_layers
    layer_next = t % n_layers
    if layer_next == 0:
        views.globals_[G_REPLICA] = t // n_layers / max(static.data_parallel - 1, 1)
    placed = views.placement
    first = t - layer_next  # the replica's slot of layer 0
    s.pred_rows = rows = tuple([placed[first + u] for u in static.predecessors[layer_next]])
    for i in rows:
        mf[i * width + M_PRED] = 1.0
    return layer_next


def predecessor_machine(s: EpisodeState | Any) -> int:
    """The machine of the current layer's first predecessor in its replica if the mask allows it
    (no new link, no new pipeline stage: the fallbacks' first choice), else -1."""
    static = s.static
    layer = s.t % static.num_layers
    preds = static.predecessors[layer]
    if preds:
        a = s.views.placement[s.t - layer + preds[0]]
        if s.mask[a]:
            return a
    return -1


def fallback_machine(s: EpisodeState) -> int:
    """The machine an invalid action is replaced by (``invalid_action="fallback"``).

    The machine of the current layer's first predecessor in the same replica if it is valid
    (no new link, no new pipeline stage), else the valid machine with the most free memory
    (lowest index on ties). The mask is never empty here: an empty one ends the episode.
    """
    a = predecessor_machine(s)
    if a >= 0:
        return a
    static = s.static
    m = static.num_machines
    free = np.where(s.mask[:m], static.capacity_bytes - s.used_bytes, -np.inf)
    return int(np.argmax(free))
