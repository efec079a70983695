"""Re-placement methods: ``method(problem, seed, budget) -> Answer``, run through :func:`run_method`.

=====================  ======================================================================
``scratch``            place again on the surviving machines with a placement method
                       (``scratch:NAME``, any of :data:`hulk_env.baselines.METHODS`; default
                       ``latency-chain-dp``, what ``hulk place`` runs), then pay the migration
``repair``             keep every slot on a surviving machine; each displaced run of layers
                       goes whole to the nearest surviving machine (latency to its pipeline
                       neighbours) with room for it, or layer by layer to the nearest ones
``search``             the genetic search of the baselines over both objectives at once:
                       ``migration_s + H x iteration_time_s``, started from ``repair`` and the
                       heuristics' placements on the survivors; budget 20,000 cost evaluations
``agent``              the learned policy driven in re-placement episodes (the env
                       ``hulk/Replace-v0``'s dynamics): :mod:`hulk_env.replacement.agent`
=====================  ======================================================================

Every method returns a placement on surviving machines that fits in memory, or ``None`` with a
one-line reason. ``cost_evals`` counts every placement a method evaluated with the cost model.
"""

from __future__ import annotations

import time

import numpy as np

from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.baselines.common import Evaluator
from hulk_env.baselines.genetic import evolve
from hulk_env.baselines.seeds import heuristic_seeds
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import capacity_reason, stash_count
from hulk_env.replacement.problem import (
    Answer,
    ReplacementProblem,
    ReplacementResult,
    ReplaceMethod,
    outcome,
)

DEFAULT_SCRATCH_METHOD = "latency-chain-dp"
SEARCH_BUDGET = 20_000
# Latencies within 1 ms count as equal when ordering machines by distance: machines of one city
# (0.2-0.3 ms apart) tie, and the faster one is nearer.
_LATENCY_ROUND = 3




# ---- scratch ------------------------------------------------------------------------------------
def scratch_with(placement_method: str) -> ReplaceMethod:
    """``scratch`` with the named placement method."""
    fn = get_method(placement_method)

    def scratch(problem: ReplacementProblem, seed: int = 0, budget: int | None = None) -> Answer:
        result = fn(problem.sub_instance, seed, budget)
        if not result.feasible:
            return Answer(None, result.cost_evals, result.reason)
        return Answer(problem.to_full(result.placement), result.cost_evals)

    scratch.__name__ = f"scratch_{placement_method}"
    return scratch


# ---- repair -------------------------------------------------------------------------------------
def repair(problem: ReplacementProblem, seed: int = 0, budget: int | None = None) -> Answer:
    """Move only the displaced slots, each run of them to the nearest machines with room.

    Memory is booked with each replica's old pipeline depth first; if the repaired placement
    then does not fit (a run that had to split deepens its pipeline), it is redone with the
    stash of the deepest pipeline, which fits whatever the depth.

    Args:
        problem: the re-placement problem.
        seed: unused (deterministic).
        budget: unused; the final check is one cost evaluation per attempt.
    """
    del seed, budget
    evals = 0
    w = problem.instance.workload
    for deepest in (False, True):
        placement = _repair_once(problem, deepest)
        if placement is None:
            continue
        evals += 1
        if not problem.check(placement):
            return Answer(placement, evals)
        if w.schedule == "gpipe":  # the stash does not depend on depth: nothing else to try
            break
    return Answer(None, evals, _no_room_reason(problem))


def _no_room_reason(problem: ReplacementProblem) -> str:
    lost = problem.displaced.sum()
    return (
        f"no surviving machine has room for the {lost} displaced slot(s) next to the kept ones; "
        "'scratch' or 'search' may still fit by moving other slots. "
        + capacity_reason(problem.sub_instance)
    )


def _repair_once(problem: ReplacementProblem, deepest: bool) -> np.ndarray | None:
    c, w = problem.instance.cluster, problem.instance.workload
    placement = problem.old.copy()
    displaced = problem.displaced
    d, n_layers = placement.shape
    stash = [
        stash_count(w, n_layers if deepest else len(set(placement[r].tolist()))) for r in range(d)
    ]
    need = w.state_bytes_per_param * w.params[None, :] + np.array(stash)[:, None] * w.stash_bytes[None, :]
    free = c.memory_bytes.astype(np.float64).copy()
    kept = ~displaced
    np.subtract.at(free, placement[kept], need[kept])
    free[problem.failed] = -np.inf
    for r in range(d):
        for start, stop in _runs(displaced[r]):
            order = _nearest(problem, _anchors(problem, placement, r, start, stop))
            row = _fit_run(order, need[r, start:stop], free)
            if row is None:
                return None
            placement[r, start:stop] = row
    return placement


def _anchors(problem: ReplacementProblem, placement: np.ndarray, r: int, start: int, stop: int) -> list[int]:
    """Where a displaced run should be near: its pipeline neighbours in replica ``r`` and the
    surviving machines holding its first layer in other replicas (its data-parallel ring);
    the failed machine itself when there are none."""
    d, n_layers = placement.shape
    anchors = [int(placement[r, start - 1])] if start > 0 else []
    if stop < n_layers and not problem.displaced[r, stop]:
        anchors.append(int(placement[r, stop]))
    peers = [q for q in range(d) if q != r and (q < r or not problem.displaced[q, start])]
    anchors += [int(placement[q, start]) for q in peers]
    return list(dict.fromkeys(anchors)) or [int(problem.old[r, start])]


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` of each maximal run of True in a 1-D mask."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _nearest(problem: ReplacementProblem, anchors: list[int]) -> np.ndarray:
    """Surviving machines by mean latency to ``anchors``; ties to FLOP/s, bandwidth, index."""
    c = problem.instance.cluster
    cand = problem.survivors
    lat = np.round(c.latency_s[np.ix_(anchors, cand)].mean(axis=0), _LATENCY_ROUND)
    bw = c.pair_bandwidth_bps[np.ix_(anchors, cand)].min(axis=0)
    return cand[np.lexsort((cand, -bw, -c.flops[cand], lat))]


def _fit_run(order: np.ndarray, need: np.ndarray, free: np.ndarray) -> np.ndarray | None:
    """Machines for one run of layers: the nearest that holds it all, else nearest first-fit.

    ``free`` is reduced by what the run takes (only on success).
    """
    whole = np.flatnonzero(free[order] >= need.sum())
    if len(whole):
        mach = int(order[whole[0]])
        free[mach] -= need.sum()
        return np.full(len(need), mach)
    left = free.copy()
    row = np.empty(len(need), dtype=np.int64)
    i = 0
    for layer, bytes_ in enumerate(need):
        while i < len(order) and left[order[i]] < bytes_:
            i += 1
        if i == len(order):
            return None
        row[layer] = order[i]
        left[order[i]] -= bytes_
    free[:] = left
    return row


# ---- search over both objectives ----------------------------------------------------------------
class HorizonEvaluator(Evaluator):
    """The baselines' budgeted evaluator, scoring the horizon total instead of the iteration time.

    Placements are on the problem's sub-instance (surviving machines); each is scored as
    ``migration_s + H x iteration_time_s`` of its full-index version (``inf`` when it does not
    fit), one counted cost evaluation each.
    """

    def __init__(self, problem: ReplacementProblem, budget: int | None) -> None:
        super().__init__(problem.sub_instance, budget)
        self.problem = problem

    def score(self, batch: np.ndarray) -> np.ndarray:
        return self.problem.totals(self.problem.to_full(batch)).total_s


def search(problem: ReplacementProblem, seed: int = 0, budget: int | None = None) -> Answer:
    """Genetic search (:func:`hulk_env.baselines.genetic.evolve`) on the horizon total.

    The population starts from the ``repair`` placement and the heuristics' placements on the
    surviving machines (:func:`hulk_env.baselines.seeds.heuristic_seeds`, within a quarter of
    the budget), so the answer is never worse than ``repair`` by the horizon total.

    Args:
        problem: the re-placement problem.
        seed: seeds every random choice.
        budget: cost evaluations in all, the heuristics' and ``repair``'s included (default 20,000).
    """
    budget = SEARCH_BUDGET if budget is None else int(budget)
    fixed = repair(problem)
    starts, used = heuristic_seeds(problem.sub_instance, seed, budget)
    used += fixed.cost_evals
    if fixed.placement is not None:
        starts = [problem.to_sub(fixed.placement), *starts]
    if not starts:
        return Answer(None, used, capacity_reason(problem.sub_instance))
    evaluator = HorizonEvaluator(problem, max(0, budget - used))
    evolve(problem.sub_instance, starts, evaluator, np.random.default_rng(seed))
    if evaluator.best_placement is None:  # no budget left to evaluate even the starts
        return Answer(problem.to_full(starts[0]), used + evaluator.evals)
    return Answer(problem.to_full(evaluator.best_placement), used + evaluator.evals)


# ---- registry -----------------------------------------------------------------------------------
REPLACE_METHODS: dict[str, ReplaceMethod] = {
    "scratch": scratch_with(DEFAULT_SCRATCH_METHOD),
    "repair": repair,
    "search": search,
}


AGENT = "agent"  # the learned policy (:mod:`hulk_env.replacement.agent`), built when named


def replace_method_names() -> list[str]:
    return [*REPLACE_METHODS, AGENT, "scratch:NAME"]


def get_replace_method(name: str) -> ReplaceMethod:
    """A method by name (``scratch:NAME`` for scratch with another placement method)."""
    key = name.strip()
    if key.startswith("scratch:"):
        return scratch_with(key.split(":", 1)[1].strip())
    if key == AGENT:
        from hulk_env.replacement.agent import agent_method  # it imports this module

        return agent_method()
    try:
        return REPLACE_METHODS[key]
    except KeyError:
        raise HulkInputError(
            f"unknown re-placement method '{name}'; choose from {', '.join(replace_method_names())}",
            field="method",
        ) from None


def run_method(
    problem: ReplacementProblem,
    name: str,
    seed: int = 0,
    budget: int | None = None,
    method: ReplaceMethod | None = None,
) -> ReplacementResult:
    """Run a method (by name, or ``method`` itself), time it and judge its answer over the horizon.

    ``cost_evals`` is every placement the cost model evaluated during the method's call
    (:func:`hulk_env.cost.count_evals`), whoever called it, or the method's own count if larger.
    An answer on a failed machine or over memory is a bug in the method: ``RuntimeError``.
    """
    fn = method or get_replace_method(name)
    start = time.perf_counter()
    with cost.count_evals() as counter:
        answer = fn(problem, seed, budget)
    decision_s = time.perf_counter() - start
    evals = max(counter.evals, answer.cost_evals)
    if answer.placement is None:
        return ReplacementResult(name, None, evals, decision_s, None, answer.reason)
    problem_text = problem.check(answer.placement)
    if problem_text:
        raise RuntimeError(f"method '{name}' returned an invalid placement: {problem_text}")
    placement = np.asarray(answer.placement, dtype=np.int64)
    return ReplacementResult(name, placement, evals, decision_s, outcome(problem, placement))
