"""`hulk show cluster --links` says where each latency and each bandwidth came from."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_env.cluster import get_cluster
from hulk_env.cluster.links import link_rows

CLUSTER = """\
name: labels
machines:
  - {name: a, region: aws:us-west-2, gpu: A100-80GB, num_gpus: 8, count: 2}
  - {name: ie, region: eu-west-1, gpu: A100-40GB, num_gpus: 8}
  - {name: nl, region: gcp:europe-west4, gpu: H100, num_gpus: 8}
  - {name: va, region: eastus, gpu: A10, num_gpus: 4}
links:
  - {a: aws:us-west-2, b: eu-west-1, rtt_ms: 152}
  - {a: ie, b: nl, latency_ms: 9.5, bandwidth_gbps: 2}
"""


def test_rtt_only_pair_is_not_called_measured_for_its_bandwidth(tmp_path):
    path = tmp_path / "labels.yaml"
    path.write_text(CLUSTER)
    out = CliRunner().invoke(app, ["show", "cluster", str(path), "--links", "--json"])
    rows = {(r["a"], r["b"]): r for r in json.loads(out.stdout)["links"]}
    rtt_only = rows[("a-0", "ie")]
    assert (rtt_only["latency_source"], rtt_only["bandwidth_source"]) == ("measured", "fitted from RTT")
    given = rows[("ie", "nl")]
    assert (given["latency_source"], given["bandwidth_source"]) == ("measured", "measured")
    assert (rows[("ie", "va")]["latency_source"], rows[("ie", "va")]["bandwidth_source"]) == (
        "imputed from geography", "imputed from geography",
    )  # fmt: skip
    assert rows[("a-0", "a-1")]["bandwidth_source"] == "LAN model"
    text = " ".join(
        CliRunner().invoke(app, ["show", "cluster", str(path), "--links"], env={"COLUMNS": "250"}).stdout.split()
    )
    assert "latency measured: rtt_ms 152 in the links entry at line 8; bandwidth fitted from RTT" in text
    assert "bandwidth measured" in text


def test_paper_pings_give_latency_only():
    rows = link_rows(get_cluster("hulk-paper"))
    sources = {(r["latency_source"], r["bandwidth_source"]) for r in rows}
    assert ("measured", "measured") not in sources  # the paper measured round trips, not bandwidth
    assert ("measured", "fitted from RTT") in sources and ("imputed", "fitted from RTT") in sources
