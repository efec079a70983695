"""The reference placement: what a user gets without any optimisation (the paper's "without Hulk").

Rewards, the env and the generators measure against it, and the ``naive`` baseline
(:mod:`hulk_env.baselines.naive`) returns it. Machines are taken in listed order. Each replica in
turn takes the next ``k`` machines (wrapping around, sharing machines with earlier replicas if
it must) and splits its layers evenly and contiguously over them, with the smallest ``k`` whose
split fits in the memory left. When no even split fits (machines too small for an even share),
the replica fills machines in listed order instead: each takes as many of the next layers as
fit, machines that fit none are skipped.
"""

from __future__ import annotations

import numpy as np

from hulk_env.feasibility import layer_memory_bytes, stash_count
from hulk_env.instance import Instance


def even_split(num_layers: int, num_stages: int) -> np.ndarray:
    """``[L]`` stage index of each layer when ``L`` layers are split evenly and contiguously.

    As ``np.array_split``: the first ``L mod S`` stages take one layer more. Built with one
    ``np.repeat`` (the reference placement calls this for every candidate depth: suite
    generation spent most of its time in ``array_split``'s per-chunk arrays).
    """
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    per_stage, extra = divmod(int(num_layers), int(num_stages))
    sizes = np.full(num_stages, per_stage, dtype=np.int64)
    sizes[:extra] += 1
    return np.repeat(np.arange(num_stages, dtype=np.int64), sizes)


def naive_placement(instance: Instance) -> np.ndarray | None:
    """``[D, L]`` the reference placement (see the module docstring), or ``None`` when it does
    not fit in memory (:func:`hulk_env.feasibility.capacity_reason` says why)."""
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
            row = fill_in_order(instance, (cursor + np.arange(m)) % m, free)
            if row is None:
                return None
            placement[r] = row
            cursor = (int(row[-1]) + 1) % m
    return placement


def reference_fits(instance: Instance) -> bool:
    """Whether the reference placement fits in memory (every generated instance does)."""
    return naive_placement(instance) is not None


def fill_in_order(instance: Instance, order: np.ndarray, free: np.ndarray) -> np.ndarray | None:
    """``[L]`` machines when layers fill ``order`` first-fit and contiguously, or ``None``.

    Uses the stash of the deepest possible pipeline, so the result fits whatever its depth;
    ``free`` is reduced by what the replica takes (only on success).
    """
    n_layers = instance.num_layers
    need = layer_memory_bytes(instance, stash_count(instance, min(len(order), n_layers)))
    row = np.empty(n_layers, dtype=np.int64)
    left = free.copy()
    layer = 0
    for mach in order:
        while layer < n_layers and need[layer] <= left[mach]:
            left[mach] -= need[layer]
            row[layer] = mach
            layer += 1
        if layer == n_layers:
            free[:] = left
            return row
    return None


__all__ = ["even_split", "fill_in_order", "naive_placement", "reference_fits"]
