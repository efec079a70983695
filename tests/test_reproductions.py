"""The published measurements of experiments/reproductions: recomputed, they must match the
table their README states (so a cost-model change that moves them fails here and the table is
regenerated with ``python -m experiments.reproductions``), and the plans they use must fit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from experiments import reproductions as rep
from experiments.reproductions.__main__ import main
from hulk_env import cost

README = Path(rep.__file__).parent / "README.md"


@pytest.fixture(scope="module")
def rows() -> list[rep.Row]:
    return rep.reproduce()


def _readme_table() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- reproductions-table[^>]*-->\n(.*?)\n<!-- /reproductions-table -->", text, re.S)
    assert found, "README.md lost its generated table markers"
    return found.group(1)


def test_readme_states_the_recomputed_table(rows):
    assert _readme_table() == rep.markdown_table(rows), (
        "experiments/reproductions/README.md is stale: regenerate its table with "
        "python -m experiments.reproductions"
    )


def test_at_least_two_published_headline_figures_within_tolerance(rows):
    headline = [r for r in rows if r.headline and r.within]
    assert len({r.paper for r in headline}) >= 2
    assert {r.key for r in headline} >= {
        "megatron-1.7b", "megatron-3.6b", "intellect1-usa-utilisation",
        "intellect1-usa-europe-utilisation", "intellect1-global-utilisation",
    }
    for r in rows:  # every figure is shown, failures included, and its error is what it says
        assert r.error == pytest.approx(r.hulk / r.published - 1.0)
        assert r.within == (abs(r.error) <= 0.15)


def test_megatron_flops_formula_by_hand():
    # Table 1, 1.7B row: B 512, s 2048, l 24, h 2304, V 51200 (eq. 3 of Narayanan et al. 2021).
    row = rep.MEGATRON_TABLE_1[0]
    by_hand = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    assert rep.megatron_flops(row) == pytest.approx(by_hand)
    # the paper's own consistency: 137 TFLOP/s x 32 GPUs is its 4.4 PFLOP/s aggregate
    assert row.tflops_per_gpu * row.gpus / 1e3 == pytest.approx(4.4, rel=0.01)


def test_plans_are_the_papers_and_fit_in_memory():
    for row in rep.MEGATRON_TABLE_1:
        s = rep.megatron_setup(row)
        w = s.workload
        # every GPU of the row used once: D replicas x p nodes x 8 GPUs
        assert w.data_parallel * row.pipeline * rep.GPUS_PER_NODE == row.gpus
        assert len(np.unique(s.placement)) == row.gpus // rep.GPUS_PER_NODE
        assert w.micro_batch_size * w.num_micro_batches * w.data_parallel == row.batch
        assert w.tensor_parallel == row.tensor
        assert cost.evaluate(s.cluster, w, s.placement).memory_feasible
    for row in rep.INTELLECT_TABLE:
        s = rep.intellect_setup(row)
        w = s.workload
        assert (w.sync, w.inner_steps, w.outer_bits) == ("diloco", 100, 8)
        assert w.micro_batch_size * w.num_micro_batches == 128  # sequences per node and step
        assert 10.0e9 < w.params.sum() < 10.4e9  # INTELLECT-1's "10B"
        assert cost.evaluate(s.cluster, w, s.placement).memory_feasible


def test_diloco_times_split_step_and_outer_exchange():
    t = rep.diloco_times(rep.INTELLECT_TABLE[0])
    s = rep.intellect_setup(rep.INTELLECT_TABLE[0])
    step = float(cost.evaluate(s.cluster, s.workload, s.placement).iteration_time_s)
    assert t.inner_step_s == pytest.approx(step)
    # the outer exchange is one int8 ring over the 4 nodes: at least its bandwidth term
    params = s.workload.params.sum()
    ring = s.cluster.bandwidth_bps[[0, 1, 2, 3], [1, 2, 3, 0]].min()
    assert t.outer_s >= 2 * 3 / 4 * params * 1.0 / ring * (1 - 1e-9)
    assert t.compute_utilisation == pytest.approx(1 - t.outer_s / 100 / step)


def test_cli_json(capsys):
    assert main(["--json", "--case", "intellect1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tolerance"] == 0.15
    assert [r["key"] for r in out["rows"]][:2] == ["intellect1-usa-utilisation", "intellect1-usa-all-reduce"]
    assert all("error" in r and "within_tolerance" in r for r in out["rows"])
