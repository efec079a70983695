"""Bytes on the wire per iteration: per link, totals, WAN share and the ring all-reduce (hulk_env/traffic.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.cluster import Cluster, Machine
from hulk_env.instance import Instance
from hulk_env.traffic import dp_rings, link_traffic_bytes, ring_link_bytes, traffic, wan_share
from hulk_env.units import GB, GBPS, MS, TFLOPS
from hulk_env.workload import Workload


def instance(data_parallel: int = 1) -> Instance:
    """4 machines in regions a, a, b, b; a 3-layer chain with activations of 1, 2, 3 MB."""
    machines = tuple(Machine(f"m{i}", r, "custom", 1, 100 * TFLOPS, 80 * GB) for i, r in enumerate("aabb"))
    lat = np.full((4, 4), 10 * MS) - np.eye(4) * 10 * MS
    cluster = Cluster(machines, lat, np.full((4, 4), 1 * GBPS), name="four")
    workload = Workload(
        name="chain3", layer_names=("l0", "l1", "l2"), flops=np.full(3, TFLOPS), params=np.array([1e8, 2e8, 3e8]),
        activation_bytes=np.array([1e6, 2e6, 3e6]), stash_bytes=np.full(3, 1e6), edges=[(0, 1), (1, 2)],
        num_micro_batches=4, data_parallel=data_parallel, schedule="1f1b",
    )  # fmt: skip
    return Instance(cluster, workload, "four x chain3")


def test_ring_link_bytes():
    assert ring_link_bytes(12.0, 1) == 0.0
    assert ring_link_bytes(12.0, 2) == 12.0
    np.testing.assert_allclose(ring_link_bytes(np.array([12.0, 12.0]), np.array([3, 4])), [16.0, 18.0])


def test_pipeline_and_ring_traffic_per_link_and_in_total():
    inst = instance(data_parallel=3)
    w = inst.workload
    placement = np.array([[0, 0, 2], [1, 1, 1], [3, 3, 3]])
    per_link = link_traffic_bytes(inst, placement)
    # Pipeline: replica 0 sends l1's 2 MB from m0 to m2, 4 micro-batches, and the gradients back.
    pipeline = np.zeros((4, 4))
    pipeline[0, 2] = pipeline[2, 0] = 4 * 2e6
    # Rings: layers 0, 1 share the ring (0, 1, 3); layer 2 has its own ring (2, 1, 3).
    grad = w.params * w.grad_bytes_per_param
    shared, own = ring_link_bytes(grad[0] + grad[1], 3), ring_link_bytes(grad[2], 3)
    rings = np.zeros((4, 4))
    for members, per in (((0, 1, 3), shared), ((2, 1, 3), own)):
        for a, b in zip(members, members[1:] + members[:1], strict=True):
            rings[a, b] += per
    np.testing.assert_allclose(per_link, pipeline + rings)
    region = inst.cluster.region_index
    totals = traffic(inst, placement)
    assert totals.total_bytes == pytest.approx(per_link.sum())
    assert totals.wan_bytes == pytest.approx(per_link[region[:, None] != region[None, :]].sum())
    assert 0 < totals.wan_share < 1 and wan_share(inst, placement) == totals.wan_share
    ring = dp_rings(w, placement[None])
    assert ring.size[0].tolist() == [3, 3, 3] and ring.leader[0].tolist() == [True, False, True]


def test_the_cost_model_times_the_same_ring_bytes():
    inst = instance(data_parallel=2)
    c, w = inst.cluster, inst.workload
    placement = np.array([[0, 0, 0], [2, 2, 2]])  # one ring (0, 2) of all gradients
    grad = float((w.params * w.grad_bytes_per_param).sum())
    expected = 2 * (2 - 1) * 10 * MS + ring_link_bytes(grad, 2) / GBPS
    assert cost.evaluate(c, w, placement).dp_sync_s == pytest.approx(expected)
    assert link_traffic_bytes(inst, placement)[0, 2] == pytest.approx(grad)


def test_partial_placements_count_what_is_placed():
    inst = instance(data_parallel=2)
    partial = np.array([[0, 2, -1], [-1, -1, -1]])
    per_link = link_traffic_bytes(inst, partial)
    expected = np.zeros((4, 4))
    expected[0, 2] = expected[2, 0] = 4 * 1e6  # l0 -> l1 only; no all-reduce until all is placed
    np.testing.assert_allclose(per_link, expected)
    assert traffic(inst, np.full((2, 3), -1)).total_bytes == 0.0 and wan_share(inst, np.full((2, 3), -1)) == 0.0
