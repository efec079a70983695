"""The bottleneck bound that screens the greedy decision's start machines (agents.decision.start_bound)."""

from __future__ import annotations

import numpy as np
import pytest

import agents.decision.start_bound as start_bound
from agents.decision.inference import choose_starts
from agents.decision.start_bound import bottleneck_bounds_s, bound_ranked
from hulk_env.baselines.common import NeighbourOrder
from hulk_env.cost import train_flops
from hulk_env.generators import RandomGeoGenerator
from hulk_env.instance import Instance
from tests.strategies import make_chain, make_cluster


def _two_regions(memory_bytes: float = 1e15) -> Instance:
    """Machines 0-3: a region of 1e15 FLOP/s GPUs; 4-7: one of 1e14. 1 ms and 10 GB/s inside a
    region, 50 ms and 100 MB/s between them; an 8-layer model crossing 100 MB at every cut."""
    region = np.repeat([0, 1], 4)
    same = region[:, None] == region[None, :]
    latency = np.where(same, 0.001, 0.05)
    np.fill_diagonal(latency, 0.0)
    bandwidth = np.where(same, 1e10, 1e8)
    cluster = make_cluster([1e15] * 4 + [1e14] * 4, latency, bandwidth, memory_bytes=memory_bytes)
    return Instance(cluster, make_chain([1e13] * 8, [1e8] * 8, params=[1e8] * 8))


def test_the_bound_is_the_best_prefix_of_compute_against_the_narrowest_link():
    inst = _two_regions()
    flops = float(train_flops(inst.workload).sum())  # forward + backward of one micro-batch
    bounds = bottleneck_bounds_s(inst)
    # From a fast machine: the 4 of its region share the compute over 10 GB/s links (a 100 MB
    # cut: 0.01 s); a fifth machine would put a stage boundary on the 100 MB/s link (1 s).
    assert bounds[:4] == pytest.approx(flops / 4e15, rel=1e-12)
    # From a slow machine: its own region's 4 slow GPUs; reaching the fast ones costs the 1 s link.
    assert bounds[4:] == pytest.approx(flops / 4e14, rel=1e-12)
    assert flops / 4e15 > 0.01 and flops / 4e14 < 1.0  # compute, not the links, binds both
    assert bound_ranked(inst, [7, 5, 2, 0]) == [0, 2, 5, 7]  # least bound first, ties to the lower index


def test_a_start_whose_machines_cannot_hold_the_model_has_no_bound():
    inst = _two_regions(memory_bytes=1e6)  # far less than the model's state
    assert np.isinf(bottleneck_bounds_s(inst)).all()
    assert bound_ranked(inst, list(range(8))) == []


def test_the_bound_orders_machines_as_a_chain_prefers_them(monkeypatch):
    """Each start's nearest machines are in NeighbourOrder's preference order (what a chain
    from there would take first), whatever the block of starts sorted at once."""
    inst = RandomGeoGenerator(num_machines=(24, 24), num_regions=(3, 5), data_parallel=(2,))(np.random.default_rng(7))
    order = NeighbourOrder(inst)
    starts = np.arange(inst.num_machines)
    near = start_bound._nearest_first(inst, starts)
    for s in starts:
        assert near[s, 0] == s
        assert np.array_equal(near[s], order.row(int(s)))
    whole = bottleneck_bounds_s(inst)
    monkeypatch.setattr(start_bound, "_ROWS_PER_BLOCK", 5)
    assert np.array_equal(bottleneck_bounds_s(inst), whole)


def test_the_decision_adds_the_best_bounded_starts_it_does_not_have():
    regions = ["a", "a", "b", "b", "c"]
    ranked = [0, 1, 2, 3, 4]  # the network's order
    asked = []
    chosen = choose_starts(ranked, regions, 2, 0, lambda first: asked.extend(first) or [1.0] * len(first), bounded=[3, 0, 4, 1], bound_starts=2)
    assert chosen == [0, 2, 3, 4] and asked == chosen  # 0 is the network's already: skipped
    assert choose_starts(ranked, regions, 2, 0, lambda first: [1.0] * len(first)) == [0, 2]  # no bound: as before
