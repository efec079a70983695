"""Hypothesis strategies and tiny hand-built instances shared by the tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from hulk_env.cluster import Cluster, Machine
from hulk_env.workload import Workload


def make_cluster(flops, latency_s, bandwidth_bps, memory_bytes=1e15, name="tiny") -> Cluster:
    machines = tuple(
        Machine(f"m{i}", f"r{i}", "custom", 1, float(f), float(memory_bytes)) for i, f in enumerate(flops)
    )
    return Cluster(machines, np.asarray(latency_s, float), np.asarray(bandwidth_bps, float), name=name)


def make_chain(flops, activation_bytes, params=None, stash=None, **training) -> Workload:
    n = len(flops)
    return Workload(
        name="chain",
        layer_names=tuple(f"l{i}" for i in range(n)),
        flops=flops,
        params=params if params is not None else [1e6] * n,
        activation_bytes=activation_bytes,
        stash_bytes=stash if stash is not None else [1e6] * n,
        edges=[[i, i + 1] for i in range(n - 1)],
        **training,
    )


@st.composite
def clusters(draw, min_machines=1, max_machines=5) -> Cluster:
    m = draw(st.integers(min_machines, max_machines))
    flops = draw(st.lists(st.floats(1e12, 1e15), min_size=m, max_size=m))
    upper = draw(st.lists(st.floats(0.0, 0.2), min_size=m * m, max_size=m * m))
    lat = np.triu(np.array(upper).reshape(m, m), 1)
    bw = np.array(draw(st.lists(st.floats(1e7, 1e10), min_size=m * m, max_size=m * m))).reshape(m, m)
    return make_cluster(flops, lat + lat.T, bw)


@st.composite
def workloads(draw, max_layers=6, max_dp=3) -> Workload:
    n = draw(st.integers(1, max_layers))
    # A random DAG in topological order: each layer reads from at least one earlier layer.
    edges = []
    for v in range(1, n):
        preds = draw(st.sets(st.integers(0, v - 1), min_size=1, max_size=min(2, v)))
        edges += [[u, v] for u in sorted(preds)]
    floats = st.floats(0.0, 1e13)
    return Workload(
        name="random",
        layer_names=tuple(f"l{i}" for i in range(n)),
        flops=draw(st.lists(floats, min_size=n, max_size=n)),
        params=draw(st.lists(st.floats(0, 1e8), min_size=n, max_size=n)),
        activation_bytes=draw(st.lists(st.floats(0, 1e9), min_size=n, max_size=n)),
        stash_bytes=draw(st.lists(st.floats(0, 1e9), min_size=n, max_size=n)),
        edges=edges,
        num_micro_batches=draw(st.integers(1, 8)),
        data_parallel=draw(st.integers(1, max_dp)),
        schedule=draw(st.sampled_from(["gpipe", "1f1b"])),
    )


@st.composite
def instances_with_placements(draw, max_machines=5, batch=3):
    cluster = draw(clusters(max_machines=max_machines))
    workload = draw(workloads())
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    shape = (batch, workload.data_parallel, workload.num_layers)
    return cluster, workload, rng.integers(0, cluster.num_machines, shape)
