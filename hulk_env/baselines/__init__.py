"""Placement algorithms as plain functions: ``method(instance, seed, budget) -> PlacementResult``.

Every method respects memory: it returns a placement that fits (checked with the cost model), or
``placement=None`` with a one-line ``reason``. ``cost_evals`` counts the placements it evaluated
with the cost model; ``budget`` caps that count (for ``random-best-of-n`` it is the number of
samples, for ``exact`` the largest search space it enumerates).

====================  =========================================================================
``naive``             listed machines, even contiguous split (the paper's "without Hulk")
``random``            one random contiguous placement that fits (random machine order and sizes)
``random-best-of-n``  the best of ``budget`` (1000) random placements, one batch evaluation
``compute-greedy``    fastest machines first, layers split in proportion to FLOP/s
``latency-chain-dp``  nearest-latency chains from every machine, optimal stage DP split
``partition``         spectral clusters of machines by latency, chains through them, stage DP
``genetic``           hybrid genetic search of Yuan et al. (2022), budget 20,000 evaluations
``anneal``            simulated annealing from the best heuristic, budget 20,000 evaluations
``exact``             exhaustive enumeration of all ``M^(D L)`` placements (up to 2e6)
====================  =========================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from hulk_env.baselines.anneal import anneal
from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.chain_dp import latency_chain_dp
from hulk_env.baselines.exact import exact
from hulk_env.baselines.genetic import genetic
from hulk_env.baselines.greedy import compute_greedy
from hulk_env.baselines.naive import naive
from hulk_env.baselines.partition import partition
from hulk_env.baselines.random_search import random_best_of_n, random_placement
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance

Method = Callable[[Instance, int, "int | None"], PlacementResult]

METHODS: dict[str, Method] = {
    "naive": naive,
    "random": random_placement,
    "random-best-of-n": random_best_of_n,
    "compute-greedy": compute_greedy,
    "latency-chain-dp": latency_chain_dp,
    "partition": partition,
    "genetic": genetic,
    "anneal": anneal,
    "exact": exact,
}


def method_names() -> list[str]:
    """Registered method names."""
    return list(METHODS)


def get_method(name: str) -> Method:
    """The method registered as ``name``; an unknown name is a clear error."""
    try:
        return METHODS[name]
    except KeyError:
        raise HulkInputError(
            f"unknown method '{name}'; choose from {', '.join(METHODS)}", field="method"
        ) from None


__all__ = ["METHODS", "Method", "PlacementResult", "get_method", "method_names"]
