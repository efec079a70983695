"""``latency-chain-dp``: nearest-latency machine chains, split optimally by the stage DP.

From every start machine (at most :data:`MAX_STARTS` of them), a greedy nearest-neighbour chain
over latency (:func:`~hulk_env.baselines.common.nearest_neighbour_chain`); every prefix of every
chain is split by the PipeDream/Alpa stage DP (:mod:`~hulk_env.baselines.stage_dp`), both ways
round, and again without the chain's slow machines (:func:`~hulk_env.baselines.stage_dp.without_slow`),
with replicas laid out as described in :mod:`~hulk_env.baselines.chains` (shared, blocks,
interleaved -- one replica or a group of them per block --, mirrored). Candidates are
evaluated with the cost model, most promising (by the DP's estimate, replica layouts taking
turns: :func:`~hulk_env.baselines.chains.rank_candidates`) first, and the fastest
feasible one is returned. A DAG workload (encoder-decoder) is split in its topological order.
When no chain split fits in memory (machines too small for the DP's one-stage-per-machine
rule), the ``naive`` placement is returned, so the method answers wherever ``naive`` does.

Scale. A chain is walked only as far as the DP uses it (:func:`~hulk_env.baselines.chains.chain_stop`)
with each machine's neighbour order sorted once (:class:`~hulk_env.baselines.common.NeighbourOrder`),
and the DP costs the same for every start, so the work grows with the starts times the
machines: with all ``M`` starts that is quadratic. Beyond ``MAX_STARTS`` machines the starts are
spread over the machine classes (region, GPU, count, memory) round-robin, so every class starts
a chain; on every benchmark suite (at most 64 machines) all machines start one. On the suites
the placements are those of the full-chain, all-starts method (checked instance by instance;
one geo-v0 instance, 61 machines for 2 x 14 slots, evaluates 5 more candidates for the same
placement).
With a ``budget``, chains stop once they have proposed ``OVERSAMPLE x budget`` candidates (the
DP's ranking still picks which ``budget`` of them are evaluated); with a
:func:`~hulk_env.baselines.common.time_limit`, once it has passed (the best so far is returned).
"""

from __future__ import annotations

from collections.abc import Iterator

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.chains import Candidate, chain_stop, chains_candidates, rank_candidates
from hulk_env.baselines.common import (
    Evaluator,
    NeighbourOrder,
    evaluate_candidates,
    nearest_neighbour_chain,
    out_of_time,
)
from hulk_env.baselines.naive import naive
from hulk_env.instance import Instance

NAME = "latency-chain-dp"
# Start machines at most: the DP of one chain costs ~20-40 ms on GPT-3-sized models, so 256
# chains bound the DP at ~10 s whatever the cluster size; 4x the largest suite cluster.
MAX_STARTS = 256
# With a budget B, chains stop after proposing OVERSAMPLE x B candidates for the ranking.
OVERSAMPLE = 4
# Chains built together (their DPs side by side); a caller that stops early wastes at most one
# group's DPs.
CHAIN_GROUP = 8


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
    per_start: dict[int, list[Candidate]] = {}
    proposed = 0
    # Every start (up to MAX_STARTS), even among look-alike machines of one city: link noise
    # makes their chains differ, and on geo-v0 one start per machine class lost up to 25%.
    for start, found in chains_of(instance, start_machines(instance)):
        per_start[start] = found
        proposed += len(found)
        if (budget is not None and proposed >= OVERSAMPLE * budget) or (proposed and out_of_time()):
            break
    candidates = [c for start in sorted(per_start) for c in per_start[start]]
    return evaluate_ranked(instance, candidates, budget, NAME)


def chains_of(instance: Instance, starts: list[int]) -> Iterator[tuple[int, list[Candidate]]]:
    """``(start, its chain's candidates)`` for each start machine in turn, built lazily (a
    caller may stop early) :data:`CHAIN_GROUP` chains at a time, their stage DPs solved together
    (:func:`~hulk_env.baselines.chains.chains_candidates`); the machines' neighbour orders are
    sorted once for all chains."""
    order = NeighbourOrder(instance)
    make_stop = chain_stop(instance)
    for at in range(0, len(starts), CHAIN_GROUP):
        group = starts[at : at + CHAIN_GROUP]
        chains = [nearest_neighbour_chain(instance, start, order=order, stop=make_stop()) for start in group]
        yield from zip(group, chains_candidates(instance, chains, order=order), strict=True)


def chains_from(instance: Instance, starts: list[int]) -> list[Candidate]:
    """The candidates of the nearest-latency chains from the given start machines (in order)."""
    return [c for _, found in chains_of(instance, starts) for c in found]


def start_machines(instance: Instance, limit: int = MAX_STARTS) -> list[int]:
    """The chains' start machines, in the order they are tried: all of them when there are at
    most ``limit``, else ``limit`` taken round-robin over the machine classes (region, GPU, GPU
    count, memory), each class in index order."""
    m = instance.num_machines
    if m <= limit:
        return list(range(m))
    classes: dict[tuple, list[int]] = {}
    for i, mc in enumerate(instance.cluster.machines):
        classes.setdefault((mc.region, mc.gpu, mc.num_gpus, mc.memory_bytes), []).append(i)
    picked: list[int] = []
    for k in range(max(len(members) for members in classes.values())):
        picked += [members[k] for members in classes.values() if k < len(members)]
    return picked[:limit]


def evaluate_ranked(
    instance: Instance, candidates: list[Candidate], budget: int | None, method: str
) -> PlacementResult:
    """Evaluate candidates in :func:`~hulk_env.baselines.chains.rank_candidates` order (within
    ``budget``); return the best.

    Falls back to the ``naive`` placement when no candidate fits (see the module docstring).
    """
    evaluator = Evaluator(instance, budget)
    evaluate_candidates(evaluator, rank_candidates(candidates))
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
