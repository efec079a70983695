"""Mixture-of-experts layers: parameters, FLOPs, memory, all-to-all, and analytic vs simulator."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hulk_env import cost, moe
from hulk_env.cluster import get_cluster
from hulk_env.feasibility import min_memory_bytes
from hulk_env.simulate import (
    MOE_VALIDATION_MODELS,
    analytic_vs_simulated,
    simulate,
    validation_cases,
)
from hulk_env.workload import catalog
from hulk_env.workload.transformer import TransformerConfig, build_transformer

MOE_MODELS = ("mixtral-8x7b", "mixtral-8x22b", "deepseek-moe-16b", "qwen1.5-moe-a2.7b")


def _tiny(**kw) -> TransformerConfig:
    base = dict(
        name="tiny-moe", num_layers=4, hidden=64, heads=4, vocab=100, seq_len=16, ffn=128,
        gated_ffn=True, biases=False, norm="rmsnorm", tied_embeddings=False, num_experts=4, top_k=2,
    )  # fmt: skip
    return TransformerConfig(**{**base, **kw})


@pytest.mark.parametrize("name", MOE_MODELS)
def test_catalog_moe_totals_and_active_params_match_published(name):
    w = catalog.get_model(name, layers_per_block=1)
    assert w.total_params == pytest.approx(catalog.PUBLISHED_PARAMS[name], rel=0.01)
    active = float(moe.active_params(w).sum())
    published = catalog.PUBLISHED_ACTIVE_PARAMS[name]
    # Published active counts are rounded to 0.1 B ("2.8B"): within 1%, or within that rounding.
    assert abs(active - published) <= max(0.01 * published, 0.05e9), (active, published)
    assert active < 0.35 * w.total_params


def test_mixtral_matches_its_checkpoint_exactly():
    assert catalog.get_model("mixtral-8x7b").total_params == 46_702_792_704


def test_moe_block_formulas():
    cfg = _tiny(shared_experts=1, shared_expert_ffn=32, capacity_factor=1.25)
    w = build_transformer(cfg)
    dense = build_transformer(replace(cfg, num_experts=0))
    h, f, e, k, b, s, p = 64, 128, 4, 2, 1, 16, 2.0
    expert = 3 * h * f
    block_moe_params = w.params[1] - (dense.params[1] - 3 * h * f)  # FFN swapped for the MoE
    assert block_moe_params == h * e + e * expert + 3 * h * 32
    assert w.moe.expert_params[1] == e * expert
    assert w.moe.a2a_bytes[1] == 1.25 * k * b * s * h * p
    moe_flops = w.flops[1] - (dense.flops[1] - 2 * b * s * expert)
    assert moe_flops == 2 * b * s * h * e + 1.25 * k * 2 * b * s * expert + 2 * b * s * 3 * h * 32
    assert w.moe.a2a_bytes[[0, -1]].tolist() == [0.0, 0.0]  # embedding and head are dense
    active = moe.active_params(w)
    assert active[1] == pytest.approx(w.params[1] - e * expert * (1 - k / e))
    first_dense = build_transformer(_tiny(first_dense_layers=1))
    assert first_dense.moe.num_experts.tolist() == [0, 0, 4, 4, 4, 0]
    assert first_dense.params[1] == dense.params[1]


def test_dense_models_carry_no_moe_and_coarsening_keeps_moe_totals():
    assert catalog.get_model("llama-7b").moe is None
    fine = build_transformer(_tiny(num_layers=6))
    coarse = fine.coarsen(4)
    assert coarse.moe.expert_params.sum() == fine.moe.expert_params.sum()
    assert coarse.moe.a2a_count.tolist() == [3.0, 3.0]
    assert float(moe.active_params(coarse).sum()) == pytest.approx(float(moe.active_params(fine).sum()))


def _two_machine_case():
    cluster = get_cluster("cloud-3region")
    w = build_transformer(_tiny(data_parallel=2, num_micro_batches=4))
    placement = np.array([[0] * w.num_layers, [5] * w.num_layers])
    return cluster, w, placement


def test_all_to_all_occupies_the_group_links_and_experts_leave_the_rings():
    cluster, w, placement = _two_machine_case()
    bd = cost.evaluate(cluster, w, placement)
    v = w.moe.a2a_bytes.sum()
    # Each replica slot sends 2 V / G over a -> b and receives as much (G = 2), both passes.
    expected = 2 * (2 * v / 2) / cluster.bandwidth_bps[0, 5]
    assert bd.link_s_per_mb[0, 5] == pytest.approx(expected)
    assert bd.link_s_per_mb[5, 0] == pytest.approx(2 * (2 * v / 2) / cluster.bandwidth_bps[5, 0])
    dense = cost.evaluate(cluster, replace(w, moe=None), placement)
    assert dense.link_s_per_mb.sum() == 0.0 and bd.dp_sync_s < dense.dp_sync_s
    assert bd.first_micro_batch_s > dense.first_micro_batch_s
    # Experts sharded: each machine holds ceil(4 / 2) = 2 of the 4 experts of every MoE layer.
    saved = w.state_bytes_per_param * w.moe.expert_params.sum() / 2
    assert dense.memory_bytes[0] - bd.memory_bytes[0] == pytest.approx(saved)
    # Every cost path agrees on MoE placements.
    one = cost.evaluate_one(cluster, w, placement)
    fast = cost.iteration_times(cluster, w, placement[None])
    assert one.iteration_time_s == bd.iteration_time_s == fast.iteration_time_s[0]


def test_one_machine_group_has_no_all_to_all():
    cluster, w, _ = _two_machine_case()
    placement = np.zeros((2, w.num_layers), dtype=int)
    bd = cost.evaluate(cluster, w, placement)
    dense = cost.evaluate(cluster, replace(w, moe=None), placement)
    assert bd.iteration_time_s == dense.iteration_time_s
    assert bd.memory_bytes[0] < dense.memory_bytes[0]  # the two replicas share the experts


def test_memory_bound_stays_below_every_placement():
    cluster, w, placement = _two_machine_case()
    used = cost.evaluate(cluster, w, placement).memory_bytes.sum()
    assert min_memory_bytes(w) <= used


def test_simulator_matches_analytic_on_a_lone_micro_batch():
    cluster, w, placement = _two_machine_case()
    w1 = w.with_training(num_micro_batches=1)
    sim = simulate(cluster, w1, placement)
    ana = cost.evaluate(cluster, w1, placement)
    assert sim.pipeline_s == pytest.approx(ana.pipeline_s, rel=1e-9)
    kinds = {t.detail for t in sim.tasks if t.kind == "transfer"}
    assert {"F a2a dispatch", "F a2a combine", "B a2a dispatch", "B a2a combine"} <= kinds


def _agreement(num_cases: int, seed: int):
    return analytic_vs_simulated(validation_cases(num_cases, seed=seed, models_drawn=MOE_VALIDATION_MODELS))


def test_analytic_and_simulator_agree_on_moe_instances_quick():
    """The first 50 of the 200 seeded MoE placements (~3 s): the dense set's tolerance."""
    comparison = _agreement(50, seed=0)
    assert comparison.median_rel_err <= 0.05
    assert comparison.p95_rel_err <= 0.15


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_analytic_and_simulator_agree_on_moe_instances(seed):
    """Issue 36's Done-when: 200 seeded MoE placements within the dense set's tolerance
    (median <= 5%, p95 <= 15%; docs/moe.md: seed 0 1.2% and 9.8%, seed 1, a draw the terms were
    not shaped on, 1.1% and 12.0%)."""
    comparison = _agreement(200, seed=seed)
    assert comparison.median_rel_err <= 0.05
    assert comparison.p95_rel_err <= 0.15


def _dense_before_rows() -> list[dict]:
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "moe" / "dense_before.json").read_text())


@pytest.mark.parametrize("row", _dense_before_rows(), ids=lambda row: row["case"])
def test_dense_costs_are_bit_identical_to_before_the_moe_terms(row):
    """Dense placements (and MoE models without their experts, and plan settings) cost exactly
    what they cost before the MoE queueing and stage terms (values written on main 500a481 by
    tests/data/moe/write_dense_before.py): the shipped search references depend on them."""
    cluster = get_cluster(row["cluster"])
    w = catalog.get_model(row["model"], data_parallel=row["data_parallel"], schedule=row["schedule"], num_micro_batches=8)
    w = replace(w, moe=None).with_training(tensor_parallel=row["tensor_parallel"], zero=row["zero"])
    placement = np.array(row["placement"])
    bd = cost.evaluate(cluster, w, placement)
    for key in ("iteration_time_s", "pipeline_s", "dp_sync_s", "first_micro_batch_s", "bottleneck_s"):
        assert float(getattr(bd, key)).hex() == row[key], key
    assert [float(x).hex() for x in bd.memory_bytes] == row["memory_bytes"]
    fast = cost.iteration_times(cluster, w, placement[None]).iteration_time_s[0]
    assert float(fast).hex() == row["fast_iteration_time_s"]


def _loop_queue_s(cluster, w, mach, cycle_s):
    """a2a_queue_s by a loop over every transfer of one placement ``[D, L]``: per slot
    ``(r, layer)`` on ``a`` and member ``b``, ``c`` times the squared seconds per cycle of the other transfers on
    ``a -> b`` (edges, combines for ``b``'s exchanges) and ``b -> a`` (edges, ``b``'s dispatches),
    over ``2 T``; 0 between machines that each serve one replica."""
    bw, m = cluster.bandwidth_bps, cluster.num_machines
    sq = np.zeros((2, m, m))  # [0]: edges + combines by link; [1]: edges + dispatches by link
    for r in range(len(mach)):
        for u, v in w.edges:
            a, b = mach[r, u], mach[r, v]
            sq[:, a, b] += (w.activation_bytes[u] / bw[a, b]) ** 2
            sq[:, b, a] += (w.activation_bytes[u] / bw[b, a]) ** 2
    layers = moe.moe_layer_indices(w)
    groups = {layer: list(dict.fromkeys(mach[:, layer].tolist())) for layer in layers}
    rounds = {layer: max(round(float(w.moe.a2a_count[layer])), 1) for layer in layers}
    for layer in layers:
        chunk = w.moe.a2a_bytes[layer] / rounds[layer] / len(groups[layer])
        for r in range(len(mach)):
            x = mach[r, layer]
            for y in groups[layer]:
                if y != x:  # x's exchange: dispatch x -> y, combine y -> x
                    sq[1, x, y] += 2 * rounds[layer] * (chunk / bw[x, y]) ** 2
                    sq[0, y, x] += 2 * rounds[layer] * (chunk / bw[y, x]) ** 2
    one = {x: len({r for r in range(len(mach)) if x in mach[r]}) == 1 for x in np.unique(mach)}
    out = {}
    for layer in layers:
        for r in range(len(mach)):
            a = mach[r, layer]
            for b in groups[layer]:
                if b != a:
                    q = 0.0 if one[a] and one[b] else rounds[layer] * (sq[0, a, b] + sq[1, b, a]) / (2 * cycle_s)
                    out[(r, layer, b)] = q
    return out


@pytest.mark.parametrize("table", ["dense", "sorted"])
def test_all_to_all_queueing_matches_a_loop_over_the_transfers(table, monkeypatch):
    if table == "sorted":  # the path of clusters of thousands of machines
        monkeypatch.setattr(moe, "_DENSE_TABLE", 1)
    cases = [c for c in validation_cases(40, seed=3, models_drawn=MOE_VALIDATION_MODELS) if c.workload.data_parallel > 1]
    checked = 0
    for c in cases[:6]:
        mach = c.placement
        queue = moe.a2a_queue_s(c.cluster, c.workload, mach[None], np.array([7.0]))[0]  # [D, D, K]
        layers = moe.moe_layer_indices(c.workload).tolist()
        expected = _loop_queue_s(c.cluster, c.workload, mach, 7.0)
        for (r, layer, b), q in expected.items():
            r2 = next(i for i in range(len(mach)) if mach[i, layer] == b)  # the member's first replica
            assert queue[r, r2, layers.index(layer)] == pytest.approx(q, rel=1e-12, abs=1e-300)
            checked += q > 0
    assert checked > 0  # some exchanges do queue in these placements


def test_exchanges_queue_only_on_machines_serving_several_replicas():
    cluster, w, placement = _two_machine_case()
    mach = placement[None]
    # Two machines, one replica each: in step, no queueing.
    assert np.array_equal(cost.moe_wait_s(cluster, w, mach), moe.a2a_latency_s(cluster, w, mach))
    # Machine 0 also holds replica 1's first layer: its exchanges meet other traffic and queue.
    shared = placement.copy()
    shared[1, 0] = 0
    alone = moe.a2a_latency_s(cluster, w, shared[None])
    waited = cost.moe_wait_s(cluster, w, shared[None])
    assert np.all(waited >= alone) and np.any(waited > alone)
    assert moe.serves_one_replica(shared[None], cluster.num_machines)[0, [0, 5]].tolist() == [False, True]


def test_moe_pipelines_fill_with_a_busy_bottleneck():
    """A two-replica MoE pipeline (validation case 35 of seed 0): the textbook charged the
    bottleneck stage's downstream round trip as idle (+17%); the stage term finds the busy
    bottleneck the simulator shows."""
    c = validation_cases(36, seed=0, models_drawn=MOE_VALIDATION_MODELS)[35]
    assert c.style == "pipeline" and c.workload.data_parallel == 2
    bd = cost.evaluate(c.cluster, c.workload, c.placement)
    sim = simulate(c.cluster, c.workload, c.placement, record=False)
    textbook = bd.first_micro_batch_s + (c.workload.num_micro_batches - 1) * bd.bottleneck_s
    assert bd.pipeline_s < 0.9 * textbook
    assert bd.pipeline_s == pytest.approx(sim.pipeline_s, rel=0.02)


def test_moe_cost_paths_agree_on_a_batch(monkeypatch):
    """The one-placement and fast paths agree bit for bit on MoE placements of every style (the
    dense link matrix of ``evaluate`` sums a link's transfers in another order: last bits), and
    a batch equals its placements one by one (the queueing's keyed sums are per row)."""
    cases = validation_cases(24, seed=5, models_drawn=MOE_VALIDATION_MODELS)
    for c in cases:
        bd = cost.evaluate(c.cluster, c.workload, c.placement)
        one = cost.evaluate_one(c.cluster, c.workload, c.placement)
        fast = cost.iteration_times(c.cluster, c.workload, c.placement[None]).iteration_time_s[0]
        assert one.iteration_time_s == fast
        assert bd.iteration_time_s == pytest.approx(fast, rel=1e-12)
    c = next(c for c in cases if c.workload.data_parallel > 1)
    rng = np.random.default_rng(0)
    from hulk_env.simulate import random_placement

    batch = np.stack([random_placement(rng, c.cluster.num_machines, c.workload, s) for s in ("scattered", "pipeline", "perturbed", "uneven") * 2])
    together = cost.iteration_times(c.cluster, c.workload, batch).iteration_time_s
    alone = [cost.iteration_times(c.cluster, c.workload, p[None]).iteration_time_s[0] for p in batch]
    assert together.tolist() == alone
    full = cost.evaluate_batch(c.cluster, c.workload, batch, dense_links=False).iteration_time_s
    assert full.tolist() == alone
    for table in (3 * c.cluster.num_machines**2 * 3, 1):  # 3 placements per dense table; sorted keys
        monkeypatch.setattr(moe, "_DENSE_TABLE", table)
        assert cost.iteration_times(c.cluster, c.workload, batch).iteration_time_s.tolist() == alone


def test_show_model_prints_active_params_and_all_to_all(cli_runner=None):
    from typer.testing import CliRunner

    from hulk_cli.app import app

    result = CliRunner().invoke(app, ["show", "model", "mixtral-8x7b", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["params"] == 46_702_792_704 and 12.8e9 < data["active_params"] < 13.0e9
    rows = data["a2a_per_layer"]
    assert len(rows) == 32 and data["expert_group"] == 8
    v = 2 * 4096 * 4096 * 2.0  # top-2 x tokens x hidden x 2 bytes
    assert rows[0]["dispatched_bytes"] == v and rows[0]["forward_bytes"] == pytest.approx(2 * v * 7 / 8)
    text = CliRunner().invoke(app, ["show", "model", "mixtral-8x7b"]).output
    assert "active per token" in text and "dispatched MB" in text


def test_workload_file_takes_moe_keys(tmp_path):
    from hulk_env.errors import HulkInputError
    from hulk_env.workload import load_workload

    text = (
        "name: my-moe\ntransformer:\n  num_layers: 4\n  hidden: 256\n  heads: 4\n  vocab: 1000\n"
        "  seq_len: 128\n  ffn: 512\n  gated_ffn: true\n  num_experts: 8\n  top_k: {k}\n"
        "  shared_experts: 0\n  first_dense_layers: 1\n  capacity_factor: 1.25\n"
    )
    path = tmp_path / "moe.yaml"
    path.write_text(text.format(k=2))
    w = load_workload(str(path))
    assert w.moe.num_experts.tolist() == [0, 0, 8, 8, 8, 0] and w.moe.a2a_bytes[2] == 1.25 * 2 * 128 * 256 * 2
    path.write_text(text.format(k=9))
    with pytest.raises(HulkInputError, match="top_k 9 exceeds num_experts 8"):
        load_workload(str(path))


def test_a_machine_waits_for_its_all_to_all():
    cluster, w, placement = _two_machine_case()
    bd = cost.evaluate(cluster, w, placement)
    dense = cost.evaluate(cluster, replace(w, moe=None), placement)
    wait = moe.a2a_latency_s(cluster, w, placement[None])[0]
    assert bd.compute_s_per_mb[0] == pytest.approx(dense.compute_s_per_mb[0] + 2 * wait[0].sum())


@pytest.mark.parametrize("replicas", [1, 2])
def test_mixtral_places_on_the_papers_47_machines(replicas):
    from hulk_env.baselines import get_method
    from hulk_env.feasibility import diagnose_memory
    from hulk_env.instance import Instance

    cluster = get_cluster("hulk-paper")
    inst = Instance(cluster, catalog.get_model("mixtral-8x7b", data_parallel=replicas))
    assert cluster.num_machines == 47 and diagnose_memory(inst).binding == "none"
    result = get_method("compute-greedy")(inst, 0, 200)
    bd = cost.evaluate(cluster, inst.workload, result.placement)
    assert bd.memory_feasible and np.isfinite(bd.iteration_time_s)


def test_a_machine_waits_for_its_all_to_all_under_tensor_parallel():
    """Plan settings price a layer GPU group by group; the all-to-all wait still blocks the
    machine (it was left out: 60 tensor-parallel MoE validation placements, median 7.0% and p95
    35% off the simulator before, 1.6% and 13% with it)."""
    cluster, w, placement = _two_machine_case()
    tp = w.with_training(tensor_parallel=2)
    wait = cost.moe_wait_s(cluster, tp, placement[None])[0]
    with_moe = cost.machine_compute_s(cluster, tp, placement[None])[0]
    without = cost.machine_compute_s(cluster, replace(tp, moe=None), placement[None])[0]
    assert wait.sum() > 0
    assert with_moe[0] == pytest.approx(without[0] + 2 * wait[0].sum())
