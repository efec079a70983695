"""``exact``: the certified optimum by exhaustive enumeration, for small instances.

Every one of the ``M^(D L)`` placements (contiguous or not, machines shared or not) is evaluated
with the cost model in batches (:func:`hulk_env.generators.exhaustive_search`); the fastest
memory-feasible one is optimal by construction. Instances with more than ``MAX_PLACEMENTS``
placements (or than ``budget``, when given) are refused with a clear reason rather than left
running for hours.
"""

from __future__ import annotations

from hulk_env.baselines.base import PlacementResult
from hulk_env.feasibility import capacity_reason
from hulk_env.generators.enumerate import exhaustive_search, num_placements
from hulk_env.instance import Instance

NAME = "exact"
MAX_PLACEMENTS = 2_000_000


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
    found = exhaustive_search(instance)
    if found.placement is None:
        return PlacementResult(NAME, None, found.cost_evals, "no placement fits in memory; " + capacity_reason(instance))
    return PlacementResult(NAME, found.placement, found.cost_evals)


__all__ = ["MAX_PLACEMENTS", "NAME", "exact", "num_placements"]
