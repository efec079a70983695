"""Cluster data model, the geo_cluster generator and the built-in clusters."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from hulk_env.cluster import Cluster, Machine, builtin, geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.hardware import geo


def _machines(m: int) -> tuple[Machine, ...]:
    return tuple(Machine(f"m{i}", "Paris", "A10", 1, 1e13, 24e9) for i in range(m))


def _cluster(lat=None, bw=None, m=3, **kw) -> Cluster:
    lat = np.full((m, m), 0.01) if lat is None else lat
    bw = np.full((m, m), 1e8) if bw is None else bw
    return Cluster(_machines(m), lat, bw, **kw)


def test_valid_cluster_normalises_diagonal_and_freezes_arrays():
    c = _cluster()
    np.testing.assert_array_equal(np.diag(c.latency_s), 0.0)
    assert np.all(np.isinf(np.diag(c.bandwidth_bps)))
    assert not c.imputed.any()
    with pytest.raises(ValueError):
        c.latency_s[0, 1] = 5.0


@pytest.mark.parametrize(
    ("lat", "bw", "m", "words"),
    [
        (np.array([[0, np.nan], [np.nan, 0]]), None, 2, "finite"),
        (np.array([[0, -0.1], [-0.1, 0]]), None, 2, "negative latency"),
        (np.array([[0, 0.1], [0.2, 0]]), None, 2, "not symmetric"),
        (np.zeros((3, 3)), None, 2, r"shape \(3, 3\), expected \(2, 2\)"),
        (None, np.array([[np.inf, 0.0], [1e9, np.inf]]), 2, "bandwidth"),
        (None, np.array([[np.inf, np.nan], [1e9, np.inf]]), 2, "bandwidth"),
    ],
)
def test_invalid_matrices_raise(lat, bw, m, words):
    with pytest.raises(HulkInputError, match=words):
        Cluster(_machines(m), lat if lat is not None else np.zeros((m, m)),
                bw if bw is not None else np.ones((m, m)))  # fmt: skip


def test_empty_and_duplicate_names_raise():
    with pytest.raises(HulkInputError, match="at least one machine"):
        Cluster((), np.zeros((0, 0)), np.zeros((0, 0)))
    twice = (_machines(1)[0], _machines(1)[0])
    with pytest.raises(HulkInputError, match="duplicate machine name"):
        Cluster(twice, np.zeros((2, 2)), np.ones((2, 2)))


def test_machine_validation():
    with pytest.raises(HulkInputError, match="flops"):
        Machine("x", "Rome", "A10", 1, float("nan"), 1e9)
    with pytest.raises(HulkInputError, match="num_gpus"):
        Machine("x", "Rome", "A10", 0, 1e12, 1e9)


def test_to_networkx_complete_graph_with_attributes():
    c = builtin.get_cluster("cloud-3region")
    g = c.to_networkx()
    m = c.num_machines
    assert g.number_of_nodes() == m and g.number_of_edges() == m * (m - 1) // 2
    assert g.nodes[0]["name"] == c.machines[0].name
    assert g.nodes[0]["flops"] == c.machines[0].flops
    assert g.edges[0, 5]["latency_s"] == pytest.approx(c.latency_s[0, 5])
    assert g.edges[0, 5]["imputed"] is True


def test_summary_keys_and_values():
    c = builtin.get_cluster("cloud-8region")
    s = c.summary()
    assert {"machines", "regions", "imputed_pairs", "total_memory_bytes"} <= set(s)
    assert s["machines"] == 32 and s["regions"] == 8
    assert s["imputed_pairs"] == 32 * 31 // 2
    assert s["total_memory_bytes"] == pytest.approx(sum(mc.memory_bytes for mc in c.machines))
    assert sum(r["machines"] for r in s["by_region"]) == 32


def test_subset_keeps_links():
    c = builtin.get_cluster("cloud-3region")
    sub = c.subset([5, 0])
    assert sub.machines == (c.machines[5], c.machines[0])
    assert sub.latency_s[0, 1] == c.latency_s[5, 0]


MIX = (("A100-40GB", 8, 1.0), ("T4", 4, 1.0))


def test_geo_cluster_is_deterministic_and_seed_dependent():
    a = geo_cluster(["Tokyo", "Berlin", "Lagos"], 3, MIX, seed=7, name="x", link_noise=0.2)
    b = geo_cluster(["Tokyo", "Berlin", "Lagos"], 3, MIX, seed=7, name="x", link_noise=0.2)
    c = geo_cluster(["Tokyo", "Berlin", "Lagos"], 3, MIX, seed=8, name="x", link_noise=0.2)
    assert a.machines == b.machines
    np.testing.assert_array_equal(a.latency_s, b.latency_s)
    np.testing.assert_array_equal(a.bandwidth_bps, b.bandwidth_bps)
    assert not np.array_equal(a.latency_s, c.latency_s)


def test_geo_cluster_layout_and_noise_floor():
    c = geo_cluster(["Tokyo", "Sydney"], [2, 3], MIX, seed=0, name="x", link_noise=1.0)
    assert [mc.region for mc in c.machines] == ["Tokyo"] * 2 + ["Sydney"] * 3
    assert [mc.name for mc in c.machines][:3] == ["tokyo-0", "tokyo-1", "sydney-0"]
    assert {(mc.gpu, mc.num_gpus) for mc in c.machines} <= {("A100-40GB", 8), ("T4", 4)}
    t, s = geo.CITIES["Tokyo"], geo.CITIES["Sydney"]
    floor_s = geo.min_rtt_ms_physical(geo.great_circle_km(t.lat, t.lon, s.lat, s.lon)) / 2e3
    assert np.all(c.latency_s[:2, 2:] >= floor_s - 1e-12)  # sigma 1 noise never beats light
    plain = geo_cluster(["Tokyo", "Sydney"], [2, 3], MIX, seed=0, name="x")
    lat, _ = geo.link_matrices([mc.lat for mc in plain.machines], [mc.lon for mc in plain.machines],
                               [mc.region for mc in plain.machines])  # fmt: skip
    np.testing.assert_allclose(plain.latency_s, lat)


def test_geo_cluster_bad_arguments():
    with pytest.raises(HulkInputError, match="one non-negative count per city"):
        geo_cluster(["Tokyo", "Sydney"], [2], MIX, seed=0, name="x")
    with pytest.raises(HulkInputError, match="unknown GPU"):
        geo_cluster(["Tokyo"], 1, (("B300", 8, 1.0),), seed=0, name="x")
    with pytest.raises(HulkInputError, match="unknown city"):
        geo_cluster(["Atlantis"], 1, MIX, seed=0, name="x")


def test_builtin_cluster_names_and_default():
    names = builtin.cluster_names()
    assert {"default", "paper-12city-47", "cloud-3region", "cloud-8region", "hulk-paper"} <= set(names)
    assert all(builtin.has_cluster(n) for n in names) and not builtin.has_cluster("nope")
    d, p = builtin.get_cluster("default"), builtin.get_cluster("paper-12city-47")
    assert d.machines == p.machines
    np.testing.assert_array_equal(d.latency_s, p.latency_s)
    with pytest.raises(HulkInputError, match=r"unknown cluster 'nope'.*paper-12city-47"):
        builtin.get_cluster("nope")


@pytest.mark.parametrize("name", ["paper-12city-47", "cloud-3region", "cloud-8region", "hulk-paper"])
def test_builtin_clusters_are_deterministic(name):
    a, b = builtin.get_cluster(name), builtin.get_cluster(name)
    assert a is not b and a.machines == b.machines
    np.testing.assert_array_equal(a.latency_s, b.latency_s)
    np.testing.assert_array_equal(a.bandwidth_bps, b.bandwidth_bps)


def test_paper_builtin_matches_paper_layout():
    c = builtin.get_cluster("paper-12city-47")
    assert c.num_machines == 47 and c.regions == geo.PAPER_CITIES
    assert Counter(mc.region for mc in c.machines) == builtin.PAPER_MACHINES_PER_CITY
    mix = {(g, n) for g, n, _ in builtin.PAPER_GPU_MIX}
    assert {(mc.gpu, mc.num_gpus) for mc in c.machines} <= mix


def test_cloud_8region_spans_continents():
    c = builtin.get_cluster("cloud-8region")
    assert len({geo.CITIES[r].continent for r in c.regions}) >= 5


def test_env_library_does_not_import_torch():
    code = (
        "import sys, hulk_env, hulk_env.hardware.gpus, hulk_env.hardware.geo, hulk_env.cluster;"
        "hulk_env.cluster.get_cluster('default'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
