"""hulk bench replace's held-out clusters: drawn over the validation and unseen cities, reproducibly."""

from __future__ import annotations

import numpy as np

from hulk_env.evaluation.suites import UNSEEN_CITIES, VALIDATION_CITIES
from hulk_env.replacement.bench import BENCH_CLUSTERS, HELDOUT_SHAPES, heldout_clusters


def test_the_heldout_clusters_are_over_the_heldout_cities_and_reproducible():
    clusters = heldout_clusters()
    assert len(clusters) == 2 * len(HELDOUT_SHAPES)
    assert not {c.name for c in clusters} & set(BENCH_CLUSTERS)
    for cluster, (pool, (cities, machines)) in zip(
        clusters, [(p, shape) for p in (VALIDATION_CITIES, UNSEEN_CITIES) for shape in HELDOUT_SHAPES], strict=True
    ):
        assert set(cluster.regions) <= set(pool) and len(cluster.regions) == cities
        assert cluster.num_machines == machines
    again = heldout_clusters()
    assert all(np.array_equal(a.latency_s, b.latency_s) and a.machines == b.machines for a, b in zip(clusters, again, strict=True))
