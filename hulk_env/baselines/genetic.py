"""``genetic``: the hybrid genetic algorithm of Yuan et al., extended to heterogeneous machines.

After Yuan et al., "Decentralized Training of Foundation Models in Heterogeneous Environments"
(NeurIPS 2022), Sec. 4: an evolutionary search over assignments of machines to
(data-parallel group, pipeline stage) slots, with crossover between assignments and a local
search of swap moves on the offspring. Their cost is a graph-partition + open-loop-TSP model on
homogeneous devices with equal stages; here the genome (:mod:`~hulk_env.baselines.genome`) also
carries each replica's stage boundaries, so stages can follow heterogeneous FLOP/s and memory,
and fitness is the cost model's iteration time (``inf`` when memory does not fit).

Per generation: ``POPULATION`` children from tournament-selected parents (column crossover when
their shapes agree, then one to three random moves), (mu + lambda) survival of distinct genomes,
then one round of batched local search (``LOCAL_SEARCH_MOVES`` single moves around the best
genome, the best taken if it improves). The population starts from the heuristics' placements
(:mod:`~hulk_env.baselines.seeds`) and mutated copies of them, so the result is never worse than
the best heuristic; the search stops when the evaluation budget (default 20,000, heuristics
included) is spent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.common import Evaluator
from hulk_env.baselines.genome import Genome, crossover, decode, encode, mutate
from hulk_env.baselines.seeded_search import run_seeded_search
from hulk_env.instance import Instance

NAME = "genetic"
POPULATION = 32
TOURNAMENT = 3
CROSSOVER_RATE = 0.7
LOCAL_SEARCH_MOVES = 48


def genetic(
    instance: Instance, seed: int = 0, budget: int | None = None, starts: Sequence[np.ndarray] = ()
) -> PlacementResult:
    """Hybrid genetic search from the heuristics' placements (arguments and result:
    :func:`~hulk_env.baselines.seeded_search.run_seeded_search`; default budget 20,000)."""
    return run_seeded_search(NAME, evolve, instance, seed, budget, starts)


def evolve(
    instance: Instance, starts: list[np.ndarray], evaluator: Evaluator, rng: np.random.Generator
) -> None:
    """Evolve a population from ``starts`` until ``evaluator`` is exhausted.

    The seam for a genetic search of another objective (re-placement searches the horizon
    total): every genome is scored by ``evaluator`` (an :class:`Evaluator` subclass overriding
    ``score``), the distinct ``starts`` first, so they are evaluated even when the budget is
    tiny; the answer is ``evaluator.best_placement``.

    Args:
        instance: the cluster and workload the placements are on.
        starts: ``[D, L]`` placements to seed the population (at least one).
        evaluator: the budgeted evaluator every batch goes through.
        rng: drives every random choice.
    """
    search = _Search(instance, evaluator, rng)
    search.start(starts)
    while not evaluator.exhausted:
        search.generation()


class _Search:
    """The population and its evaluation (all batches go through one budgeted evaluator)."""

    def __init__(self, instance: Instance, evaluator: Evaluator, rng: np.random.Generator) -> None:
        self.instance = instance
        self.evaluator = evaluator
        self.rng = rng
        self.population: list[Genome] = []
        self.fitness = np.empty(0)

    def evaluate(self, genomes: list[Genome]) -> np.ndarray:
        if not genomes:
            return np.empty(0)
        n = self.instance.num_layers
        return self.evaluator.times(np.stack([decode(g, n) for g in genomes]))

    def start(self, placements: list[np.ndarray]) -> None:
        m = self.instance.num_machines
        seeds = _distinct([encode(p, m) for p in placements])
        # Seeds first, so they are evaluated even when the budget is tiny.
        fitness = self.evaluate(seeds)
        fill = [mutate(seeds[i % len(seeds)], self.rng, self.instance, 1 + i % 3) for i in range(POPULATION - len(seeds))]
        self.population = seeds + fill
        self.fitness = np.concatenate([fitness, self.evaluate(fill)])
        self.survive([], np.empty(0))

    def generation(self) -> None:
        children = [self.child() for _ in range(POPULATION)]
        self.survive(children, self.evaluate(children))
        self.local_search()

    def child(self) -> Genome:
        a, b = self.select(), self.select()
        if a.machines.shape == b.machines.shape and self.rng.random() < CROSSOVER_RATE:
            g = crossover(a, b, self.rng)
        else:
            g = a
        return mutate(g, self.rng, self.instance, int(self.rng.integers(1, 4)))

    def select(self) -> Genome:
        picks = self.rng.integers(len(self.population), size=TOURNAMENT)
        return self.population[int(picks[np.argmin(self.fitness[picks])])]

    def survive(self, children: list[Genome], fitness: np.ndarray) -> None:
        pool = self.population + children
        scores = np.concatenate([self.fitness, fitness])
        order = np.argsort(scores, kind="stable")
        kept, seen = [], set()
        for i in order:
            key = pool[i].key()
            if key not in seen:
                seen.add(key)
                kept.append(i)
            if len(kept) == POPULATION:
                break
        self.population = [pool[i] for i in kept]
        self.fitness = scores[kept]

    def local_search(self) -> None:
        """One batch of single moves around the best genome; keep the best if it improves."""
        best = self.population[0]
        moves = [mutate(best, self.rng, self.instance, 1) for _ in range(LOCAL_SEARCH_MOVES)]
        times = self.evaluate(moves)
        if len(times) and times.min() < self.fitness[0]:
            i = int(np.argmin(times))
            self.population[0], self.fitness[0] = moves[i], times[i]


def _distinct(genomes: list[Genome]) -> list[Genome]:
    seen, out = set(), []
    for g in genomes:
        if g.key() not in seen:
            seen.add(g.key())
            out.append(g)
    return out
