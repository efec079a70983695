"""Small hand-computable clusters and models shared by the re-placement tests."""

from __future__ import annotations

import numpy as np

from hulk_env.cluster import Cluster, Machine
from hulk_env.workload import Workload

GBS = 1e9  # bytes/s used in the hand computations
TFLOP = 1e12


def chain_workload(params: list[float], data_parallel: int = 1) -> Workload:
    n = len(params)
    return Workload(
        name=f"chain{n}",
        layer_names=tuple(f"l{i}" for i in range(n)),
        flops=np.full(n, 1e12),
        params=np.asarray(params, dtype=float),
        activation_bytes=np.full(n, 1e6),
        stash_bytes=np.full(n, 1e6),
        edges=np.array([[i, i + 1] for i in range(n - 1)], dtype=np.int64).reshape(-1, 2),
        data_parallel=data_parallel,
        state_bytes_per_param=16.0,
    )


def cluster(regions: list[str], latency_s: np.ndarray, bandwidth_bps: np.ndarray, memory_gb: float = 1000.0) -> Cluster:
    machines = tuple(
        Machine(f"m{i}", region, "custom", 1, 100 * TFLOP, memory_gb * 1e9) for i, region in enumerate(regions)
    )
    bw = np.array(bandwidth_bps, dtype=float)
    np.fill_diagonal(bw, np.inf)
    return Cluster(machines, np.asarray(latency_s, dtype=float), bw, name="hand")


# ---- 2-stage example ----------------------------------------------------------------------------
# Machines A, B, C in one region X; latency 1 ms everywhere, 1 GB/s everywhere except B -> C at
# 2 GB/s. Two layers of 1e9 and 2e9 parameters: 16 GB and 32 GB of state. Old: layer 0 on A,
# layer 1 on B. A fails.
def two_stage() -> tuple[Cluster, Workload, np.ndarray, np.ndarray]:
    lat = np.full((3, 3), 1e-3)
    np.fill_diagonal(lat, 0.0)
    bw = np.full((3, 3), 1.0 * GBS)
    bw[1, 2] = 2.0 * GBS
    c = cluster(["X", "X", "X"], lat, bw)
    w = chain_workload([1e9, 2e9])
    return c, w, np.array([[0, 1]]), np.array([True, False, False])


# ---- 3-region example ---------------------------------------------------------------------------
# Regions X (m0, m1), Y (m2), Z (m3, m4). Latency 5 ms inside Z, 50 ms between regions (10 ms
# X-X). Bandwidth 1 GB/s, except m4 -> m2 at 2 GB/s and m3 -> m2 at 0.5 GB/s. Three layers of
# 1, 2 and 3e9 parameters: 16, 32, 48 GB. Two replicas: r0 on m0, m0, m1 (region X), r1 on m3,
# m4, m4 (region Z). Region X fails.
def three_region() -> tuple[Cluster, Workload, np.ndarray, np.ndarray]:
    regions = ["X", "X", "Y", "Z", "Z"]
    lat = np.full((5, 5), 0.05)
    lat[0, 1] = lat[1, 0] = 0.01
    lat[3, 4] = lat[4, 3] = 0.005
    np.fill_diagonal(lat, 0.0)
    bw = np.full((5, 5), 1.0 * GBS)
    bw[4, 2] = 2.0 * GBS
    bw[3, 2] = 0.5 * GBS
    c = cluster(regions, lat, bw)
    w = chain_workload([1e9, 2e9, 3e9], data_parallel=2)
    old = np.array([[0, 0, 1], [3, 4, 4]])
    return c, w, old, np.array([True, True, False, False, False])


