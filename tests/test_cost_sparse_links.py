"""The cost model without the dense [M, M] link matrix gives the same breakdown."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from hulk_env import cost
from hulk_env.bench import bench_cluster
from hulk_env.evaluation import load_suite
from hulk_env.workload import catalog
from tests.strategies import instances_with_placements

FIELDS = [f for f in cost.IterationCost._fields if f != "link_s_per_mb"]


def assert_same(cluster, workload, placements):
    """Equal up to summation order (pair sums vs per-direction sums): values to 1e-12; the
    bottleneck's kind and link the same, or two links whose occupancy agrees to 1e-12."""
    dense = cost.evaluate_batch(cluster, workload, placements)
    sparse = cost.evaluate_batch(cluster, workload, placements, dense_links=False)
    assert sparse.link_s_per_mb.shape == (len(placements), 0, 0)
    for field in FIELDS:
        if field in ("bottleneck_kind", "bottleneck_index", "memory_feasible"):
            continue
        scale = 1e-12 * float(np.max(dense.iteration_time_s))  # differences of large terms (bubble_s)
        np.testing.assert_allclose(getattr(sparse, field), getattr(dense, field), rtol=1e-12, atol=scale, err_msg=field)
    np.testing.assert_array_equal(sparse.memory_feasible, dense.memory_feasible)
    m = cluster.num_machines
    for i in range(len(placements)):
        kind_d, kind_s = int(dense.bottleneck_kind[i]), int(sparse.bottleneck_kind[i])
        index_d, index_s = int(dense.bottleneck_index[i]), int(sparse.bottleneck_index[i])
        if (kind_d, index_d) == (kind_s, index_s):
            continue
        # a tie broken the other way by rounding: both candidates are (nearly) the bottleneck
        top = float(dense.bottleneck_s[i])
        for kind, index in ((kind_d, index_d), (kind_s, index_s)):
            value = dense.link_s_per_mb[i].ravel()[index] if kind == cost.BOTTLENECK_LINK else dense.compute_s_per_mb[i][index]
            assert abs(value - top) <= 1e-12 * top, (i, kind, index, value, top)
        assert m > 1


@settings(max_examples=80, deadline=None)
@given(instances_with_placements())
def test_random_instances_agree_field_by_field(case):
    cluster, workload, placements = case
    assert_same(cluster, workload, placements)


def test_link_bound_placements_and_ties_agree():
    # geo-v0 placements spread over many machines (link bottlenecks), and a homogeneous cluster
    # where equal links tie
    rng = np.random.default_rng(0)
    for inst in load_suite("geo-v0")[:6]:
        p = rng.integers(0, inst.num_machines, (64, inst.data_parallel, inst.num_layers))
        assert_same(inst.cluster, inst.workload, p)
    cluster = bench_cluster(32)
    workload = catalog.get_model("gpt3-1.3b")
    p = rng.integers(0, 2, (32, 1, workload.num_layers))  # two machines: both directions of one pair
    assert_same(cluster, workload, p)
    one = cost.evaluate(cluster, workload, p[0], dense_links=False)
    assert one.to_dict() == cost.evaluate(cluster, workload, p[0]).to_dict()
