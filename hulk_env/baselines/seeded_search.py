"""The frame ``genetic`` and ``anneal`` share: start from the heuristics, search, return the best.

A seeded search is a loop ``(instance, starts, evaluator, rng) -> None`` that evaluates every
candidate through one budgeted :class:`~hulk_env.baselines.common.Evaluator` until it is
exhausted. :func:`run_seeded_search` gives the loop its starting points
(:func:`~hulk_env.baselines.seeds.search_start`: given placements first, then the heuristics'
within a quarter of the budget) and turns the evaluator's best into a
:class:`~hulk_env.baselines.base.PlacementResult` counting every evaluation, the heuristics'
included. The best placement seen is returned, so a search is never worse than its best start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.common import Evaluator
from hulk_env.baselines.seeds import search_start
from hulk_env.feasibility import capacity_reason
from hulk_env.instance import Instance

DEFAULT_BUDGET = 20_000  # cost evaluations in all, the heuristics' included

SearchLoop = Callable[[Instance, list[np.ndarray], Evaluator, np.random.Generator], None]


def run_seeded_search(
    name: str,
    loop: SearchLoop,
    instance: Instance,
    seed: int = 0,
    budget: int | None = None,
    starts: Sequence[np.ndarray] = (),
) -> PlacementResult:
    """Run ``loop`` from the heuristics' placements and return its best as method ``name``.

    Args:
        name: the method's registered name (``PlacementResult.method``).
        loop: the search; it must evaluate its starts first and stop when the evaluator is
            exhausted.
        instance: the cluster and workload.
        seed: seeds every random choice (the heuristics' and the loop's ``rng``).
        budget: cost evaluations in all, the heuristics' included (default 20,000).
        starts: placements to start from besides the heuristics' (e.g. a policy's), first.

    Returns:
        The fastest memory-feasible placement the loop evaluated; the first start when the
        heuristics left no budget to evaluate any; ``None`` with the capacity reason when no
        start is feasible or nothing the loop evaluated fits.
    """
    budget = DEFAULT_BUDGET if budget is None else int(budget)
    rng = np.random.default_rng(seed)
    starts, used, evaluator = search_start(instance, seed, budget, starts)
    if evaluator is None:
        return PlacementResult(name, None, used, capacity_reason(instance))
    loop(instance, starts, evaluator, rng)
    evals = used + evaluator.evals
    if evaluator.best_placement is None and evaluator.evals == 0:  # no budget left for the starts
        return PlacementResult(name, starts[0], evals)
    return replace(evaluator.result(name), cost_evals=evals)
