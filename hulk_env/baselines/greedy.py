"""``compute-greedy``: fastest machines first, layers split in proportion to FLOP/s.

What a user who looks only at GPU speed would do. Machines are sorted by FLOP/s (fastest first);
with ``D`` replicas they are dealt round-robin, so replica ``r`` gets sorted machines
``r, r + D, ...`` and every replica gets a similar share of compute. For each ``k``, every replica
splits its layers contiguously over its ``k`` fastest machines with stage ``j`` taking layers
until its share of the FLOPs, ``F_j / sum F``, is reached or its memory is full. When the
replicas do not fit apart, all replicas share the fastest ``k`` machines. Each ``k`` gives one
candidate; the cost model picks the best (it is the only place the network is looked at). When
memory is so tight that no proportional split fits, the replicas fill the machines first-fit,
fastest first, and when even that fails the ``naive`` placement is returned.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.chain_dp import with_naive_fallback
from hulk_env.baselines.common import Evaluator, evaluate_candidates
from hulk_env.feasibility import layer_memory_bytes, stash_count
from hulk_env.instance import Instance
from hulk_env.reference import fill_in_order

NAME = "compute-greedy"


def proportional_split(
    instance: Instance, machines: np.ndarray, free: np.ndarray, share: int = 1
) -> np.ndarray | None:
    """``[L]`` machine of each layer: contiguous stages sized by FLOP/s share, within memory.

    Args:
        instance: the cluster and workload.
        machines: the stages' machines in pipeline order.
        free: ``[M]`` free memory per machine.
        share: replicas that will run this same split (memory scales).

    Returns:
        The row, or ``None`` when the layers do not fit. Every machine gets at least one layer
        while layers remain, so the pipeline depth is at most ``len(machines)``.
    """
    w, c = instance.workload, instance.cluster
    n = w.num_layers
    machines = np.asarray(machines, dtype=np.int64)
    need = share * layer_memory_bytes(instance, stash_count(instance, min(len(machines), n)))
    flops_cum = np.cumsum(w.flops)
    targets = np.cumsum(c.flops[machines]) / c.flops[machines].sum() * flops_cum[-1]
    row = np.empty(n, dtype=np.int64)
    layer = 0
    for j, mach in enumerate(machines):
        room = free[mach]
        start = layer
        last = j == len(machines) - 1
        while layer < n and need[layer] <= room:
            # Stop at the FLOP target (rounded to the nearer layer edge), but take at least one.
            if not last and layer > start:
                before = flops_cum[layer - 1]
                if before >= targets[j] or flops_cum[layer] - targets[j] > targets[j] - before:
                    break
            room -= need[layer]
            row[layer] = mach
            layer += 1
        if layer == n:
            return row
    return None


def compute_greedy(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """Fastest machines first, FLOP-proportional contiguous split; best ``k`` by the cost model.

    Args:
        instance: the cluster and workload.
        seed: unused (deterministic); kept for the common method signature.
        budget: the most candidates evaluated (default: one per ``k``).
    """
    del seed
    c, w = instance.cluster, instance.workload
    d = w.data_parallel
    order = np.lexsort((np.arange(c.num_machines), -c.flops))  # fastest first, stable
    dealt = [order[r::d] for r in range(d)]
    candidates = []
    for k in range(1, min(c.num_machines, w.num_layers) + 1):
        free = c.memory_bytes.astype(np.float64).copy()
        rows = [
            proportional_split(instance, dealt[r][:k], free) if k <= len(dealt[r]) else None
            for r in range(d)
        ]
        if all(row is not None for row in rows):
            candidates.append(np.stack(rows))
        if d > 1:
            shared = proportional_split(instance, order[:k], free, share=d)
            if shared is not None:
                candidates.append(np.tile(shared, (d, 1)))
    if not candidates:
        free = c.memory_bytes.astype(np.float64).copy()
        rows = [fill_in_order(instance, order, free) for _ in range(d)]
        if all(row is not None for row in rows):
            candidates.append(np.stack(rows))
    evaluator = Evaluator(instance, budget)
    evaluate_candidates(evaluator, candidates)
    return with_naive_fallback(instance, evaluator, NAME)
