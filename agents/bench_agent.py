"""``hulk bench agent``: the shipped policy against the searches, on clusters it never saw.

On every instance of a suite (default ``unseen-v0``: cities outside the training pool):

* ``gnn-ppo`` -- the pretrained policy shipped in the package, greedy (its decision,
  :func:`agents.inference.planned_greedy`: the fastest stage-DP plan from its best first-slot
  choices, or the naive placement; its masked rollout only where no plan fits);
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

Keys of the result (``--json``): ``suite``, ``instances``, ``dead_ends``, ``policy_gap_geomean``,
``policy_rollout_gap_geomean`` (``None`` when no rollout-only method is given),
``chain_dp_gap_geomean``, ``search_polish_gap_geomean``, ``search_polish_evals_ratio`` (total cost evaluations of ``gnn-ppo+search`` over all instances / total of ``genetic``),
``decision_s_median``, ``decision_s_max`` (wall seconds of one greedy ``gnn-ppo`` placement),
``chain_dp_s_median`` (wall seconds of ``latency-chain-dp``), ``decision_chain_dp_ratio``
(``decision_s_median / chain_dp_s_median``: the decision's time against a reference measured in
the same run, which a shared machine's speed of the day cancels out of).

``quick=True`` runs the instances of at most 64 machines only (a few minutes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.search_reference import SearchRecord, load_reference, measure
from hulk_env.evaluation.suites import load_suite
from hulk_env.reference import naive_placement

POLICY = "gnn-ppo"
ROLLOUT = "gnn-ppo:rollout"  # the policy's own rollout, without the plan and naive candidates
POLISH = "gnn-ppo+search"
CHAIN_DP = "latency-chain-dp"
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
)


def gap_geomean(times_s: list[float], fallback_s: list[float], reference_s: list[float]) -> float:
    """``exp(mean(log(T / T_ref))) - 1``; a failed run (``nan``) counts with its fallback time."""
    ratios = [(t if math.isfinite(t) else f) / r for t, f, r in zip(times_s, fallback_s, reference_s, strict=True)]
    return float(math.exp(np.mean(np.log(ratios))) - 1.0)


def policy_methods() -> dict[str, Callable]:
    """The shipped policy's methods (``gnn-ppo``, ``gnn-ppo+search``) from :mod:`agents.methods`,
    and its rollout alone (:data:`ROLLOUT`)."""
    from agents.inference import policy_placement
    from agents.methods import agent_methods, pretrained_policy

    methods = agent_methods()
    missing = [m for m in (POLICY, POLISH) if m not in methods]
    if missing:
        raise HulkInputError(
            f"no method {', '.join(missing)} in agents.methods.agent_methods(): is the pretrained policy shipped "
            "(agents/pretrained)?",
            field="method",
        )
    methods[ROLLOUT] = lambda inst, seed, budget: policy_placement(pretrained_policy(), inst, seed, name=ROLLOUT, rollout_only=True)
    return methods


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
        methods: stand-ins for ``gnn-ppo`` and ``gnn-ppo+search`` (default: the shipped policy's).
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
    policy, rolled, polish, chain, ref_s, naive_s, genetic_evals = [], [], [], [], [], [], 0
    for inst in instances:
        ref = reference[inst.instance_id]
        naive_s.append(cost.iteration_time(inst.cluster, inst.workload, naive_placement(inst)))
        ref_s.append(ref.best_time_s if math.isfinite(ref.best_time_s) else naive_s[-1])
        genetic_evals += ref.evals("genetic")
        policy.append(measure(methods[POLICY], inst, None, name=POLICY))
        if ROLLOUT in methods:
            rolled.append(measure(methods[ROLLOUT], inst, None, name=ROLLOUT))
        polish.append(measure(methods[POLISH], inst, None, name=POLISH))
        chain.append(measure(chain_dp, inst, None, name=CHAIN_DP))
        if log is not None:
            log(
                f"{inst.instance_id} ({inst.num_machines} machines, D={inst.data_parallel}, {inst.workload.name}): "
                f"gap policy {_gap(policy[-1], ref_s[-1])}"
                + (f" (rollout {_gap(rolled[-1], ref_s[-1])})" if rolled else "")
                + f", +search {_gap(polish[-1], ref_s[-1])}, "
                f"chain-dp {_gap(chain[-1], ref_s[-1])}; decision {policy[-1].wall_s:.2f} s"
            )
    decision_s = float(np.median([r.wall_s for r in policy]))
    chain_dp_s = float(np.median([r.wall_s for r in chain]))
    return {
        "suite": suite,
        "instances": len(instances),
        "dead_ends": sum(r.failed for r in policy) + sum(r.failed for r in rolled) + sum(r.failed for r in polish),
        "policy_gap_geomean": gap_geomean([r.iteration_time_s for r in policy], naive_s, ref_s),
        "policy_rollout_gap_geomean": gap_geomean([r.iteration_time_s for r in rolled], naive_s, ref_s) if rolled else None,
        "chain_dp_gap_geomean": gap_geomean([r.iteration_time_s for r in chain], naive_s, ref_s),
        "search_polish_gap_geomean": gap_geomean([r.iteration_time_s for r in polish], naive_s, ref_s),
        "search_polish_evals_ratio": sum(r.cost_evals for r in polish) / max(genetic_evals, 1),
        "decision_s_median": decision_s,
        "decision_s_max": float(max(r.wall_s for r in policy)),
        "chain_dp_s_median": chain_dp_s,
        "decision_chain_dp_ratio": decision_s / chain_dp_s,
    }


def _gap(run: SearchRecord, reference_s: float) -> str:
    return f"failed ({run.reason})" if run.failed else f"{100 * (run.iteration_time_s / reference_s - 1):+.1f}%"
