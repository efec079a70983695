"""Placement methods that live with the agent, as ``(instance, seed, budget) -> PlacementResult``.

* ``gnn-ppo`` -- the pretrained generalist policy shipped in the package
  (``agents/pretrained/gnn-ppo/``: weights only, with its config and training command), greedy:
  the fastest stage-DP plan from the network's best first-slot machines
  (:data:`agents.decision.inference.START_CANDIDATES`, one per region first, and
  :data:`agents.decision.inference.REFINE_STARTS` more in the region of the fastest of those), with
  replicas also the fastest region-aligned layout, or the naive placement; where no plan fits, one masked rollout of ``hulk/Placement-v1`` at the instance's
  own size (:func:`agents.decision.inference.planned_greedy`, :data:`agents.decision.inference.ALWAYS_ROLLOUT`).
  With a ``budget`` it also samples ``budget - 1`` rollouts and keeps the best;
* ``gnn-ppo+search`` -- the policy's greedy rollout (from its best plan's start), that plan and
  :data:`POLISH_SAMPLES` sampled rollouts,
  each also *re-cut*: its machines kept in their pipeline order, the layers split again by the
  stage DP (:func:`hulk_env.baselines.chains.recut_candidates`, the policy's most common error
  being a stage boundary), and ``latency-chain-dp``'s chains started from the machines they
  use (:func:`chain_starts`: the policy says where, the DP how to cut), and with several
  replicas two constructive families the chain layouts miss: chains over the cluster's fast
  machines only (:func:`fast_starts`) and region-aligned replicas, every layer's gradient ring
  in one region (:func:`region_starts`); the best of those are
  the extra starting points of ``anneal`` (the searches' shared start,
  :func:`hulk_env.baselines.seeds.search_start`, which adds the heuristics' placements), within
  :data:`POLISH_BUDGET` cost evaluations in all, the policy's rollouts, re-cuts and chains
  included;
* ``hulk-gcn`` (:mod:`agents.decision.hulk_gcn`);
* any saved policy (:func:`load_policy_method`).

For :func:`hulk_env.evaluation.run_methods`, the ``hulk`` command and the experiments. Their
names are known without torch (:data:`AGENT_METHODS`); building one imports it. Every
``cost_evals`` counts all the cost-model evaluations the method causes
(:func:`hulk_env.cost.count_evals`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agents.decision.inference import (
    policy_placement,
    sampled_rollouts,
    unplaceable_reason,
)
from agents.network.saved_policy import LoadedPolicy, load_policy, lookahead_of, plan_of
from hulk_env import cost
from hulk_env.baselines import Method, PlacementResult
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance

if TYPE_CHECKING:
    from hulk_env.baselines.chains import Candidate

PRETRAINED = "gnn-ppo"
POLISHED = "gnn-ppo+search"
AGENT_METHODS = ("hulk-gcn", PRETRAINED, POLISHED)  # names known without torch (the CLI lists them)
PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained" / PRETRAINED
POLISH_BUDGET = 5_000  # cost evaluations of gnn-ppo+search in all (a tenth of the reference searches')
POLISH_SAMPLES = 4  # sampled rollouts besides the greedy one, as extra starts
POLISH_TEMPERATURE = 1.0
RECUT_SHARE = 0.2  # of the polish budget, for the re-cut candidates (best DP estimates first)
CHAIN_SHARE = 0.2  # of the polish budget, for the chains started from the policy's machines
CHAIN_STARTS = 16  # start machines of those chains at most (each costs one stage DP)
FAST_SHARE = 0.2  # of the polish budget, for chains over the fast machines only (D > 1)
REGION_SHARE = 0.02  # of the polish budget, for the region-aligned placements (D > 1; a few dozen)
SEARCH_FLOOR = 0.2  # of the polish budget, kept for anneal whatever the families above would spend
# The polish's own decision starts (network, then in the best region): the greedy decision's
# 8 + 4 (agents.decision.inference.START_CANDIDATES, REFINE_STARTS) build up to 12 plans of up to 256
# evaluations each, which on unseen-v0's 512-machine instances spent more than POLISH_BUDGET
# before the search began (evaluations ratio 0.1036 against genetic's, over the 0.1 the budget
# promises); with 4 + 2 (the decision's former setting) the plans leave the search its share.
POLISH_STARTS = 4
POLISH_REFINE = 2


@lru_cache(maxsize=1)
def pretrained_policy() -> LoadedPolicy:
    """The shipped generalist policy (loaded once per process).

    Raises:
        HulkInputError: the package was installed without it (or its files are damaged).
    """
    if not (PRETRAINED_DIR / "policy.json").is_file():
        raise HulkInputError(
            "the pretrained policy is not installed (agents/pretrained/gnn-ppo/policy.json); reinstall the "
            "package with its data, or train one with `hulk train --config generalist`",
            source=str(PRETRAINED_DIR),
        )
    return load_policy(PRETRAINED_DIR)


def gnn_ppo(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """The pretrained policy's greedy placement (and the best of ``budget - 1`` samples)."""
    samples = 0 if budget is None else max(0, int(budget) - 1)
    return policy_placement(pretrained_policy(), instance, seed=seed, samples=samples, name=PRETRAINED)


def gnn_ppo_search(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """The pretrained policy's placements polished by ``anneal`` (see the module docstring).

    ``budget``: cost evaluations in all (default :data:`POLISH_BUDGET`).
    """
    from hulk_env.baselines.anneal import anneal

    if (why := unplaceable_reason(instance)) is not None:
        return PlacementResult(POLISHED, None, 0, why)
    loaded = pretrained_policy()
    total = POLISH_BUDGET if budget is None else int(budget)
    with cost.count_evals() as counter:
        done = sampled_rollouts(
            loaded.policy, instance, lookahead_of(loaded.meta), seed, POLISH_SAMPLES, POLISH_TEMPERATURE,
            plan_of(loaded.meta), POLISH_STARTS, loaded.ranker, POLISH_REFINE, always_rollout=True,
            region_aligned=False,  # region_starts below tries them within the search's budget shares
        )  # fmt: skip
        starts = [r.placement for r in sorted(done, key=lambda r: r.iteration_time_s)]
        chains = chain_starts(instance, starts, int(CHAIN_SHARE * total))
        # The multi-replica families take only what the re-cuts and a floor of the search leave
        # (on 512-machine instances the policy's plans can spend most of the budget first).
        keep_back = int((RECUT_SHARE + SEARCH_FLOOR) * total)
        chains += region_starts(instance, starts, min(int(REGION_SHARE * total), max(0, total - counter.evals - keep_back)))
        chains += fast_starts(instance, starts, min(int(FAST_SHARE * total), max(0, total - counter.evals - keep_back)))
        starts = chains + recut_starts(instance, starts, int(RECUT_SHARE * total)) + starts
        result = anneal(instance, seed, max(len(starts), total - counter.evals), starts=starts)
    return PlacementResult(POLISHED, result.placement, counter.evals, result.reason)


def chain_starts(instance: Instance, placements: list[np.ndarray], budget: int, keep: int = 2) -> list[np.ndarray]:
    """The ``keep`` fastest placements of ``latency-chain-dp``'s chains started from the machines
    the policy's placements use (in first-use order, at most :data:`CHAIN_STARTS`), within
    ``budget`` cost evaluations: the policy says *where* the pipeline goes, the stage DP how to
    cut it. ``latency-chain-dp`` itself starts a chain from every machine (up to 256), which at
    256-512 machines costs it 7k-50k evaluations."""
    from hulk_env.baselines.chain_dp import chains_from
    from hulk_env.baselines.chains import first_use_order

    machines: list[int] = []
    for p in placements:
        machines += [int(m) for m in first_use_order(np.asarray(p).reshape(-1)) if int(m) not in machines]
    return best_of(instance, chains_from(instance, machines[:CHAIN_STARTS]), budget, keep)


def fast_starts(instance: Instance, placements: list[np.ndarray], budget: int, keep: int = 2) -> list[np.ndarray]:
    """The ``keep`` fastest candidates of the chains over the cluster's fast machines only
    (:func:`hulk_env.baselines.fast_chains.fast_chain_candidates`; with ``D > 1``), started
    from the machines the policy's placements use first, within ``budget`` evaluations."""
    from hulk_env.baselines.fast_chains import fast_chain_candidates

    if instance.data_parallel < 2 or budget <= 0:
        return []
    return best_of(instance, fast_chain_candidates(instance, policy_machines(placements), CHAIN_STARTS), budget, keep)


def region_starts(instance: Instance, placements: list[np.ndarray], budget: int, keep: int = 2) -> list[np.ndarray]:
    """The ``keep`` fastest region-aligned placements
    (:func:`hulk_env.baselines.region_aligned.region_aligned_candidates`; with ``D > 1``), their
    region orders from the first :data:`CHAIN_STARTS` machines the policy's placements use and
    from every region, within ``budget`` evaluations."""
    from hulk_env.baselines.region_aligned import region_aligned_candidates

    if instance.data_parallel < 2 or budget <= 0:
        return []
    return best_of(instance, region_aligned_candidates(instance, policy_machines(placements)[:CHAIN_STARTS]), budget, keep)


def policy_machines(placements: list[np.ndarray]) -> list[int]:
    """The machines of ``placements`` in first-use order, placement after placement."""
    from hulk_env.baselines.chains import first_use_order

    machines: list[int] = []
    for p in placements:
        machines += [int(m) for m in first_use_order(np.asarray(p).reshape(-1)) if int(m) not in machines]
    return machines


def recut_starts(instance: Instance, placements: list[np.ndarray], budget: int, keep: int = 2) -> list[np.ndarray]:
    """The ``keep`` fastest memory-feasible re-cuts of ``placements`` (most promising first:
    :func:`~hulk_env.baselines.chains.rank_candidates`; at most ``budget`` cost evaluations)."""
    from hulk_env.baselines.chains import recut_candidates

    return best_of(instance, [c for p in placements for c in recut_candidates(instance, p)], budget, keep)


def best_of(instance: Instance, candidates: list[Candidate], budget: int, keep: int) -> list[np.ndarray]:
    """The ``keep`` fastest memory-feasible candidates, the most promising evaluated first
    (:func:`~hulk_env.baselines.chains.rank_candidates`), within ``budget`` evaluations."""
    from hulk_env.baselines.chains import rank_candidates
    from hulk_env.baselines.common import Evaluator, evaluate_candidates

    ranked = rank_candidates(candidates)
    times = evaluate_candidates(Evaluator(instance, budget), ranked)
    best = [i for i in np.argsort(times, kind="stable")[:keep] if np.isfinite(times[i])]
    return [ranked[i] for i in best]


def agent_methods() -> dict[str, Method]:
    """Leaderboard methods that live with the agent (they need torch): :data:`AGENT_METHODS`."""
    from agents.decision.hulk_gcn import NAME, hulk_gcn_method

    if (PRETRAINED_DIR / "policy.json").is_file():
        pretrained_policy()  # load now, so that no placement's wall time includes the loading
    return {NAME: hulk_gcn_method, PRETRAINED: gnn_ppo, POLISHED: gnn_ppo_search}


def load_policy_method(
    run_dir: str | Path, which: str = "best", samples: int = 0, temperature: float = 1.0
) -> Method:
    """A saved policy as a leaderboard method ``(instance, seed, budget) -> PlacementResult``.

    Masked and deterministic by default; with ``samples > 0`` (or a ``budget``, taken as the
    number of rollouts) it also samples that many rollouts and keeps the best placement.
    Loads once; errors (no policy, corrupt files) are raised here, not at the first call.
    """
    loaded = load_policy(run_dir, which)
    name = f"policy:{Path(run_dir).name}"

    def method(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
        extra = samples if budget is None else max(0, int(budget) - 1)
        return policy_placement(loaded, instance, seed=seed, samples=extra, name=name, temperature=temperature)

    return method
