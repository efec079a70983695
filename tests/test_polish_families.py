"""The polish's multi-replica start families: chains over the fast machines, region-aligned replicas."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines.common import NeighbourOrder
from hulk_env.baselines.fast_chains import fast_chain_candidates, fast_pools, flops_tiers
from hulk_env.baselines.region_aligned import (
    aligned_fill,
    deal_machines,
    region_aligned_candidates,
    region_order,
)
from hulk_env.evaluation import suite_instance
from hulk_env.testing import placement_problems

# Validation instances (never the reported suites): 16 machines x GPT-3 2.7B x 4 replicas, and
# 128 machines x LLaMA-65B x 4 replicas at 79% of the cluster's memory.
SMALL = ("val-xl-v0", 49)
TIGHT = ("val-xl-v0", 35)


@pytest.fixture(scope="module")
def small():
    return suite_instance(*SMALL)


@pytest.fixture(scope="module")
def tight():
    return suite_instance(*TIGHT)


def test_fast_pools_are_the_machines_at_least_as_fast_as_each_tier(small):
    flops = small.cluster.flops
    tiers = flops_tiers(small)
    assert tiers == sorted(tiers) and min(flops) not in tiers
    for tier, pool in zip(tiers, fast_pools(small), strict=True):
        assert set(pool.tolist()) == set(np.flatnonzero(flops >= tier).tolist())


def test_fast_chains_stay_on_fast_machines_and_fit(small):
    candidates = fast_chain_candidates(small, [], max_starts=4)
    assert candidates
    slowest = float(np.min(small.cluster.flops))
    for _, placement in candidates:
        assert placement.shape == (small.data_parallel, small.num_layers)
        assert (small.cluster.flops[placement] > slowest).all()
    times = cost.iteration_times(small.cluster, small.workload, np.stack([p for _, p in candidates]))
    assert np.isfinite(times.penalised()).any()


def test_dealing_keeps_the_replicas_slots_level(tight):
    slots = np.floor(tight.cluster.memory_bytes / 50e9)
    held = [0.0] * tight.data_parallel
    regions = np.asarray(tight.cluster.region_index)
    for region in np.unique(regions):
        shares = deal_machines(tight, np.flatnonzero(regions == region), slots, held)
        assert sorted(m for s in shares for m in s) == np.flatnonzero(regions == region).tolist()
    assert max(held) - min(held) <= slots.max()


def test_region_aligned_placements_fit_and_keep_most_rings_in_one_region(tight):
    order = NeighbourOrder(tight)
    regions = region_order(tight, 0, order)
    assert sorted(regions) == sorted(set(np.asarray(tight.cluster.region_index).tolist()))
    placement = aligned_fill(tight, regions, 1.0, order)
    assert placement is not None and placement_problems(tight, placement) == []
    region_of = np.asarray(tight.cluster.region_index)[placement]  # [D, L]
    one_region = (region_of == region_of[0]).all(axis=0)
    assert one_region.mean() >= 0.75


def test_region_aligned_beats_the_chain_layouts_where_rings_dominate(tight):
    """The reason for the family (validation only): on this memory-tight 4-replica instance the
    best region-aligned placement is faster than ``latency-chain-dp``'s."""
    from hulk_env.baselines import get_method

    candidates = region_aligned_candidates(tight, [])
    times = cost.iteration_times(tight.cluster, tight.workload, np.stack([p for _, p in candidates]))
    best = float(np.min(times.penalised()))
    chain = get_method("latency-chain-dp")(tight, 0, 200)
    assert best < cost.iteration_time(tight.cluster, tight.workload, chain.placement)


def test_one_replica_has_no_extra_candidates(small):
    single = suite_instance("val-x-v0", 0)
    assert single.data_parallel == 1
    assert fast_chain_candidates(single, [0], 4) == []
    assert region_aligned_candidates(single, [0]) == []


def test_polish_with_the_families_stays_in_budget_and_beats_its_region_start(tight):
    from agents.decision.methods import gnn_ppo_search, region_starts

    result = gnn_ppo_search(tight, 0, budget=600)
    assert result.cost_evals <= 601  # the policy's rollouts may count one placement twice
    start = region_starts(tight, [result.placement], 100)
    assert start
    t_start = cost.iteration_time(tight.cluster, tight.workload, start[0])
    assert cost.iteration_time(tight.cluster, tight.workload, result.placement) <= t_start


def test_the_development_experiment_reads_validation_instances_only():
    from experiments.polish_d4 import _split

    assert _split("val-xl-v0/49") == ("val-xl-v0", 49)
    with pytest.raises(SystemExit, match="validation instances only"):
        _split("unseen-v1/5")
