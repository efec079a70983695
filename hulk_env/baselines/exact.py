"""``exact``: the certified optimum by exhaustive enumeration, for small instances.

Every one of the ``M^(D L)`` placements (contiguous or not, machines shared or not) is evaluated
with the cost model in batches; the fastest memory-feasible one is optimal by construction.
Instances with more than ``MAX_PLACEMENTS`` placements (or than ``budget``, when given) are
refused with a clear reason rather than left running for hours.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import PlacementResult, capacity_reason
from hulk_env.baselines.common import Evaluator
from hulk_env.instance import Instance

NAME = "exact"
MAX_PLACEMENTS = 2_000_000
BATCH = 8192


def num_placements(instance: Instance) -> int:
    """``M^(D L)``, the size of the search space (a Python int: it may be huge)."""
    return instance.num_machines ** (instance.data_parallel * instance.num_layers)


def all_placements(instance: Instance, start: int, stop: int) -> np.ndarray:
    """Placements number ``start .. stop - 1`` in base-``M`` order, as ``[N, D, L]``."""
    m, d, n = instance.num_machines, instance.data_parallel, instance.num_layers
    index = np.arange(start, stop, dtype=np.int64)
    digits = (index[:, None] // (m ** np.arange(d * n - 1, -1, -1, dtype=np.int64))[None, :]) % m
    return digits.reshape(-1, d, n)


def exact(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """The optimal placement by exhaustive search, or a refusal for large instances.

    Args:
        instance: the cluster and workload.
        seed: unused (deterministic); kept for the common method signature.
        budget: the largest search space to enumerate (default ``MAX_PLACEMENTS``).
    """
    del seed
    limit = MAX_PLACEMENTS if budget is None else int(budget)
    total = num_placements(instance)
    if total > limit:
        m, d, n = instance.num_machines, instance.data_parallel, instance.num_layers
        return PlacementResult(
            NAME,
            None,
            0,
            f"instance too large for exhaustive search: {m} machines ^ ({d} replicas x {n} layers) "
            f"= {float(total):.3g} placements > limit {limit:,}; use a smaller instance, raise the "
            "budget, or a search method (genetic, anneal)",
        )
    evaluator = Evaluator(instance, None)
    for start in range(0, total, BATCH):
        evaluator.times(all_placements(instance, start, min(total, start + BATCH)))
    return evaluator.result(NAME, "no placement fits in memory; " + capacity_reason(instance))
