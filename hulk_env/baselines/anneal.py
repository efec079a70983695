"""``anneal``: simulated annealing from the best heuristic placement, batched proposals.

State: a genome (:mod:`~hulk_env.baselines.genome`) started from the fastest of the heuristics'
placements (:mod:`~hulk_env.baselines.seeds`). Each round draws ``PROPOSALS`` neighbours of the
current state (one move each: reassign a stage to another machine, swap two stages' machines,
shift a stage boundary, or, rarely, split a stage onto a new machine; now and then two moves), evaluates them in one batch, and takes the best
of them by the Metropolis rule on the log of the iteration time: always when faster, otherwise
with probability ``exp(-(log t_new - log t_cur) / T)``. The temperature falls geometrically from
``T_START`` (a 2% slower state accepted with probability 1/e) to ``T_END`` over the rounds the
budget allows. The best state seen is returned, so the result is never worse than the start.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.common import Evaluator
from hulk_env.baselines.genome import decode, encode, mutate
from hulk_env.baselines.seeded_search import run_seeded_search
from hulk_env.instance import Instance

NAME = "anneal"
PROPOSALS = 32
T_START = 0.02
T_END = 1e-4


def anneal(
    instance: Instance, seed: int = 0, budget: int | None = None, starts: Sequence[np.ndarray] = ()
) -> PlacementResult:
    """Simulated annealing from the best heuristic (arguments and result:
    :func:`~hulk_env.baselines.seeded_search.run_seeded_search`; default budget 20,000)."""
    return run_seeded_search(NAME, _anneal, instance, seed, budget, starts)


def _anneal(instance: Instance, starts: list[np.ndarray], evaluator: Evaluator, rng: np.random.Generator) -> None:
    """The annealing loop from the fastest of ``starts`` until ``evaluator`` is exhausted."""
    times = evaluator.times(np.stack(starts))
    if not np.isfinite(times.min()):  # no budget left to evaluate the starts
        return
    n_layers, m = instance.num_layers, instance.num_machines
    current = encode(starts[int(np.argmin(times))], m)
    current_time = float(times.min())
    rounds = max(1, (evaluator.remaining or 0) // PROPOSALS)
    cooling = (T_END / T_START) ** (1.0 / rounds)
    temperature = T_START
    while not evaluator.exhausted:
        proposals = [mutate(current, rng, instance, 1 + int(rng.random() < 0.2)) for _ in range(PROPOSALS)]
        t = evaluator.times(np.stack([decode(g, n_layers) for g in proposals]))
        i = int(np.argmin(t))
        if np.isfinite(t[i]):
            delta = np.log(t[i]) - np.log(current_time)
            if delta <= 0 or rng.random() < np.exp(-delta / temperature):
                current, current_time = proposals[i], float(t[i])
        temperature *= cooling
