"""``latency-chain-dp``: nearest-latency machine chains, split optimally by the stage DP.

From every start machine, a greedy nearest-neighbour chain over latency
(:func:`~hulk_env.baselines.common.nearest_neighbour_chain`); every prefix of every chain is
split by the PipeDream/Alpa stage DP (:mod:`~hulk_env.baselines.stage_dp`), both ways round, with
replicas laid out as described in :mod:`~hulk_env.baselines.chains`. Candidates are evaluated with the cost model, most promising (by the DP's estimate)
first, and the fastest feasible one is returned. A DAG workload (encoder-decoder) is split in its
topological order. When no chain split fits in memory (machines too small for the DP's
one-stage-per-machine rule), the ``naive`` placement is returned, so the method answers wherever
``naive`` does.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.chains import Candidate, chain_candidates
from hulk_env.baselines.common import (
    Evaluator,
    dedupe_placements,
    evaluate_candidates,
    nearest_neighbour_chain,
)
from hulk_env.baselines.naive import naive
from hulk_env.instance import Instance

NAME = "latency-chain-dp"


def latency_chain_dp(
    instance: Instance, seed: int = 0, budget: int | None = None
) -> PlacementResult:
    """Best DP split over nearest-latency chains from every start machine.

    Args:
        instance: the cluster and workload.
        seed: unused (deterministic); kept for the common method signature.
        budget: the most candidates evaluated with the cost model (default: all of them).
    """
    del seed
    candidates: list[Candidate] = []
    # Every start, even among look-alike machines of one city: link noise makes their chains
    # differ, and on geo-v0 one start per machine class lost up to 25% on some instances.
    for start in range(instance.num_machines):
        candidates += chain_candidates(instance, nearest_neighbour_chain(instance, start))
    return evaluate_ranked(instance, candidates, budget, NAME)


def evaluate_ranked(
    instance: Instance, candidates: list[Candidate], budget: int | None, method: str
) -> PlacementResult:
    """Evaluate candidates in order of their estimate (within ``budget``); return the best.

    Falls back to the ``naive`` placement when no candidate fits (see the module docstring).
    """
    evaluator = Evaluator(instance, budget)
    order = np.argsort([est for est, _ in candidates], kind="stable")
    placements = dedupe_placements([candidates[i][1] for i in order])
    evaluate_candidates(evaluator, placements)
    return with_naive_fallback(instance, evaluator, method)


def with_naive_fallback(instance: Instance, evaluator: Evaluator, method: str) -> PlacementResult:
    """The evaluator's best placement, or else ``naive``'s (evaluated when the budget allows)."""
    if evaluator.best_placement is None:
        fallback = naive(instance)
        if fallback.feasible:
            evaluator.times(fallback.placement[None])
            if evaluator.best_placement is None:  # no budget left to evaluate it
                return PlacementResult(method, fallback.placement, evaluator.evals)
    return evaluator.result(method)
