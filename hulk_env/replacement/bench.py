"""``hulk bench replace``: every re-placement method on a fixed set of failure scenarios.

Scenarios (:func:`bench_scenarios`): on each cluster of :data:`BENCH_CLUSTERS`, each model
setting of :data:`BENCH_MODELS` is placed by ``latency-chain-dp`` (what ``hulk place`` runs),
then hit by the failures of :func:`hulk_env.replacement.failures.standard_scenarios`: its
busiest machine, the region holding most of it, and 10% of the cluster's machines (seed 0).
Every method answers every scenario with horizon 1,000 iterations.

Figures: ``scenarios`` (run), ``infeasible`` (scenarios no method could answer: the survivors
lack memory), ``<method>_total_vs_best`` (geometric mean over the feasible scenarios of the
method's horizon total over the best method's; ``inf`` if the method failed a scenario that
another answered: failures are never dropped), and median decision seconds.

Held out: the default run also answers the same failures of :func:`heldout_clusters`
-- clusters drawn over the validation and the unseen cities
(:data:`hulk_env.evaluation.suites.VALIDATION_CITIES`, ``UNSEEN_CITIES``), none of the four above --
and reports ``agent_total_vs_best_heldout`` (the agent's geometric mean over them) beside
``agent_total_vs_best`` (over the four clusters the agent was tuned on). A run with ``clusters``
given reports ``None`` there.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from hulk_env.baselines import get_method
from hulk_env.cluster.model import Cluster, geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.stats import geometric_mean
from hulk_env.generators import fixed_instance
from hulk_env.instance import Instance
from hulk_env.replacement.failures import standard_scenarios
from hulk_env.replacement.methods import ReplaceMethod, get_replace_method, run_method
from hulk_env.replacement.problem import DEFAULT_HORIZON, ReplacementProblem, ReplacementResult

BENCH_CLUSTERS = ("paper-12city-47", "cloud-3region", "cloud-8region", "hulk-paper")
BENCH_MODELS = (("gpt3-13b", 1), ("gpt3-13b", 2), ("gpt3-1.3b", 4))
START_METHOD = "latency-chain-dp"
# Held-out clusters: (cities, machines) drawn over each held-out city pool with HELDOUT_SEED,
# the cloud GPU mix of the built-in clusters; the first city set of each pool in sorted order.
HELDOUT_SHAPES = ((4, 16), (8, 64))
HELDOUT_SEED = 34


@dataclass(frozen=True)
class BenchScenario:
    """One failure of one running placement.

    Attributes:
        name: ``cluster/model xD/failure``.
        problem: the re-placement problem.
    """

    name: str
    problem: ReplacementProblem


def available_clusters(names: tuple[str, ...] = BENCH_CLUSTERS) -> list[str]:
    """The bench clusters that exist in this installation (``hulk-paper`` ships with the data)."""
    from hulk_env.cluster import load_cluster

    out = []
    for name in names:
        try:
            load_cluster(name)
        except HulkInputError:
            continue
        out.append(name)
    return out


def heldout_clusters() -> list[Cluster]:
    """Clusters over the validation and the unseen cities (one per :data:`HELDOUT_SHAPES` and
    pool), each city set drawn from the pool with :data:`HELDOUT_SEED`, machines spread evenly,
    GPUs from :data:`hulk_env.cluster.builtin.CLOUD_GPU_MIX`: same seed, same clusters."""
    from hulk_env.cluster.builtin import CLOUD_GPU_MIX, LINK_NOISE
    from hulk_env.evaluation.suites import UNSEEN_CITIES, VALIDATION_CITIES

    out = []
    for pool_name, pool in (("val", VALIDATION_CITIES), ("unseen", UNSEEN_CITIES)):
        for i, (cities, machines) in enumerate(HELDOUT_SHAPES):
            rng = np.random.default_rng([HELDOUT_SEED, i, len(pool)])
            chosen = [str(c) for c in rng.choice(sorted(pool), min(cities, len(pool)), replace=False)]
            name = f"heldout-{pool_name}-{machines}"
            out.append(geo_cluster(chosen, machines // len(chosen), CLOUD_GPU_MIX, seed=HELDOUT_SEED, name=name, link_noise=LINK_NOISE))
    return out


def bench_scenarios(
    clusters: tuple[str | Cluster, ...] | list[str | Cluster] | None = None,
    models: tuple[tuple[str, int], ...] = BENCH_MODELS,
    horizon_iterations: int = DEFAULT_HORIZON,
    seed: int = 0,
) -> list[BenchScenario]:
    """The fixed scenario set (see the module docstring)."""
    out = []
    for cluster in clusters or available_clusters():
        label = cluster.name if isinstance(cluster, Cluster) else cluster
        for model, d in models:
            inst = fixed_instance(cluster, model, data_parallel=d)
            start = get_method(START_METHOD)(inst, seed, None)
            if not start.feasible:
                continue
            for sc in standard_scenarios(inst.cluster, start.placement, seed):
                problem = ReplacementProblem(
                    _named(inst, label, model, d), start.placement, list(sc.failed),
                    horizon_iterations=horizon_iterations, label=sc.label,
                )
                out.append(BenchScenario(f"{label}/{model}x{d}/{sc.label}", problem))
    return out


def _named(inst: Instance, cluster: str, model: str, d: int) -> Instance:
    return Instance(inst.cluster, inst.workload, f"{cluster}/{model}x{d}")


def run_bench(
    scenarios: list[BenchScenario],
    methods: dict[str, ReplaceMethod | None],
    seed: int = 0,
    budget: int | None = None,
) -> list[dict[str, ReplacementResult]]:
    """Every method on every scenario: one ``{method: result}`` per scenario."""
    return [
        {name: run_method(sc.problem, name, seed, budget if name == "search" else None, fn) for name, fn in methods.items()}
        for sc in scenarios
    ]


def summarise(scenarios: list[BenchScenario], results: list[dict[str, ReplacementResult]]) -> dict:
    """The bench figures (module docstring) plus one row per scenario."""
    names = list(results[0]) if results else []
    ratios: dict[str, list[float]] = {n: [] for n in names}
    decisions: dict[str, list[float]] = {n: [] for n in names}
    rows, infeasible = [], 0
    for sc, res in zip(scenarios, results, strict=True):
        totals = {n: (r.outcome.total_s if r.feasible else np.inf) for n, r in res.items()}
        best = min(totals.values())
        row = {"scenario": sc.name, "failed": int(sc.problem.failed.sum()),
               "displaced_slots": int(sc.problem.displaced.sum()), "best_total_s": best}
        if not np.isfinite(best):
            infeasible += 1
            rows.append({**row, "feasible": False})
            continue
        for n, r in res.items():
            ratios[n].append(totals[n] / best if best > 0 else 1.0)
            decisions[n].append(r.decision_s)
            row[f"{n}_total_s"] = totals[n]
            row[f"{n}_decision_s"] = r.decision_s
            row[f"{n}_cost_evals"] = r.cost_evals
        rows.append({**row, "feasible": True})
    out: dict = {"scenarios": len(scenarios), "infeasible": infeasible}
    for n in names:
        out[f"{_key(n)}_total_vs_best"] = _geomean(ratios[n])
    for n in names:
        out[f"{_key(n)}_decision_s_median"] = statistics.median(decisions[n]) if decisions[n] else float("nan")
    out["rows"] = rows
    return out


def _key(name: str) -> str:
    return name.split(":", 1)[0].replace("-", "_")


def _geomean(values: list[float]) -> float:
    """Geometric mean; ``inf`` when a method failed a scenario (failures are never dropped)."""
    return float("inf") if any(not np.isfinite(v) for v in values) else geometric_mean(values)


BENCH_METHODS = ("scratch", "repair", "search", "agent")


def bench_replace(
    clusters: list[str] | None = None, seed: int = 0, budget: int | None = None,
    horizon_iterations: int = DEFAULT_HORIZON,
) -> dict:
    """``hulk bench replace``: the figures of the module docstring, the agent's policy, the rows."""
    from hulk_env.replacement import policy_weights

    scenarios = bench_scenarios(clusters, horizon_iterations=horizon_iterations, seed=seed)
    methods: dict[str, ReplaceMethod | None] = {m: get_replace_method(m) for m in BENCH_METHODS}
    out = summarise(scenarios, run_bench(scenarios, methods, seed, budget))
    rows = out.pop("rows")
    out["agent_total_vs_best_heldout"] = None
    if clusters is None:
        held = bench_scenarios(heldout_clusters(), horizon_iterations=horizon_iterations, seed=seed)
        figures = summarise(held, run_bench(held, methods, seed, budget))
        out["agent_total_vs_best_heldout"] = figures["agent_total_vs_best"]
        out["heldout_scenarios"] = figures["scenarios"]
        rows += figures["rows"]
    out["agent_policy"] = dict(policy_weights.TRAINING, temperature=policy_weights.TEMPERATURE)
    out["rows"] = rows
    return out
