"""The searches' shared frame (hulk_env/baselines/seeded_search.py) and genetic's public seam."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines.anneal import anneal
from hulk_env.baselines.common import Evaluator
from hulk_env.baselines.genetic import evolve, genetic
from hulk_env.baselines.seeds import heuristic_seeds
from hulk_env.feasibility import capacity_reason
from hulk_env.generators import fixed_instance


@pytest.mark.parametrize("method", [genetic, anneal])
def test_no_feasible_start_gives_no_placement_and_counts_every_evaluation(method) -> None:
    inst = fixed_instance("cloud-3region", "gpt3-175b")  # does not fit: the heuristics find nothing
    assert capacity_reason(inst)
    unfit = np.zeros((1, inst.num_layers), dtype=np.int64)  # a given start (e.g. a policy's)
    with cost.count_evals() as counter:
        result = method(inst, 0, 300, starts=[unfit])
    assert result.placement is None and "does not fit" in result.reason
    assert result.cost_evals == counter.evals >= 1


class _MostMachines(Evaluator):
    """Another objective through the same budgeted evaluator: use as many machines as possible."""

    def score(self, batch: np.ndarray) -> np.ndarray:
        return -np.array([len(np.unique(p)) for p in batch], dtype=float)


def test_evolve_searches_the_evaluators_objective_within_its_budget() -> None:
    inst = fixed_instance("cloud-3region", "gpt3-1.3b", data_parallel=2)
    starts, _ = heuristic_seeds(inst, 0, None)
    best = []
    for _ in range(2):
        evaluator = _MostMachines(inst, 600)
        evolve(inst, starts, evaluator, np.random.default_rng(3))
        assert evaluator.evals == 600
        best.append(evaluator.best_placement)
    assert len(np.unique(best[0])) > max(len(np.unique(p)) for p in starts)
    np.testing.assert_array_equal(best[0], best[1])  # one seed, one answer
