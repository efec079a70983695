"""Exhaustive enumeration of all ``M^(D L)`` placements: the certified optimum of small instances.

Used by :class:`~hulk_env.generators.ToyGenerator` (its instances' known optimum) and by the
``exact`` baseline. Placements are numbered in base ``M``, row-major over ``[D, L]`` (i.e.
lexicographically) and evaluated in batches with the cost model's fast path; ties go to the
first placement in that order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance

# Beyond this many placements exhaustive_optimum refuses (minutes of numpy).
MAX_EXHAUSTIVE_PLACEMENTS = 2**20
BATCH = 16384


def num_placements(instance: Instance) -> int:
    """``M^(D L)``, the size of the search space (a Python int: it may be huge)."""
    return instance.num_machines ** (instance.data_parallel * instance.num_layers)


def enumerate_placements(index: np.ndarray, m: int, d: int, n: int) -> np.ndarray:
    """``[N, D, L]`` placements number ``index`` in base-``m`` row-major order."""
    digits = m ** np.arange(d * n - 1, -1, -1, dtype=np.int64)
    return ((np.asarray(index, dtype=np.int64)[:, None] // digits) % m).reshape(-1, d, n)


class SearchResult(NamedTuple):
    """The outcome of :func:`exhaustive_search`.

    Attributes:
        placement: ``[D, L]`` the fastest memory-feasible placement, ``None`` when none fits.
        iteration_time_s: its iteration time (``inf`` when none fits).
        cost_evals: placements evaluated (all of them).
    """

    placement: np.ndarray | None
    iteration_time_s: float
    cost_evals: int


def exhaustive_search(instance: Instance, batch: int = BATCH) -> SearchResult:
    """Evaluate every placement (no size check: see :func:`num_placements` first)."""
    m, d, n = instance.num_machines, instance.data_parallel, instance.num_layers
    total = num_placements(instance)
    best_time, best_index = np.inf, -1
    for start in range(0, total, batch):
        placements = enumerate_placements(np.arange(start, min(total, start + batch)), m, d, n)
        times = cost.iteration_times(instance.cluster, instance.workload, placements).penalised()
        i = int(np.argmin(times))
        if times[i] < best_time:
            best_time, best_index = float(times[i]), start + i
    if best_index < 0:
        return SearchResult(None, np.inf, total)
    return SearchResult(enumerate_placements(np.array([best_index]), m, d, n)[0], best_time, total)


def exhaustive_optimum(
    instance: Instance, max_placements: int = MAX_EXHAUSTIVE_PLACEMENTS
) -> tuple[np.ndarray, float]:
    """The fastest memory-feasible placement, by enumerating all ``M^(D*L)`` of them.

    Returns:
        ``(placement [D, L], iteration_time_s)``.

    Raises:
        HulkInputError: more than ``max_placements`` placements, or none fits in memory.
    """
    m, d, n = instance.num_machines, instance.data_parallel, instance.num_layers
    total = num_placements(instance)
    if total > max_placements:
        raise HulkInputError(
            f"{m}^({d}x{n}) = {total} placements is above the exhaustive limit {max_placements}",
            source=instance.instance_id,
        )
    found = exhaustive_search(instance)
    if found.placement is None:
        raise HulkInputError("no placement fits in memory", source=instance.instance_id)
    return found.placement, found.iteration_time_s
