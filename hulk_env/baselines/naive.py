"""``naive``: the reference placement (:mod:`hulk_env.reference`) as a placement method."""

from __future__ import annotations

from hulk_env.baselines.base import PlacementResult
from hulk_env.feasibility import capacity_reason
from hulk_env.instance import Instance
from hulk_env.reference import naive_placement


def naive(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """Listed machines, even contiguous split over as few as memory needs.

    Args:
        instance: the cluster and workload.
        seed: unused (deterministic); kept for the common method signature.
        budget: unused.
    """
    del seed, budget
    placement = naive_placement(instance)
    if placement is None:
        return PlacementResult("naive", None, 0, capacity_reason(instance))
    return PlacementResult("naive", placement, 0)
