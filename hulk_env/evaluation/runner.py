"""Running placement methods on instances: one :class:`ResultRow` per (instance, method).

Methods are the registered baselines (:data:`hulk_env.baselines.METHODS`) or any callable
``(instance, seed, budget) -> PlacementResult`` (trained policies). Every returned placement is
checked with the cost model; a method that raises :class:`HulkInputError`, returns nothing or
returns a placement that does not fit in memory gets an infeasible row with the reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hulk_env import cost
from hulk_env.baselines import PlacementResult, get_method
from hulk_env.baselines.naive import naive
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.report import write_results
from hulk_env.evaluation.results import ResultRow
from hulk_env.evaluation.suites import load_suite
from hulk_env.instance import Instance

MethodFn = Callable[[Instance, int, "int | None"], PlacementResult]

DEFAULT_METHODS = (
    "naive",
    "random",
    "compute-greedy",
    "latency-chain-dp",
    "partition",
    "genetic",
    "anneal",
)


def run_methods(
    instances: Sequence[Instance],
    methods: Sequence[str] = DEFAULT_METHODS,
    seed: int = 0,
    budgets: Mapping[str, int | None] | None = None,
    progress: bool = True,
    extra_methods: Mapping[str, MethodFn] | None = None,
) -> list[ResultRow]:
    """Run every method on every instance; rows in instance-major order.

    Args:
        instances: e.g. ``load_suite("geo-v0")``.
        methods: registered method names (:data:`hulk_env.baselines.METHODS`) or names in
            ``extra_methods``.
        seed: passed to every method.
        budgets: per-method evaluation budget (methods not listed get their default).
        progress: show a progress bar (on stderr).
        extra_methods: more methods by name, e.g. trained policies:
            ``callable(instance, seed, budget) -> PlacementResult``; those not named in
            ``methods`` are run after them.

    Raises:
        HulkInputError: an unknown method name.
    """
    extra = dict(extra_methods or {})
    names = list(dict.fromkeys([*methods, *extra]))
    table = {n: extra[n] if n in extra else get_method(n) for n in names}
    budgets = dict(budgets or {})
    rows: list[ResultRow] = []
    with Progress(progress, len(instances) * len(names)) as advance:
        for inst in instances:
            raw = {}
            for n in names:
                raw[n] = run_one(table[n], inst, seed, budgets.get(n))
                advance(f"{inst.instance_id} {n}")
            reference = raw["naive"][0] if "naive" in raw else run_one(naive, inst, seed, None)[0]
            rows += rows_for_instance(inst.instance_id, raw, reference)
    return rows


def evaluate_suite(
    suite: str,
    methods: Sequence[str] = DEFAULT_METHODS,
    out_dir: str | Path | None = None,
    hulk_data: str | Path | None = None,
    seed: int = 0,
    budgets: Mapping[str, int | None] | None = None,
    progress: bool = True,
    extra_methods: Mapping[str, MethodFn] | None = None,
) -> list[ResultRow]:
    """Load a suite, run the methods on it and, with ``out_dir``, write the result files.

    One call for ``hulk evaluate``: see :func:`load_suite`, :func:`run_methods` and
    :func:`write_results` for the arguments.
    """
    rows = run_methods(load_suite(suite, hulk_data), methods, seed, budgets, progress, extra_methods)
    if out_dir is not None:
        write_results(rows, out_dir, title=f"Leaderboard: {suite}")
    return rows


def run_one(fn: MethodFn, inst: Instance, seed: int, budget: int | None) -> tuple[float, int, float, str]:
    """One method on one instance, checked by the cost model (one task of
    :mod:`hulk_env.evaluation.distributed`): ``(iteration_time_s or nan, cost_evals, wall_s, reason)``."""
    start = time.perf_counter()
    try:
        with cost.count_evals() as counter:  # every cost-model call the method makes, its own count or not
            result = fn(inst, seed, budget)
    except HulkInputError as err:  # e.g. a policy whose padding is too small for the instance
        return math.nan, 0, time.perf_counter() - start, err.one_line()
    wall = time.perf_counter() - start
    evals = max(result.cost_evals, counter.evals)
    if result.placement is None:
        return math.nan, evals, wall, result.reason or "no placement"
    breakdown = cost.evaluate(inst.cluster, inst.workload, result.placement)
    if not breakdown.memory_feasible:
        return math.nan, evals, wall, "the returned placement does not fit in memory"
    return float(breakdown.iteration_time_s), evals, wall, ""


def rows_for_instance(instance_id: str, raw: dict, reference: float) -> list[ResultRow]:
    """The rows of one instance from ``{method: run_one(...)}`` and the naive time ``reference``."""
    times = [t for t, *_ in raw.values() if not math.isnan(t)]
    best = min(times) if times else math.nan
    rows = []
    for name, (t, evals, wall, reason) in raw.items():
        feasible = not math.isnan(t)
        rows.append(
            ResultRow(
                instance=instance_id,
                method=name,
                iteration_time_s=t,
                speedup_vs_naive=reference / t if feasible and not math.isnan(reference) else math.nan,
                gap_to_best=t / best - 1.0 if feasible else math.nan,
                cost_evals=int(evals),
                wall_s=float(wall),
                feasible=feasible,
                reason=reason,
            )
        )
    return rows


class Progress:
    """A rich progress bar when enabled; ``advance(label)`` after each run."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled, total
        self.bar = None

    def __enter__(self) -> Callable[[str], None]:
        if not self.enabled:
            return lambda label: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task("evaluating", total=self.total)

        def advance(label: str) -> None:
            self.bar.update(task, advance=1, description=label)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
