"""``hulk bench agent``: the shipped policy against the searches, on clusters it never saw.

On every instance of a suite (default ``unseen-v0``: cities outside the training pool):

* ``gnn-ppo`` -- the pretrained policy shipped in the package, greedy (its decision,
  :func:`agents.decision.inference.planned_greedy`: the fastest stage-DP plan from its best first-slot
  choices, with replicas also the fastest region-aligned layout, or the naive placement; its
  masked rollout only where no plan fits);
* ``gnn-ppo`` rollout only (``policy_rollout_gap_geomean``): the greedy rollout from the best
  plan's start, without the plan and naive candidates -- what the network's own slot-by-slot
  decisions give;
* ``gnn-ppo+search`` -- its placement (and a few sampled ones) polished by a small local search;
* ``latency-chain-dp`` -- the strongest fast heuristic, run here (its wall time is measured);
* the reference -- the best of ``genetic`` and ``anneal`` at 50,000 evaluations each, read from
  the cache shipped with the package (:mod:`hulk_env.evaluation.search_reference`).

Gaps are ``T_method / T_reference - 1``; a ``*_gap_geomean`` is ``exp(mean(log(T / T_ref))) - 1``
over all instances of the run (negative when the method beats the searches). **A failure
counts**: an instance where a method returns no feasible placement (a dead end, an error)
enters its geometric mean with the naive placement's ratio ``T_naive / T_ref`` -- what a user
falls back to -- and is counted in ``dead_ends`` (policy, rollout-only and policy+search failures
together).
An instance where both searches failed would take the naive placement as its reference (none of
``unseen-v0`` does: every one has a search result).
Cost evaluations are counted by the cost model itself (:func:`hulk_env.cost.count_evals`), every
call included (the env's, the lookahead's, the search's).

The controls (from the same run; each ``None`` when its methods are not given): what the
trained weights are worth against the same machinery without them.

* ``random_weights_gap_geomean`` / ``random_weights_rollout_gap_geomean`` -- the same architecture
  and observation with random initial weights (:data:`RANDOM_SEEDS`, one fixed ``torch`` seed
  each: SB3's own initialisation), through the same decision and the same rollout-only
  measurement; the median of the seeds' geometric means;
* ``heuristic_starts_gap_geomean`` -- the same decision (same starts per region, second round,
  plans and naive candidate) with the starts ranked by peak FLOP/s
  (:class:`agents.decision.start_ranker.PeakFlopsRanker`) instead of the network;
* ``every_start_gap_geomean`` -- the same decision with *every* allowed machine as a start: the
  ceiling of any start ranking (the decision's candidates are a union over its starts, so no
  choice of 8 + 4 starts can beat it), which says how much of ``heuristic_starts_gap_geomean``
  a better ranking could win at all (:func:`every_start`; its plans cost up to ``M / 12`` times
  the decision's);
* ``control_dead_ends`` -- the controls' failures (each enters its mean as the naive placement).

``cost_evals`` gives every method's total cost-model evaluations over the run (the controls' too:
their decisions build as many plans as the policy's, so their gaps are at the same cost).

Keys of the result (``--json``): ``suite``, ``instances``, ``dead_ends``, ``policy_gap_geomean``,
``policy_rollout_gap_geomean`` (``None`` when no rollout-only method is given),
``chain_dp_gap_geomean``, ``search_polish_gap_geomean``, ``search_polish_evals_ratio`` (total cost evaluations of ``gnn-ppo+search`` over all instances / total of ``genetic``),
``decision_s_median``, ``decision_s_max`` (wall seconds of one greedy ``gnn-ppo`` placement),
``chain_dp_s_median`` (wall seconds of ``latency-chain-dp``), ``decision_chain_dp_ratio``
(``decision_s_median / chain_dp_s_median``: the decision's time against a reference measured in
the same run, which a shared machine's speed of the day cancels out of).
Then the controls' ``random_weights_gap_geomean``, ``random_weights_rollout_gap_geomean``,
``heuristic_starts_gap_geomean``, ``every_start_gap_geomean``, ``control_dead_ends`` and ``cost_evals`` (method -> total).

``quick=True`` runs the instances of at most 64 machines only (a few minutes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.search_reference import SearchRecord, load_reference, measure
from hulk_env.evaluation.suites import load_suite
from hulk_env.reference import naive_placement

if TYPE_CHECKING:
    from agents.network.saved_policy import LoadedPolicy
    from hulk_env.baselines import PlacementResult
    from hulk_env.instance import Instance

POLICY = "gnn-ppo"
ROLLOUT = "gnn-ppo:rollout"  # the policy's own rollout, without the plan and naive candidates
POLISH = "gnn-ppo+search"
CHAIN_DP = "latency-chain-dp"
HEURISTIC = "gnn-ppo:flops-starts"  # the decision with the starts ranked by peak FLOP/s
EVERY_START = "gnn-ppo:every-start"  # the decision from every allowed start: the ceiling of any ranking
RANDOM_SEEDS = (0, 1, 2)  # torch seeds of the random-weights controls (fixed: the run is reproducible)
QUICK_MAX_MACHINES = 64
KEYS = (
    "suite",
    "instances",
    "dead_ends",
    "policy_gap_geomean",
    "policy_rollout_gap_geomean",
    "chain_dp_gap_geomean",
    "search_polish_gap_geomean",
    "search_polish_evals_ratio",
    "decision_s_median",
    "decision_s_max",
    "chain_dp_s_median",
    "decision_chain_dp_ratio",
    "random_weights_gap_geomean",
    "random_weights_rollout_gap_geomean",
    "heuristic_starts_gap_geomean",
    "every_start_gap_geomean",
    "control_dead_ends",
    "cost_evals",
)


def random_name(seed: int, rollout: bool = False) -> str:
    """The method name of the random-weights control of ``seed`` (its decision, or its rollout)."""
    return f"gnn-ppo:random-weights-{seed}" + (":rollout" if rollout else "")


def gap_geomean(times_s: list[float], fallback_s: list[float], reference_s: list[float]) -> float:
    """``exp(mean(log(T / T_ref))) - 1``; a failed run (``nan``) counts with its fallback time."""
    ratios = [(t if math.isfinite(t) else f) / r for t, f, r in zip(times_s, fallback_s, reference_s, strict=True)]
    return float(math.exp(np.mean(np.log(ratios))) - 1.0)


def policy_methods() -> dict[str, Callable]:
    """The shipped policy's methods (``gnn-ppo``, ``gnn-ppo+search``) from :mod:`agents.decision.methods`,
    and its rollout alone (:data:`ROLLOUT`)."""
    from agents.decision.inference import policy_placement
    from agents.decision.methods import agent_methods, pretrained_policy

    methods = agent_methods()
    missing = [m for m in (POLICY, POLISH) if m not in methods]
    if missing:
        raise HulkInputError(
            f"no method {', '.join(missing)} in agents.decision.methods.agent_methods(): is the pretrained policy shipped "
            "(agents/pretrained)?",
            field="method",
        )
    methods[ROLLOUT] = lambda inst, seed, budget: policy_placement(pretrained_policy(), inst, seed, name=ROLLOUT, rollout_only=True)
    return methods | control_methods(pretrained_policy())


def random_weights(loaded: LoadedPolicy, seed: int) -> LoadedPolicy:
    """``loaded``'s architecture and observation with fresh random weights: the network built
    as training builds it (:func:`agents.network.saved_policy.build_policy_network`, SB3's
    initialisation) under ``torch.manual_seed(seed)`` (the global generator restored after);
    no start ranker."""
    import torch

    from agents.network.saved_policy import (
        LoadedPolicy,
        build_policy_network,
        lookahead_of,
        plan_of,
    )

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        network = build_policy_network(loaded.meta["policy"], loaded.padding, lookahead_of(loaded.meta), plan_of(loaded.meta))
    network.set_training_mode(False)
    return LoadedPolicy(network, loaded.padding, loaded.meta, loaded.directory, None)


def flops_starts(loaded: LoadedPolicy) -> LoadedPolicy:
    """``loaded`` with its decision's starts ranked by peak FLOP/s
    (:class:`agents.decision.start_ranker.PeakFlopsRanker`) instead of by its network."""
    from agents.decision.start_ranker import PeakFlopsRanker

    return loaded._replace(ranker=PeakFlopsRanker())


def every_start(loaded: LoadedPolicy, instance: Instance, seed: int = 0) -> PlacementResult:
    """``loaded``'s decision with every allowed first-slot machine as a start (``starts = M``:
    every plan, every start's region order for the region-aligned layouts). Its candidates hold
    those of any choice of starts, so its gap bounds what a start ranking can reach."""
    from agents.decision.inference import policy_placement

    return policy_placement(loaded, instance, seed, name=EVERY_START, starts=instance.num_machines)


def control_methods(loaded: LoadedPolicy, seeds: tuple[int, ...] = RANDOM_SEEDS) -> dict[str, Callable]:
    """The controls of ``loaded`` (see the module docstring): :data:`HEURISTIC` (its decision with
    the starts ranked by peak FLOP/s), :data:`EVERY_START` (its decision from every start) and,
    per seed, the decision and the rollout alone of its architecture with random weights
    (:func:`random_name`)."""
    from agents.decision.inference import policy_placement

    out: dict[str, Callable] = {
        HEURISTIC: partial(policy_placement, flops_starts(loaded), name=HEURISTIC),
        EVERY_START: partial(every_start, loaded),
    }
    for s in seeds:
        net = random_weights(loaded, s)
        out[random_name(s)] = partial(policy_placement, net, name=random_name(s))
        out[random_name(s, True)] = partial(policy_placement, net, name=random_name(s, True), rollout_only=True)
    return {k: _ignore_budget(v) for k, v in out.items()}


def _ignore_budget(fn: Callable) -> Callable:
    """``(instance, seed, budget) -> PlacementResult`` of a ``(instance, seed) -> ...``: the
    controls run greedy, as the policy's decision does."""
    return lambda inst, seed, budget: fn(inst, seed)


def bench_agent(
    suite: str = "unseen-v0",
    quick: bool = False,
    log: Callable[[str], None] | None = None,
    methods: Mapping[str, Callable] | None = None,
    reference_path: Path | None = None,
) -> dict:
    """The shipped policy, its search polish and ``latency-chain-dp`` against the cached searches.

    Args:
        suite: a suite with a shipped search reference (``unseen-v0``, ``unseen-v1``).
        quick: only the instances of at most ``QUICK_MAX_MACHINES`` machines.
        log: called with one line per instance (progress), if given.
        methods: stand-ins for ``gnn-ppo`` and ``gnn-ppo+search`` (default: the shipped policy's,
            its rollout alone and its controls, :func:`control_methods`); a control or the
            rollout not given is not measured (its key ``None``).
        reference_path: another search-reference file (default: the shipped one).

    Returns:
        A dict with exactly the keys :data:`KEYS` (see the module docstring).

    Raises:
        HulkInputError: no (or a stale) search reference, or no shipped policy.
    """
    instances = [i for i in load_suite(suite) if not quick or i.num_machines <= QUICK_MAX_MACHINES]
    reference = load_reference(suite, reference_path, instances)
    methods = policy_methods() if methods is None else methods
    chain_dp = get_method(CHAIN_DP)
    controls = [m for m in [HEURISTIC, EVERY_START, *(random_name(s, r) for s in RANDOM_SEEDS for r in (False, True))] if m in methods]
    runs: dict[str, list[SearchRecord]] = {m: [] for m in [POLICY, ROLLOUT, POLISH, CHAIN_DP, *controls] if m in methods or m == CHAIN_DP}
    ref_s, naive_s, genetic_evals = [], [], 0
    for inst in instances:
        ref = reference[inst.instance_id]
        naive_s.append(cost.iteration_time(inst.cluster, inst.workload, naive_placement(inst)))
        ref_s.append(ref.best_time_s if math.isfinite(ref.best_time_s) else naive_s[-1])
        genetic_evals += ref.evals("genetic")
        for name, done in runs.items():
            done.append(measure(chain_dp if name == CHAIN_DP else methods[name], inst, None, name=name))
        if log is not None:
            log(_instance_line(inst, runs, ref_s[-1]))
    policy, rolled, polish, chain = (runs.get(m, []) for m in (POLICY, ROLLOUT, POLISH, CHAIN_DP))

    def gap(name: str) -> float | None:
        return gap_geomean([r.iteration_time_s for r in runs[name]], naive_s, ref_s) if name in runs else None

    decision_s = float(np.median([r.wall_s for r in policy]))
    chain_dp_s = float(np.median([r.wall_s for r in chain]))
    return {
        "suite": suite,
        "instances": len(instances),
        "dead_ends": sum(r.failed for r in policy) + sum(r.failed for r in rolled) + sum(r.failed for r in polish),
        "policy_gap_geomean": gap(POLICY),
        "policy_rollout_gap_geomean": gap(ROLLOUT),
        "chain_dp_gap_geomean": gap(CHAIN_DP),
        "search_polish_gap_geomean": gap(POLISH),
        "search_polish_evals_ratio": sum(r.cost_evals for r in polish) / max(genetic_evals, 1),
        "decision_s_median": decision_s,
        "decision_s_max": float(max(r.wall_s for r in policy)),
        "chain_dp_s_median": chain_dp_s,
        "decision_chain_dp_ratio": decision_s / chain_dp_s,
        "random_weights_gap_geomean": _median_of([gap(random_name(s)) for s in RANDOM_SEEDS]),
        "random_weights_rollout_gap_geomean": _median_of([gap(random_name(s, True)) for s in RANDOM_SEEDS]),
        "heuristic_starts_gap_geomean": gap(HEURISTIC),
        "every_start_gap_geomean": gap(EVERY_START),
        "control_dead_ends": sum(r.failed for m in controls for r in runs[m]),
        "cost_evals": {m: int(sum(r.cost_evals for r in done)) for m, done in runs.items()},
    }


def _median_of(values: list[float | None]) -> float | None:
    """The median of the seeds' figures that were measured (``None`` if none was)."""
    got = [v for v in values if v is not None]
    return float(np.median(got)) if got else None


def _instance_line(inst: Instance, runs: dict[str, list[SearchRecord]], reference_s: float) -> str:
    """One instance's progress line: every method's gap and the decision's wall time."""
    gaps = ", ".join(f"{name} {_gap(done[-1], reference_s)}" for name, done in runs.items())
    decision = f"; decision {runs[POLICY][-1].wall_s:.2f} s" if POLICY in runs else ""
    return f"{inst.instance_id} ({inst.num_machines} machines, D={inst.data_parallel}, {inst.workload.name}): gap {gaps}{decision}"


def _gap(run: SearchRecord, reference_s: float) -> str:
    return f"failed ({run.reason})" if run.failed else f"{100 * (run.iteration_time_s / reference_s - 1):+.1f}%"
