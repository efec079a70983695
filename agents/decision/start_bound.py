"""A cheap screen of the greedy decision's start machines: each start's bottleneck bound.

The decision (:func:`agents.decision.inference.choose_starts`) builds the stage DP's plan from a few
first-slot machines; which few matters most (on the validation instances, the best of the
network's own 4 + 2 starts was 4.3% slower than the best of every start's plan, geometric mean,
and 40-50% slower on a few). The network ranks starts by local features; this module ranks
them by what a plan from there can at best achieve, for every machine at once in ``O(M x D L)``
numpy work (~30 ms on 512 machines, against ~60-200 ms for one plan).

From start ``s``, take ``s`` and its nearest machines (the order a chain from ``s`` prefers
them: :class:`~hulk_env.baselines.common.NeighbourOrder`'s keys) one by one. For each prefix of
``J`` machines that can hold the ``D`` replicas (memory with a ``J / D``-deep pipeline's stash),
the steady-state time per micro-batch is at least the larger of

- compute: ``D x`` the model's training FLOPs over the prefix's summed FLOP/s (perfect balance);
- traffic: ``D x`` the median cut's bytes over the narrowest link between consecutive machines
  of the prefix (each such link carries a stage boundary);

and the bound is the least of those over the prefixes. It leaves out latency, data-parallel
sync, and that layers come in whole pieces: a screen, not an estimate -- the plans from the
screened starts are then built and judged by the cost model like the network's own.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.common import preference_keys
from hulk_env.baselines.stage_dp import cut_bytes
from hulk_env.cost import train_flops
from hulk_env.feasibility import stash_count
from hulk_env.instance import Instance

_ROWS_PER_BLOCK = 256  # starts sorted at once: a block's keys are 256 x M (bounded memory)


def bottleneck_bounds_s(instance: Instance) -> np.ndarray:
    """``[M]`` seconds per micro-batch: the bound of the plan from each start machine (see the
    module docstring); ``inf`` where no prefix of its nearest machines holds the model."""
    c, w = instance.cluster, instance.workload
    m, d = c.num_machines, instance.data_parallel
    k = min(m, d * instance.num_layers)  # a plan uses at most L machines per replica
    depth = np.maximum(1, np.arange(1, k + 1) // d)  # a replica's pipeline depth on J machines
    stash = np.array([stash_count(instance, int(j)) for j in depth])
    need_bytes = d * (float((w.state_bytes_per_param * w.params).sum()) + stash * float(w.stash_bytes.sum()))
    flops = d * float(train_flops(w).sum())
    cuts = cut_bytes(w)[1:-1]
    cut = d * float(np.median(cuts)) if len(cuts) else 0.0
    out = np.empty(m)
    for lo in range(0, m, _ROWS_PER_BLOCK):
        starts = np.arange(lo, min(m, lo + _ROWS_PER_BLOCK))
        near = _nearest_first(instance, starts)[:, :k]  # [S, K], each row begins with its start
        fits = np.cumsum(c.memory_bytes[near], axis=1) >= need_bytes
        compute = flops / np.cumsum(c.flops[near], axis=1)
        traffic = np.zeros_like(compute)
        if k > 1:
            a, b = near[:, :-1], near[:, 1:]
            narrow = np.minimum(c.bandwidth_bps[a, b], c.bandwidth_bps[b, a])
            traffic[:, 1:] = np.maximum.accumulate(cut / narrow, axis=1)
        out[starts] = np.where(fits, np.maximum(compute, traffic), np.inf).min(axis=1)
    return out


def _nearest_first(instance: Instance, starts: np.ndarray) -> np.ndarray:
    """``[S, M]`` every machine in the order a chain standing on each start prefers it
    (:func:`~hulk_env.baselines.common.preference_keys`: ``NeighbourOrder``'s order), after
    the start itself."""
    every = np.arange(instance.num_machines)
    keys = preference_keys(instance.cluster, starts, every)
    return np.lexsort((*keys, starts[:, None] != every), axis=-1)  # the start itself first


def bound_ranked(instance: Instance, allowed: list[int]) -> list[int]:
    """``allowed`` machines by increasing bound (ties to the lower index), those with no
    finite bound left out."""
    bounds = bottleneck_bounds_s(instance)
    return sorted((int(s) for s in allowed if np.isfinite(bounds[s])), key=lambda s: (bounds[s], s))
