"""Region-aligned replicas: every layer's data-parallel ring inside one region.

On memory-tight clusters with several replicas (a model that needs most of the cluster's
memory, so every replica spans many machines and several regions) data-parallel sync dominates
the iteration: each layer's gradients go round a ring over the ``D`` machines that hold it, and
a ring that crosses a WAN link is slow. The chain layouts of :mod:`~hulk_env.baselines.chains`
give each replica its own share of a chain (blocks, interleaved) and split the shares each by
its own stage DP, so the replicas change region at different layers and many rings cross
regions. Seen on validation (val-xl-v0/35, 128 machines x LLaMA-65B x 4 replicas, 79% of the
cluster's memory): ``anneal``'s winner at 50,000 evaluations puts the same layers of every
replica in the same region, region after region, with data-parallel sync 90 of its 111 s
against the polish's 146 s.

The family: regions in the order a nearest-latency chain first visits them (one order per
start machine); each region's machines dealt to the replicas in turn (largest memory first, a
snake order so that every replica gets a like share); then layers filled in order, each on its
replica's current machine while it has room (a ``fill`` fraction of its memory), all replicas
moving to the next region together when one runs out of machines there. The cost model judges
the candidates (the fill leaves compute balance to the search that polishes them).
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.chains import Candidate
from hulk_env.baselines.common import NeighbourOrder, nearest_neighbour_chain
from hulk_env.feasibility import layer_memory_bytes, stash_count
from hulk_env.instance import Instance

# Fractions of a machine's memory the fill may use: full (memory-tight instances), and looser
# ones that spread the layers over more machines (more FLOP/s, deeper pipelines).
FILLS = (1.0, 0.8, 0.6)


def region_order(instance: Instance, start: int, order: NeighbourOrder | None = None) -> list[int]:
    """The regions in the order the nearest-latency chain from ``start`` first visits them (the
    walk stops once every region is seen: the rest of the chain cannot change the order)."""
    regions = np.asarray(instance.cluster.region_index)
    seen: dict[int, None] = {}
    total = len(np.unique(regions))

    def all_seen(_: int, machine: int) -> bool:
        seen.setdefault(int(regions[machine]))
        return len(seen) == total

    nearest_neighbour_chain(instance, start, order=order, stop=all_seen)
    return list(seen)


def deal_machines(
    instance: Instance, machines: np.ndarray, slots: np.ndarray, held: list[float]
) -> list[list[int]]:
    """``machines`` dealt to the ``D`` replicas so that their layer ``slots`` stay level: most
    slots first, each to the replica holding the fewest so far (``held``, updated; carried
    over the regions, so that no replica falls behind); each replica's list in dealing order."""
    c, d = instance.cluster, instance.data_parallel
    ranked = sorted((int(m) for m in machines), key=lambda m: (-slots[m], -c.flops[m], m))
    shares: list[list[int]] = [[] for _ in range(d)]
    for m in ranked:
        r = min(range(d), key=lambda k: (held[k], k))
        shares[r].append(m)
        held[r] += float(slots[m])
    return shares


def aligned_fill(instance: Instance, regions: list[int], fill: float, order: NeighbourOrder) -> np.ndarray | None:
    """``[D, L]``: each replica's layers filled in order over its share of each region in turn
    (see the module docstring), a machine taking layers while ``fill`` of its memory has room;
    a replica whose share runs out goes on on the nearest machine with room left
    (``order``); ``None`` when there is none. With level shares the replicas change region at
    (about) the same layer."""
    c, d, n = instance.cluster, instance.data_parallel, instance.num_layers
    need = layer_memory_bytes(instance, stash_count(instance, n))
    free = fill * np.asarray(c.memory_bytes, dtype=np.float64)
    slots = np.floor(free / float(need.max()))
    region_of = np.asarray(c.region_index)
    chains: list[list[int]] = [[] for _ in range(d)]
    held = [0.0] * d
    for region in regions:
        for r, share in enumerate(deal_machines(instance, np.flatnonzero(region_of == region), slots, held)):
            chains[r] += share
    placement = np.empty((d, n), dtype=np.int64)
    for r, chain in enumerate(chains):
        at = 0
        here = chain[0] if chain else int(np.argmax(free))
        for layer in range(n):
            while free[here] < need[layer] and at + 1 < len(chain):
                at += 1
                here = chain[at]
            if free[here] < need[layer]:  # share used up: the nearest machine with room
                room = order.row(here)[free[order.row(here)] >= need[layer]]
                if len(room) == 0:
                    return None
                here = int(room[0])
            placement[r, layer] = here
            free[here] -= need[layer]
    return placement


def region_aligned_candidates(instance: Instance, starts: list[int], order: NeighbourOrder | None = None) -> list[Candidate]:
    """The region-aligned placements of each fill of :data:`FILLS` and each distinct region
    order: from the ``starts`` machines, then from one machine of each region (its first), as
    the order decides which regions' links the pipelines cross (on val-xl-v0/35 the best order
    is 36% faster than the worst); estimate 0 (the cost model ranks them). ``order``: a
    :class:`~hulk_env.baselines.common.NeighbourOrder` of all the machines already in use (its
    sorted rows are reused)."""
    if instance.data_parallel < 2:
        return []
    order = order or NeighbourOrder(instance)
    _, firsts = np.unique(np.asarray(instance.cluster.region_index), return_index=True)
    out: list[Candidate] = []
    seen: set[tuple[int, ...]] = set()
    for start in dict.fromkeys([int(s) for s in starts] + sorted(int(f) for f in firsts)):
        regions = tuple(region_order(instance, start, order))
        if regions in seen:
            continue
        seen.add(regions)
        for fill in FILLS:
            placement = aligned_fill(instance, list(regions), fill, order)
            if placement is not None:
                out.append((0.0, placement))
    return out
