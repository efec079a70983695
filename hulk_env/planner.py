"""One planner over placement and plan settings: ``hulk place --plan``, ``hulk pareto``,
``hulk bench settings``.

For every candidate of the settings grid (:func:`settings_grid`: tensor-parallel degree, ZeRO
stage, micro-batch size for the fixed global batch, and whatever ``--fix KEY=VALUE`` pins), the
planner

1. rebuilds the workload with those settings (a transformer's FLOPs and bytes follow the
   micro-batch size; the per-replica batch ``micro_batch_size x num_micro_batches`` stays);
2. prunes it when the memory bounds of :mod:`hulk_env.feasibility` fail on the *plan view* of
   the cluster (:func:`plan_view`), before any search;
3. runs a placement method on the plan view: the machines as the one-device model sees them,
   each with the FLOP/s its layers actually get under the settings (tensor-parallel all-reduces
   and idle groups included, averaged over the model's layers) and the memory that leaves for
   the one-device memory rule (its memory over the settings' largest factor on model state or
   stash), so any existing method searches for the settings;
4. evaluates the placement under the full cost model (:mod:`hulk_env.cost` with the settings)
   and dollars (:mod:`hulk_env.money`, only when the objective needs them).

A cost objective (``cost``, ``time-under-budget``, ``cost-under-deadline``) also places the
:data:`SUBSET_SETTINGS` fastest settings on each group of machines (:func:`machine_groups`: one
provider, one GPU model), where fewer or cheaper machines may cost less per iteration.

The best plan by the objective wins: ``time`` (iteration seconds), ``cost`` (dollars per
iteration), ``time-under-budget`` (fastest within ``max_usd``), ``cost-under-deadline``
(cheapest within ``max_s``). Ties go to the earlier grid entry (simpler settings first).
``cost_evals`` counts every cost-model call, the methods' included. DiLoCo changes the training
algorithm (what it reaches per step is not every-step training's), so ``sync`` is searched only
when pinned: the planner never trades convergence for speed behind the user's back.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from hulk_env import cost, parallelism
from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.workload import Workload, apply_overrides

OBJECTIVES = ("time", "cost", "time-under-budget", "cost-under-deadline")
TENSOR_PARALLEL = (1, 2, 4, 8)
# ZeRO 1 costs the time of 0 and 2 (same volume) with memory between them: 2 dominates it.
ZERO = (0, 2, 3)
MAX_MICRO_BATCH = 8
SUBSET_SETTINGS = 4  # a cost objective re-places the 4 fastest settings on each machine group
FIXABLE = {
    "tensor_parallel": int, "zero": int, "micro_batch_size": int, "sync": str, "inner_steps": int,
    "outer_bits": int, "streaming": lambda v: str(v).lower() in ("1", "true", "yes"),
}
PP_DP_ONLY = {"tensor_parallel": 1, "zero": 0}


class Plan(NamedTuple):
    """One evaluated candidate: its settings, placement and figures."""

    settings: dict
    workload: Workload
    placement: np.ndarray | None
    iteration_time_s: float
    usd_per_iteration: float
    feasible: bool
    note: str = ""


class PlanSearch(NamedTuple):
    """The planner's answer: the chosen plan (None when none qualifies), every candidate, the
    cost evaluations spent and the candidates pruned by the memory bounds."""

    best: Plan | None
    plans: list[Plan]
    cost_evals: int
    pruned: int


def parse_fixed(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["zero=1", "sync=diloco"]`` -> ``{"zero": 1, "sync": "diloco"}``.

    Raises:
        HulkInputError: not ``KEY=VALUE``, an unknown key or a value of the wrong type.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = str(pair).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in FIXABLE:
            raise HulkInputError(f"--fix takes KEY=VALUE with KEY one of {', '.join(FIXABLE)}; got {pair!r}", field="fix")
        try:
            out[key] = FIXABLE[key](value.strip())
        except ValueError:
            raise HulkInputError(f"--fix {key}: bad value {value!r}", field="fix") from None
    return out


def settings_grid(workload: Workload, cluster: Cluster, fixed: dict[str, Any] | None = None) -> list[dict]:
    """The candidate settings, simplest first: micro-batch sizes (powers of two up to
    :data:`MAX_MICRO_BATCH` dividing the per-replica batch) x tensor-parallel degrees up to the
    largest machine's GPUs x :data:`ZERO`; ``fixed`` pins any key."""
    fixed = dict(fixed or {})
    batch = workload.micro_batch_size * workload.num_micro_batches
    sizes = [b for b in (1, 2, 4, 8) if b <= MAX_MICRO_BATCH and batch % b == 0 and b <= batch]
    if "micro_batch_size" in fixed:
        sizes = [int(fixed.pop("micro_batch_size"))]
    degrees = [t for t in TENSOR_PARALLEL if t <= int(cluster.num_gpus.max())]
    if "tensor_parallel" in fixed:
        degrees = [int(fixed.pop("tensor_parallel"))]
    stages = [int(fixed.pop("zero"))] if "zero" in fixed else list(ZERO)
    grid = []
    for b in sizes:
        if batch % b:
            raise HulkInputError(f"micro_batch_size {b} does not divide the per-replica batch {batch}", field="fix")
        for t in degrees:
            for z in stages:
                grid.append({"micro_batch_size": b, "num_micro_batches": batch // b, "tensor_parallel": t, "zero": z, **fixed})
    return grid


def with_settings(workload: Workload, settings: dict) -> Workload:
    """``workload`` rebuilt with ``settings`` (:func:`hulk_env.workload.apply_overrides`)."""
    return apply_overrides(workload, **settings)


def plan_view(cluster: Cluster, workload: Workload) -> tuple[Cluster, Workload]:
    """The cluster and workload as the one-device model sees a plan (module docstring, step 3)."""
    legacy = workload.with_training(tensor_parallel=0, zero=0, sync="every-step")
    if not parallelism.plan_active(workload):
        return cluster, legacy
    table = parallelism.layer_seconds(cluster, workload).train_s if parallelism.intra_active(workload) else None
    train = cost.train_flops(workload)
    state = workload.state_bytes_per_param * workload.params
    state_factor = parallelism.slot_state_bytes(cluster, workload).sum(axis=1) / max(float(state.sum()), 1.0)
    stash_factor = parallelism.group_share(cluster, workload)
    factor = np.maximum(np.maximum(state_factor, stash_factor), 1e-9)
    machines = []
    for m, mc in enumerate(cluster.machines):
        flops = mc.flops if table is None else float(train.sum() / table[m].sum())
        machines.append(replace(mc, flops=flops, memory_bytes=mc.memory_bytes / float(factor[m])))
    view = Cluster(
        tuple(machines), cluster.latency_s, cluster.bandwidth_bps, cluster.imputed, cluster.name, cluster.link_notes
    )
    return view, legacy


def _usd(cluster: Cluster, workload: Workload, placement: np.ndarray, time_s: float) -> float:
    from hulk_env.money import dollars

    return dollars(cluster, workload, placement, time_s).usd_per_iteration


def machine_groups(cluster: Cluster) -> list[np.ndarray]:
    """Subsets of machines a cost objective also places on: each provider (or region label, when
    machines name no provider) and each GPU model, when it is not the whole cluster."""
    from hulk_env.hardware.cloud_regions import find_region

    keys: dict[tuple[str, str], list[int]] = {}
    for i, mc in enumerate(cluster.machines):
        found = find_region(mc.region)
        keys.setdefault(("provider", found.provider if found else mc.region), []).append(i)
        keys.setdefault(("gpu", mc.gpu), []).append(i)
    out, seen = [], set()
    for members in keys.values():
        if len(members) < cluster.num_machines and tuple(members) not in seen:
            seen.add(tuple(members))
            out.append(np.array(members, dtype=np.int64))
    return out


def evaluate_settings(
    instance: Instance,
    settings: dict,
    method,
    seed: int,
    budget: int | None,
    with_money: bool,
    machines: np.ndarray | None = None,
) -> tuple[Plan | None, bool]:
    """One grid entry: ``(plan, pruned)``; the plan is None when pruned. ``machines``: place on
    that subset only (indices into the cluster; the plan's placement uses the cluster's)."""
    from hulk_env.feasibility import passes_bounds

    workload = with_settings(instance.workload, settings)
    base = instance.cluster if machines is None else instance.cluster.subset(machines)
    view, legacy = plan_view(base, workload)
    problem = Instance(view, legacy)
    if not passes_bounds(problem):
        return None, True
    result = method(problem, seed, budget)
    if not result.feasible:
        return Plan(settings, workload, None, math.inf, math.inf, False, result.reason), False
    if machines is not None:
        result = result.__class__(result.method, machines[result.placement], result.cost_evals, result.reason)
    breakdown = cost.evaluate(instance.cluster, workload, result.placement)
    time_s = float(breakdown.iteration_time_s)
    usd = _usd(instance.cluster, workload, result.placement, time_s) if with_money else math.nan
    feasible = bool(breakdown.memory_feasible)
    return Plan(settings, workload, result.placement, time_s, usd, feasible, "" if feasible else "out of memory"), False


def choose(plans: list[Plan], objective: str, max_usd: float | None = None, max_s: float | None = None) -> Plan | None:
    """The best feasible plan by ``objective`` (first on ties), or None."""
    ok = [p for p in plans if p.feasible]
    if objective == "time":
        key = lambda p: p.iteration_time_s  # noqa: E731
    elif objective == "cost":
        key = lambda p: p.usd_per_iteration  # noqa: E731
    elif objective == "time-under-budget":
        if max_usd is None:
            raise HulkInputError("time-under-budget needs --max-usd (dollars per iteration)", field="objective")
        ok = [p for p in ok if p.usd_per_iteration <= max_usd]
        key = lambda p: p.iteration_time_s  # noqa: E731
    elif objective == "cost-under-deadline":
        if max_s is None:
            raise HulkInputError("cost-under-deadline needs --max-s (seconds per iteration)", field="objective")
        ok = [p for p in ok if p.iteration_time_s <= max_s]
        key = lambda p: p.usd_per_iteration  # noqa: E731
    else:
        raise HulkInputError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}", field="objective")
    return min(ok, key=key) if ok else None


def search(
    instance: Instance,
    method_name: str = "latency-chain-dp",
    *,
    seed: int = 0,
    budget: int | None = None,
    objective: str = "time",
    fixed: dict[str, Any] | None = None,
    max_usd: float | None = None,
    max_s: float | None = None,
    grid: list[dict] | None = None,
) -> PlanSearch:
    """Search placement and settings together (module docstring)."""
    from hulk_env.baselines import get_method

    if objective not in OBJECTIVES:
        raise HulkInputError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}", field="objective")
    method = get_method(method_name)
    with_money = objective != "time"
    plans, pruned = [], 0
    with cost.count_evals() as counter:
        for settings in grid if grid is not None else settings_grid(instance.workload, instance.cluster, fixed):
            plan, was_pruned = evaluate_settings(instance, settings, method, seed, budget, with_money)
            pruned += was_pruned
            if plan is not None:
                plans.append(plan)
        if with_money:  # cheaper machines too: the fastest settings again on each group
            fastest = sorted((p for p in plans if p.feasible), key=lambda p: p.iteration_time_s)[:SUBSET_SETTINGS]
            for machines in machine_groups(instance.cluster):
                for settings in [p.settings for p in fastest]:
                    plan, was_pruned = evaluate_settings(instance, settings, method, seed, budget, True, machines)
                    pruned += was_pruned
                    if plan is not None:
                        plans.append(plan)
    return PlanSearch(choose(plans, objective, max_usd, max_s), plans, counter.evals, pruned)


def settings_of(workload: Workload) -> dict:
    """The plan settings of a workload, JSON-ready (:func:`hulk_env.parallelism.settings_of`)."""
    return parallelism.settings_of(workload)


def pareto_front(plans: list[Plan]) -> list[Plan]:
    """The feasible plans no other plan beats on both time and dollars, fastest first."""
    ok = sorted((p for p in plans if p.feasible), key=lambda p: (p.iteration_time_s, p.usd_per_iteration))
    front: list[Plan] = []
    for p in ok:
        if not front or p.usd_per_iteration < front[-1].usd_per_iteration:
            front.append(p)
    return front
