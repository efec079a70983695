"""Shared machinery of the search baselines: a budgeted evaluator and machine orderings.

Every search evaluates placements in batches through :func:`hulk_env.cost.iteration_times`
(the vectorised fast path) and counts each placement it evaluates; a budget caps that count.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.cost import iteration_times
from hulk_env.feasibility import capacity_reason
from hulk_env.instance import Instance


class Evaluator:
    """Evaluates batches of placements against an evaluation budget and keeps the best one.

    Args:
        instance: the cluster and workload.
        budget: the most placements that may be evaluated; ``None`` is unlimited.

    Attributes:
        evals: placements evaluated so far.
        best_placement: the fastest memory-feasible placement seen, ``[D, L]``, or ``None``.
        best_time_s: its iteration time (``inf`` while none is feasible).
    """

    def __init__(self, instance: Instance, budget: int | None) -> None:
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        self.instance = instance
        self.budget = budget
        self.evals = 0
        self.best_placement: np.ndarray | None = None
        self.best_time_s = np.inf

    @property
    def remaining(self) -> int | None:
        """Evaluations left, or ``None`` when unlimited."""
        return None if self.budget is None else self.budget - self.evals

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.evals >= self.budget

    def times(self, placements: np.ndarray) -> np.ndarray:
        """``[N]`` iteration times, ``inf`` where memory does not fit or the budget ran out.

        Only the first ``remaining`` placements are evaluated (and counted); the rest get ``inf``.
        """
        batch = np.asarray(placements, dtype=np.int64)
        out = np.full(len(batch), np.inf)
        take = len(batch) if self.remaining is None else max(0, min(len(batch), self.remaining))
        if take == 0:
            return out
        w, c = self.instance.workload, self.instance.cluster
        out[:take] = iteration_times(c, w, batch[:take]).penalised()
        self.evals += take
        i = int(np.argmin(out))
        if out[i] < self.best_time_s:
            self.best_time_s = float(out[i])
            self.best_placement = batch[i].copy()
        return out

    def result(self, method: str, reason: str = "") -> PlacementResult:
        """The best placement as a :class:`PlacementResult` (or ``reason`` when none was feasible)."""
        if self.best_placement is None:
            return PlacementResult(
                method, None, self.evals, reason or capacity_reason(self.instance)
            )
        return PlacementResult(method, self.best_placement.copy(), self.evals)


def nearest_neighbour_chain(
    instance: Instance, start: int, machines: np.ndarray | None = None
) -> np.ndarray:
    """Machines ordered by greedy nearest latency, from ``start``.

    Ties (machines of one city are often equally far) go to the higher bandwidth, then to the
    faster machine, then to the lower index, so the chain is deterministic.

    Args:
        instance: gives latency, bandwidth and FLOP/s.
        start: the first machine (must be in ``machines``).
        machines: the machines to order (default: all).
    """
    c = instance.cluster
    pool = np.arange(c.num_machines) if machines is None else np.asarray(machines, dtype=np.int64)
    left = [int(m) for m in pool if int(m) != start]
    chain = [int(start)]
    while left:
        here = chain[-1]
        cand = np.asarray(left)
        # Round latency to 0.1 ms so that noise between same-city machines does not decide.
        order = np.lexsort(
            (
                cand,
                -c.flops[cand],
                -c.bandwidth_bps[here, cand],
                np.round(c.latency_s[here, cand], 4),
            )
        )
        nxt = int(cand[order[0]])
        chain.append(nxt)
        left.remove(nxt)
    return np.asarray(chain, dtype=np.int64)


def dedupe_placements(placements: list[np.ndarray]) -> list[np.ndarray]:
    """Distinct placements, first occurrence kept (candidate lists repeat often)."""
    seen: set[bytes] = set()
    out = []
    for p in placements:
        key = np.ascontiguousarray(p, dtype=np.int64).tobytes()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def evaluate_candidates(
    evaluator: Evaluator, placements: list[np.ndarray], chunk: int = 2048
) -> np.ndarray:
    """Evaluate a list of ``[D, L]`` placements in batches; returns their ``[N]`` times."""
    out = np.full(len(placements), np.inf)
    for start in range(0, len(placements), chunk):
        if evaluator.exhausted:
            break
        out[start : start + chunk] = evaluator.times(np.stack(placements[start : start + chunk]))
    return out
