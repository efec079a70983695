"""Chains over the fast machines only: multi-replica layouts that skip a cluster's slow tier.

``latency-chain-dp`` walks nearest-latency chains over *every* machine, and lays the replicas
out on them (:mod:`~hulk_env.baselines.chains`: shared, blocks, interleaved, crossed). On small
heterogeneous clusters with several replicas the slow machines of a city sit between its fast
ones on the chain, so the interleaved and crossed layouts (group ``g`` on chain positions ``g,
g + G, ...``) pair a fast machine with a slow one in each data-parallel group; the stage DP
then drops the slow ones (``skips_slow``) from the whole chain, not per group. Seen on
validation (val-xl-v0/49, 16 machines x GPT-3 2.7B x 4 replicas): ``anneal``'s winner at
50,000 evaluations puts two replicas on each fast machine of three regions, replica pairs
crossed between regions -- the crossed layout of a chain over the 200-TFLOP/s machines alone.

This family: for each FLOP/s tier of the cluster above the slowest, the pool of machines at
least that fast; from each given start machine in the pool, the nearest-latency chain over the
pool; every layout of :func:`~hulk_env.baselines.chains.chains_candidates` of those chains. A
constructive family (no search): its candidates go to the cost model like any chain's.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.chains import Candidate, chain_stop, chains_candidates
from hulk_env.baselines.common import NeighbourOrder, nearest_neighbour_chain
from hulk_env.instance import Instance

# FLOP/s tiers at most (the fastest ones: each tier costs one stage DP per start).
MAX_TIERS = 3


def flops_tiers(instance: Instance, max_tiers: int = MAX_TIERS) -> list[float]:
    """The distinct machine FLOP/s above the slowest, fastest last, at most ``max_tiers`` of
    the fastest (a tier's pool: the machines at least that fast)."""
    levels = np.unique(np.asarray(instance.cluster.flops, dtype=np.float64))[1:]
    return levels[-max_tiers:].tolist()


def fast_pools(instance: Instance, max_tiers: int = MAX_TIERS) -> list[np.ndarray]:
    """The machine pools of :func:`flops_tiers` (largest pool first) that can hold ``D``
    pipelines of at least one machine each."""
    flops = np.asarray(instance.cluster.flops)
    pools = [np.flatnonzero(flops >= tier) for tier in flops_tiers(instance, max_tiers)]
    return [p for p in pools if len(p) >= instance.data_parallel]


def fast_chain_candidates(
    instance: Instance, starts: list[int], max_starts: int, max_tiers: int = MAX_TIERS
) -> list[Candidate]:
    """Candidates of the nearest-latency chains over each fast pool (:func:`fast_pools`) from
    its first ``max_starts`` machines in the order of ``starts`` (then the pool's others, by
    index); empty with one replica (the chains of ``latency-chain-dp`` already skip slow
    machines for a single pipeline)."""
    if instance.data_parallel < 2:
        return []
    out: list[Candidate] = []
    make_stop = chain_stop(instance)
    for pool in fast_pools(instance, max_tiers):
        inside = set(pool.tolist())
        picked = list(dict.fromkeys([int(s) for s in starts if int(s) in inside] + pool.tolist()))[:max_starts]
        order = NeighbourOrder(instance, pool)
        chains = [nearest_neighbour_chain(instance, s, pool, order=order, stop=make_stop()) for s in picked]
        out += [c for found in chains_candidates(instance, chains, order=order) for c in found]
    return out
