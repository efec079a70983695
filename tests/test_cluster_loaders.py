"""Cluster loaders: the paper's release format, YAML/JSON files, load_cluster, bad files."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from hulk_env.cluster import (
    PAPER_CLUSTER,
    builtin,
    files,
    load_cluster,
    load_cluster_file,
    load_hulk_dir,
    paper_data_dir,
)
from hulk_env.errors import HulkInputError
from hulk_env.hardware import geo
from hulk_env.hardware.gpus import DEFAULT_MFU, gpu_by_name
from hulk_env.units import GB, GBPS, MS

BAD = Path(__file__).resolve().parent / "data" / "bad"


@pytest.fixture(scope="module")
def paper(hulk_data):
    return load_hulk_dir(hulk_data)


def _node_index(c, node: int) -> int:
    return [mc.name for mc in c.machines].index(str(node))


def test_paper_counts(paper):
    c, r = paper
    assert (c.num_machines, len(c.regions)) == (47, 12)
    assert set(c.regions) == set(geo.PAPER_CITIES)
    assert (r.machines, r.regions) == (47, 12)
    assert r.names_stripped == 4  # the four "Neimeng " cells
    assert (r.self_loops, r.duplicate_pairs) == (2, 2)
    assert r.measured_pairs + r.imputed_pairs == 47 * 46 // 2
    assert r.imputed_pairs == r.imputed_from_city_pairs + r.imputed_from_geography
    assert (r.imputed_from_city_pairs, r.imputed_from_geography) == (212, 338)  # SOURCE.md
    assert c.num_imputed_pairs == r.imputed_pairs
    d = r.to_dict()
    assert d["impossible_edges"] == r.impossible_edges and isinstance(d["notes"], list)
    json.dumps(d)


def test_paper_impossible_edges_strict_physics(paper):
    """Strict fibre bound: Tokyo-Berlin at 4 ms and 81 China-California pairs (42-100 ms
    over 9,500-10,600 km) are faster than light in fibre."""
    _, r = paper
    assert r.impossible_edges == 82
    assert r.measured_pairs == 613 - 82
    dropped = " ".join(n for n in r.notes if n.startswith("dropped"))
    for pair in ("Berlin-Tokyo", "Beijing-California", "California-Quanzhou"):
        assert pair in dropped


# sha256 of the files as the paper's Hulk_data.zip holds them: the package ships them unchanged.
PAPER_FILE_SHA256 = {
    "node_feature.csv": "7a88967710ac72d1f5fe2ac247af4cde48d95ebc46fc89439ff179bcc2509ac0",
    "edge.txt": "1f679dccb97bec13e062fd7ce042f2a5c22e8e85cc85feed5f47baf56e596909",
}


def test_shipped_paper_data_is_the_release_unchanged(hulk_data):
    assert hulk_data == paper_data_dir() and hulk_data.name == PAPER_CLUSTER
    for name, digest in PAPER_FILE_SHA256.items():
        assert hashlib.sha256((hulk_data / name).read_bytes()).hexdigest() == digest, name
    assert (hulk_data / "SOURCE.md").read_text().startswith("# The Hulk paper's public cluster data")


def test_builtin_hulk_paper_is_the_shipped_directory(paper):
    c, r = paper
    built, report = load_cluster("hulk-paper")
    assert built.name == "hulk-paper" and "hulk-paper" in builtin.cluster_names()
    assert built.machines == c.machines and report == r
    np.testing.assert_array_equal(built.latency_s, c.latency_s)
    np.testing.assert_array_equal(built.imputed, c.imputed)
    assert builtin.get_cluster("HULK-PAPER ").machines == c.machines
    _, tolerant = load_cluster("hulk-paper", min_rtt_fraction=0.1)
    assert tolerant.impossible_edges == 1  # the option reaches the built-in's loader


def test_paper_impossible_edges_tolerant(hulk_data):
    _, r = load_hulk_dir(hulk_data, min_rtt_fraction=0.1)
    assert r.impossible_edges == 1 and r.measured_pairs == 612
    assert any("Berlin-Tokyo: 4-4 ms" in n for n in r.notes)


def test_paper_duplicates_keep_minimum(paper):
    c, _ = paper
    for (u, v), rtt_ms in (((11, 30), 214), ((13, 14), 4)):
        i, j = _node_index(c, u), _node_index(c, v)
        assert c.latency_s[i, j] == pytest.approx(rtt_ms / 2 * MS)
        assert not c.imputed[i, j]


def test_paper_measured_pair_kept_as_one_way(paper):
    c, _ = paper
    i, j = _node_index(c, 0), _node_index(c, 1)  # "0 1 10": Beijing-Beijing, 10 ms RTT
    assert not c.imputed[i, j]
    assert c.latency_s[i, j] == pytest.approx(10 / 2 * MS)
    assert c.imputed[i, _node_index(c, 20)]  # Beijing-California 89 ms: below light in fibre


def test_impossible_edge_replaced_by_geographic_estimate(paper):
    c, _ = paper
    i, j = _node_index(c, 25), _node_index(c, 30)  # Tokyo-Berlin, 4 ms in edge.txt
    tokyo, berlin = geo.CITIES["Tokyo"], geo.CITIES["Berlin"]
    rtt = geo.rtt_ms_from_km(geo.great_circle_km(tokyo.lat, tokyo.lon, berlin.lat, berlin.lon))
    assert c.imputed[i, j] and c.imputed[j, i]
    assert c.latency_s[i, j] == pytest.approx(rtt / 2 * MS)
    assert c.bandwidth_bps[i, j] == pytest.approx(geo.wan_bandwidth_gbps(rtt) * GBPS)


def test_missing_pairs_use_city_median_else_geography(hulk_data, paper):
    c, _ = paper
    city = [mc.region for mc in c.machines]
    measured: dict[tuple[str, str], list[float]] = {}
    for i in range(47):
        for j in range(i + 1, 47):
            if not c.imputed[i, j]:
                key = tuple(sorted((city[i], city[j])))
                measured.setdefault(key, []).append(c.latency_s[i, j])
    model = geo.link_matrices([mc.lat for mc in c.machines], [mc.lon for mc in c.machines], city)[0]
    checked = Counter()
    for i in range(47):
        for j in range(i + 1, 47):
            if c.imputed[i, j]:
                values = measured.get(tuple(sorted((city[i], city[j]))))
                want = np.median(values) if values else model[i, j]
                assert c.latency_s[i, j] == pytest.approx(want)
                checked["median" if values else "model"] += 1
    assert checked["median"] > 100 and checked["model"] > 100


def test_paper_bandwidth_lan_in_city_wan_fit_across(paper):
    c, _ = paper
    same = geo.same_region([mc.region for mc in c.machines])
    off = ~np.eye(47, dtype=bool)
    np.testing.assert_allclose(c.bandwidth_bps[same & off], geo.LAN_BANDWIDTH_GBPS * GBPS)
    rtt_ms = 2 * c.latency_s / MS
    want = geo.wan_bandwidth_gbps(rtt_ms[~same]) * GBPS
    np.testing.assert_allclose(c.bandwidth_bps[~same], want)


# Expected inference for every (capability, memory) in node_feature.csv.
EXPECTED_GPUS = {
    ("6.1", 64): ("GTX-1080", 8),
    ("6.1", 128): ("GTX-1080", 16),
    ("7", 384): ("V100-32GB", 12),
    ("7.5", 144): ("T4", 9),
    ("8", 320): ("A100-40GB", 8),
    ("8", 640): ("A100-80GB", 8),
    ("8.6", 76): ("A10", 3),
    ("8.6", 96): ("A10", 4),
    ("8.6", 152): ("A10", 6),
    ("8.6", 320): ("A10", 13),
}


def test_gpu_inference_on_all_47_rows(hulk_data, paper):
    c, _ = paper
    with (hulk_data / "node_feature.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 47
    for row, mc in zip(rows, c.machines, strict=True):
        gpu, n = EXPECTED_GPUS[(row["Capability"].strip(), int(row["Memory"]))]
        assert (mc.name, mc.region) == (row["node"], row["City"].strip())
        assert (mc.gpu, mc.num_gpus) == (gpu, n)
        assert mc.memory_bytes == pytest.approx(float(row["Memory"]) * GB)
        assert mc.flops == pytest.approx(n * gpu_by_name(gpu).train_peak_flops * DEFAULT_MFU)


def test_builtin_paper_gpu_mix_is_the_loaders_inference(paper):
    c, _ = paper
    counts = Counter((mc.gpu, mc.num_gpus) for mc in c.machines)
    assert counts == {(g, n): w for g, n, w in builtin.PAPER_GPU_MIX}


# ---- YAML / JSON ------------------------------------------------------------------------------


def _docstring_example() -> str:
    doc = files.__doc__
    block = doc.split("in this format::", 1)[1].split("\n\n", 2)[1]
    return block


def test_module_docstring_example_loads(tmp_path):
    file = tmp_path / "lab.yaml"
    file.write_text(_docstring_example())
    c = load_cluster_file(file)
    assert c.name == "my-lab"
    assert [mc.name for mc in c.machines] == ["sj-0", "sj-1", "lab"]
    sj, lab = c.machines[0], c.machines[2]
    a100 = gpu_by_name("A100-80GB")
    assert (sj.region, sj.num_gpus, sj.gpu) == ("California", 8, "A100-80GB")
    assert sj.flops == pytest.approx(8 * a100.effective_flops(0.4))
    assert sj.memory_bytes == pytest.approx(8 * a100.memory_bytes)
    assert (lab.region, lab.lat, lab.lon, lab.gpu) == ("Lab-7", 48.14, 11.58, "custom")
    assert lab.flops == pytest.approx(150e12) and lab.memory_bytes == pytest.approx(96 * GB)
    # explicit link: sj-* <-> lab, one-way 40 ms, 0.8 Gbps, not imputed
    for i in (0, 1):
        assert c.latency_s[i, 2] == pytest.approx(0.040) == c.latency_s[2, i]
        assert c.bandwidth_bps[i, 2] == pytest.approx(0.8 * GBPS)
        assert not c.imputed[i, 2]
    # derived link inside California: LAN, flagged imputed
    assert c.latency_s[0, 1] == pytest.approx(geo.LAN_RTT_MS / 2 * MS)
    assert c.imputed[0, 1]


def test_json_equals_yaml(tmp_path):
    data = yaml.safe_load(_docstring_example())
    (tmp_path / "lab.json").write_text(json.dumps(data, indent=2))
    (tmp_path / "lab.yaml").write_text(_docstring_example())
    a, b = load_cluster_file(tmp_path / "lab.json"), load_cluster_file(tmp_path / "lab.yaml")
    assert a.machines == b.machines
    np.testing.assert_array_equal(a.latency_s, b.latency_s)


def test_region_links_aliases_and_default_bandwidth(tmp_path):
    file = tmp_path / "c.yml"
    file.write_text(
        "machines:\n"
        "  - {region: hohhot, gpu: a100 40gb, num_gpus: 8, count: 2}\n"
        "  - {region: Tokyo, gpu: H100}\n"
        "links:\n"
        "  - {a: Neimeng, b: tokyo-0, latency_ms: 30}\n"
    )
    c = load_cluster_file(file)
    # an alias keeps the name the user gave, and a link may name the city another way
    assert [mc.name for mc in c.machines] == ["hohhot-0", "hohhot-1", "tokyo-0"]
    assert c.regions == ("hohhot", "Tokyo")
    np.testing.assert_allclose(c.latency_s[:2, 2], 0.030)
    np.testing.assert_allclose(c.bandwidth_bps[:2, 2], geo.wan_bandwidth_gbps(60) * GBPS)
    assert not c.imputed[:2, 2].any() and c.imputed[0, 1]


def test_load_cluster_dispatch(hulk_data, tmp_path):
    c, r = load_cluster("cloud-3region")
    assert r is None and c.name == "cloud-3region"
    c, r = load_cluster(hulk_data)
    assert r is not None and c.num_machines == 47
    c, r = load_cluster(hulk_data / "node_feature.csv")
    assert r is not None and r.machines == 47
    (tmp_path / "x.yaml").write_text(_docstring_example())
    c, r = load_cluster(str(tmp_path / "x.yaml"))
    assert r is None and c.num_machines == 3
    with pytest.raises(HulkInputError, match=r"unknown cluster.*default.*paper-12city-47"):
        load_cluster("no-such-cluster")


# ---- bad files --------------------------------------------------------------------------------

# file -> (words the message must hold, the row it must name or None)
BAD_CLUSTERS = {
    "cluster_missing_column": (["node_feature.csv", "header", "Memory"], 1),
    "cluster_short_row": (["node_feature.csv", "expected 4 columns"], 3),
    "cluster_wrong_column_count": (["edge.txt", "expected 3 columns"], 2),
    "cluster_nan_latency": (["edge.txt", "latency_ms", "finite"], 3),
    "cluster_negative_latency": (["edge.txt", "negative latency"], 2),
    "cluster_unknown_capability": (["node_feature.csv", "Capability", "5.2"], 3),
    "cluster_unknown_city": (["node_feature.csv", "City", "unknown city 'Atlantis'"], 3),
    "cluster_non_numeric_memory": (["node_feature.csv", "Memory", "expected a number"], 3),
    "cluster_missing_edges": (["missing edge.txt"], None),
    "cluster_unknown_node": (["edge.txt", "node 9 is not in"], 2),
    "cluster_no_machines": (["node_feature.csv", "no machines"], None),
    "cluster_nodes_only.csv": (["unsupported cluster file type"], None),
    "cluster_unknown_city.yaml": (["unknown city 'Berln'", "did you mean Berlin"], 6),
    "cluster_unknown_gpu.yaml": (["gpu", "unknown GPU 'A200'"], 2),
    "cluster_empty.yaml": (["no machines"], None),
    "cluster_non_numeric.json": (["num_gpus", "expected an integer"], 4),
    "cluster_negative_link.yaml": (["latency_ms", ">= 0"], 5),
    "cluster_syntax_error.yaml": (["not valid YAML"], 4),
    "cluster_syntax_error.json": (["not valid JSON"], 1),
    "cluster_nan_memory.yaml": (["memory_gb", "finite"], 2),
    "cluster_unknown_link_end.yaml": (["unknown machine or region 'nowhere'"], 5),
    "cluster_duplicate_names.yaml": (["duplicate machine name 'gpu-box'"], 3),
    "cluster_unknown_key.yaml": (["unknown key", "gpus"], 2),
    "cluster_unknown_region_no_coords.yaml": (["unknown city 'Lab-7'", "lat/lon"], 2),
    # cloud regions and round-trip links
    "cluster_unknown_cloud_region.yaml": (["unknown aws region 'aws:us-west-9'", "us-west-2"], 3),
    "cluster_unknown_provider.yaml": (["unknown cloud provider 'ibm'", "aws, gcp, azure"], 2),
    "cluster_country_not_city.yaml": (["'Ireland'", "aws:eu-west-1 (Dublin)"], 3),
    "cluster_rtt_and_latency.yaml": (["rtt_ms", "not both"], 5),
    "cluster_negative_rtt.yaml": (["rtt_ms", ">= 0"], 5),
    "cluster_link_no_latency.yaml": (["missing latency_ms (one-way) or rtt_ms"], 5),
}


def test_bad_corpus_is_complete():
    on_disk = {p.name for p in BAD.glob("cluster_*")}
    assert on_disk == set(BAD_CLUSTERS) and len(on_disk) >= 8


@pytest.mark.parametrize("name", sorted(BAD_CLUSTERS))
def test_bad_cluster_file_gets_one_clear_line(name):
    words, row = BAD_CLUSTERS[name]
    with pytest.raises(HulkInputError) as info:
        load_cluster(BAD / name)
    message = str(info.value)
    assert name in message and "\n" not in message
    for word in words:
        assert word in message
    if row is not None:
        assert re.search(rf"\brow {row}\b", message), message
