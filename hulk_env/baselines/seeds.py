"""Starting points of the searches: the heuristics' placements, within a share of the budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.chain_dp import latency_chain_dp
from hulk_env.baselines.common import Evaluator
from hulk_env.baselines.greedy import compute_greedy
from hulk_env.baselines.naive import naive
from hulk_env.baselines.partition import partition
from hulk_env.instance import Instance

SEED_METHODS: tuple[tuple[str, Callable[..., PlacementResult]], ...] = (
    ("naive", naive),
    ("compute-greedy", compute_greedy),
    ("latency-chain-dp", latency_chain_dp),
    ("partition", partition),
)
# Share of a search's budget the heuristics may spend building its starting points.
SEED_BUDGET_SHARE = 0.25


def heuristic_seeds(instance: Instance, seed: int, budget: int | None) -> tuple[list[np.ndarray], int]:
    """The feasible placements of the heuristics, and the cost evaluations they spent.

    With a ``budget``, the heuristics share ``SEED_BUDGET_SHARE`` of it equally (each evaluates
    its most promising candidates first), so a search never overruns its budget.
    """
    each = None if budget is None else int(budget * SEED_BUDGET_SHARE) // len(SEED_METHODS)
    placements, used = [], 0
    for _, method in SEED_METHODS:
        result = method(instance, seed, each)
        used += result.cost_evals
        if result.feasible:
            placements.append(result.placement)
    return placements, used


def search_start(
    instance: Instance, seed: int, budget: int, given: Sequence[np.ndarray] = ()
) -> tuple[list[np.ndarray], int, Evaluator | None]:
    """What ``genetic`` and ``anneal`` start from: the ``given`` placements (e.g. a policy's,
    first), then the heuristics' placements, the evaluations the heuristics spent, and an
    evaluator holding the rest of ``budget`` (``None`` when no start is feasible)."""
    starts, used = heuristic_seeds(instance, seed, budget)
    starts = [np.asarray(p, dtype=np.int64) for p in given] + starts
    return starts, used, (Evaluator(instance, budget - used) if starts else None)
