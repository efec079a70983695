"""Shared machinery of the search baselines: a budgeted evaluator, a time limit, machine orderings.

Every search evaluates placements in batches through :func:`hulk_env.cost.iteration_times`
(the vectorised fast path) and counts each placement it evaluates; a budget caps that count.
A time limit (:func:`time_limit`, ``hulk place --time-limit``) stops every search that goes
through an :class:`Evaluator` once it has passed and a feasible placement is known: the method
returns its best so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.cost import iteration_times
from hulk_env.feasibility import capacity_reason
from hulk_env.instance import Instance

_DEADLINE: ContextVar[float | None] = ContextVar("placement_deadline", default=None)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Placement methods called inside stop searching ``seconds`` from now (``None``: never).

    Nested limits keep the earliest deadline. Checked by :class:`Evaluator` (between batches)
    and by methods with work of their own between evaluations (``latency-chain-dp`` between
    its chains); a method that has no feasible placement yet keeps looking.
    """
    if seconds is None:
        yield
        return
    deadline = time.monotonic() + float(seconds)
    current = _DEADLINE.get()
    token = _DEADLINE.set(deadline if current is None else min(current, deadline))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def out_of_time() -> bool:
    """Whether the :func:`time_limit` around this call has passed."""
    deadline = _DEADLINE.get()
    return deadline is not None and time.monotonic() >= deadline


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
        """The budget is spent, or the time limit has passed with a feasible placement found."""
        spent = self.budget is not None and self.evals >= self.budget
        return spent or (self.best_placement is not None and out_of_time())

    def times(self, placements: np.ndarray) -> np.ndarray:
        """``[N]`` iteration times, ``inf`` where memory does not fit or the budget ran out.

        Only the first ``remaining`` placements are evaluated (and counted); the rest get ``inf``.
        """
        batch = np.asarray(placements, dtype=np.int64)
        out = np.full(len(batch), np.inf)
        take = len(batch) if self.remaining is None else max(0, min(len(batch), self.remaining))
        if take == 0 or self.exhausted:
            return out
        out[:take] = self.score(batch[:take])
        self.evals += take
        i = int(np.argmin(out))
        if out[i] < self.best_time_s:
            self.best_time_s = float(out[i])
            self.best_placement = batch[i].copy()
        return out

    def score(self, batch: np.ndarray) -> np.ndarray:
        """``[N]`` what the search minimises (override to search another objective): the
        iteration time, ``inf`` where memory does not fit."""
        w, c = self.instance.workload, self.instance.cluster
        return iteration_times(c, w, batch).penalised()

    def result(self, method: str, reason: str = "") -> PlacementResult:
        """The best placement as a :class:`PlacementResult` (or ``reason`` when none was feasible)."""
        if self.best_placement is None:
            return PlacementResult(
                method, None, self.evals, reason or capacity_reason(self.instance)
            )
        return PlacementResult(method, self.best_placement.copy(), self.evals)


class NeighbourOrder:
    """Each machine's other machines in the order :func:`nearest_neighbour_chain` prefers them.

    Greedy nearest latency (rounded to 0.1 ms, so that noise between machines of one city does
    not decide), then higher bandwidth, then the faster machine, then the lower index: a total
    order, so the chain is deterministic. A machine's row is sorted the first time a chain
    stands on it (``O(M log M)``) and kept, so a chain step costs ``O(M)`` numpy work instead
    of a sort, and many chains over one cluster share the rows.

    Args:
        instance: gives latency, bandwidth and FLOP/s.
        machines: the machines chains may use (default: all).
    """

    def __init__(self, instance: Instance, machines: np.ndarray | None = None) -> None:
        self.cluster = instance.cluster
        m = self.cluster.num_machines
        self.pool = np.arange(m) if machines is None else np.asarray(machines, dtype=np.int64)
        self._rows: dict[int, np.ndarray] = {}

    def row(self, here: int) -> np.ndarray:
        """The pool (``here`` included) in preference order from ``here``."""
        order = self._rows.get(here)
        if order is None:
            order = self._rows[here] = self.pool[np.lexsort(preference_keys(self.cluster, here, self.pool))]
        return order


def preference_keys(cluster, here: int | np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`numpy.lexsort` keys (primary last) of :class:`NeighbourOrder`'s preference over
    the machines ``cand`` from ``here``: nearest latency (to 0.1 ms), then higher bandwidth,
    then the faster machine, then the lower index. ``here``: one machine (keys ``[C]``) or an
    array of ``S`` machines (keys ``[S, C]``, one row each)."""
    here = np.asarray(here)
    rows = here[:, None] if here.ndim else here
    bandwidth = cluster.bandwidth_bps[rows, cand]
    return (
        np.broadcast_to(cand, bandwidth.shape),
        np.broadcast_to(-cluster.flops[cand], bandwidth.shape),
        -bandwidth,
        np.round(cluster.latency_s[rows, cand], 4),
    )


def nearest_neighbour_chain(
    instance: Instance,
    start: int,
    machines: np.ndarray | None = None,
    *,
    order: NeighbourOrder | None = None,
    stop: Callable[[int, int], bool] | None = None,
) -> np.ndarray:
    """Machines ordered by greedy nearest latency, from ``start`` (ties: :class:`NeighbourOrder`).

    Args:
        instance: gives latency, bandwidth and FLOP/s.
        start: the first machine (must be in ``machines``).
        machines: the machines to order (default: all).
        order: a shared :class:`NeighbourOrder` of the same pool (default: a fresh one).
        stop: ``stop(position, machine)`` after each machine is appended; True ends the chain
            there (a caller that needs only a prefix saves the rest of the walk).
    """
    order = order or NeighbourOrder(instance, machines)
    visited = np.zeros(instance.cluster.num_machines, dtype=bool)
    chain = [int(start)]
    visited[start] = True
    if stop is not None and stop(0, int(start)):
        return np.asarray(chain, dtype=np.int64)
    while len(chain) < len(order.pool):
        row = order.row(chain[-1])
        nxt = int(row[np.argmin(visited[row])])  # the first unvisited in preference order
        visited[nxt] = True
        chain.append(nxt)
        if stop is not None and stop(len(chain) - 1, nxt):
            break
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
