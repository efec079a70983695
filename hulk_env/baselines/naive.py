"""The placement a user gets without any optimisation (the paper's "without Hulk" reference).

Machines are taken in listed order. Each replica in turn takes the next ``k`` machines (wrapping
around, sharing machines with earlier replicas if it must) and splits its layers evenly and
contiguously over them, with the smallest ``k`` whose split fits in the memory left.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import (
    PlacementResult,
    capacity_reason,
    layer_memory_bytes,
    stash_count,
)
from hulk_env.instance import Instance


def even_split(num_layers: int, num_stages: int) -> np.ndarray:
    """``[L]`` stage index of each layer when ``L`` layers are split evenly and contiguously."""
    return np.concatenate(
        [np.full(len(chunk), i) for i, chunk in enumerate(np.array_split(np.arange(num_layers), num_stages))]
    ).astype(np.int64)


def naive(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """Listed machines, even contiguous split over as few as memory needs.

    Args:
        instance: the cluster and workload.
        seed: unused (deterministic); kept for the common method signature.
        budget: unused.
    """
    del seed, budget
    c, w = instance.cluster, instance.workload
    m, n_layers = c.num_machines, w.num_layers
    free = c.memory_bytes.astype(np.float64).copy()
    placement = np.zeros((w.data_parallel, n_layers), dtype=np.int64)
    cursor = 0
    for r in range(w.data_parallel):
        for k in range(1, min(m, n_layers) + 1):
            stages = even_split(n_layers, k)
            machines = (cursor + np.arange(k)) % m
            need = np.bincount(stages, layer_memory_bytes(instance, stash_count(instance, k)), k)
            if np.all(need <= free[machines]):
                free[machines] -= need
                placement[r] = machines[stages]
                cursor = (cursor + k) % m
                break
        else:
            return PlacementResult("naive", None, 0, capacity_reason(instance))
    return PlacementResult("naive", placement, 0)
