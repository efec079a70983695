"""Placement at scale: chains walked only as far as used, bounded starts, budgets, time limits.

Speed is measured by ``hulk bench scale`` (never asserted here); these tests check that the
shortcuts change nothing they claim not to change, and that budgets and time limits stop work.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hulk_env.baselines import chain_dp, stage_dp
from hulk_env.baselines.chain_dp import MAX_STARTS, latency_chain_dp, start_machines
from hulk_env.baselines.chains import chain_stop, replica_chain_candidates
from hulk_env.baselines.common import (
    NeighbourOrder,
    nearest_neighbour_chain,
    out_of_time,
    time_limit,
)
from hulk_env.baselines.genetic import genetic
from hulk_env.baselines.stage_dp import split_chain
from hulk_env.bench_scale import bench_scale, growth_exponent, write_scale_cluster
from hulk_env.cluster import geo_cluster, load_cluster
from hulk_env.generators import DEFAULT_GPU_MIX
from hulk_env.instance import Instance
from hulk_env.workload import get_model

CITIES = ["Paris", "Berlin", "Tokyo", "Sydney", "Chicago", "Sao Paulo"]


def _instance(machines_per_city: int, model: str = "gpt3-125m", data_parallel: int = 1, seed: int = 3) -> Instance:
    cluster = geo_cluster(CITIES, machines_per_city, DEFAULT_GPU_MIX, seed=seed, name="scale", link_noise=0.2)
    return Instance(cluster, get_model(model, data_parallel=data_parallel), f"scale-{seed}")


def _reference_chain(instance: Instance, start: int) -> list[int]:
    """The greedy chain as it was written before NeighbourOrder: one lexsort per step."""
    c = instance.cluster
    left = [m for m in range(c.num_machines) if m != start]
    chain = [start]
    while left:
        here, cand = chain[-1], np.asarray(left)
        order = np.lexsort((cand, -c.flops[cand], -c.bandwidth_bps[here, cand], np.round(c.latency_s[here, cand], 4)))
        chain.append(int(cand[order[0]]))
        left.remove(chain[-1])
    return chain


def test_neighbour_order_gives_the_reference_chain():
    inst = _instance(6)
    order = NeighbourOrder(inst)
    for start in (0, 7, 35):
        assert nearest_neighbour_chain(inst, start, order=order).tolist() == _reference_chain(inst, start)


@pytest.mark.parametrize("data_parallel", [1, 2])
def test_a_stopped_chain_gives_the_candidates_of_the_full_chain(data_parallel, monkeypatch):
    inst = _instance(10, data_parallel=data_parallel)  # 60 machines > D x L slots: chains stop early
    order, make_stop = NeighbourOrder(inst), chain_stop(inst)
    full = nearest_neighbour_chain(inst, 4, order=order)
    short = nearest_neighbour_chain(inst, 4, order=order, stop=make_stop())
    assert len(short) < len(full) and full[: len(short)].tolist() == short.tolist()
    # The shared (and, with D replicas, the interleaved) candidates of the walked chain are exactly
    # the full chain's (the blocks cut the shorter prefix, by design). The walk stops for the
    # memory rule, so the splits without slow machines see only the fast machines walked.
    d, free = data_parallel, inst.cluster.memory_bytes
    for reverse in (False, True):
        a = split_chain(inst, short, free, share=d, reverse=reverse)
        b = split_chain(inst, full, free, share=d, reverse=reverse)
        assert a and [(s.estimate_s, s.row.tolist()) for s in a if not s.skips_slow] == [
            (s.estimate_s, s.row.tolist()) for s in b if not s.skips_slow
        ]
        if d > 1:
            with monkeypatch.context() as m:
                m.setattr(stage_dp, "without_slow", lambda instance, chain: chain)
                a = replica_chain_candidates(inst, [short[r::d] for r in range(d)], reverse)
                b = replica_chain_candidates(inst, [full[r::d] for r in range(d)], reverse)
            assert a and [(e, p.tolist()) for e, p in a] == [(e, p.tolist()) for e, p in b]


def test_starts_cover_every_machine_class_when_capped():
    inst = _instance(10)
    assert start_machines(inst) == list(range(60))
    picked = start_machines(inst, limit=12)
    assert len(picked) == len(set(picked)) == 12
    classes = {(mc.region, mc.gpu, mc.num_gpus, mc.memory_bytes) for mc in inst.cluster.machines}
    chosen = {(mc.region, mc.gpu, mc.num_gpus, mc.memory_bytes) for mc in (inst.cluster.machines[i] for i in picked)}
    assert len(chosen) == min(12, len(classes))
    assert MAX_STARTS >= 64  # every benchmark-suite cluster starts a chain from every machine


def _count_chains(monkeypatch) -> list[int]:
    """The start machines of the chains latency-chain-dp splits (built a group at a time)."""
    calls: list[int] = []
    real = chain_dp.chains_candidates

    def counting(instance, chains, **options):
        calls.extend(int(chain[0]) for chain in chains)
        return real(instance, chains, **options)

    monkeypatch.setattr(chain_dp, "chains_candidates", counting)
    return calls


def test_budget_bounds_the_chains_walked(monkeypatch):
    inst = _instance(8)
    calls = _count_chains(monkeypatch)
    result = latency_chain_dp(inst, budget=5)
    assert result.feasible and result.cost_evals <= 5
    assert 1 <= len(calls) < inst.num_machines / 2
    calls.clear()
    latency_chain_dp(inst)
    assert len(calls) == inst.num_machines


def test_time_limit_returns_the_best_so_far(monkeypatch):
    inst = _instance(8)
    calls = _count_chains(monkeypatch)
    with time_limit(0.0):
        assert out_of_time()
        result = latency_chain_dp(inst)
    assert not out_of_time()
    assert result.feasible and len(calls) == chain_dp.CHAIN_GROUP  # one group, then the limit stops the walk
    with time_limit(0.0):
        searched = genetic(inst, seed=0, budget=20_000)
    assert searched.feasible and searched.cost_evals < 20_000


def test_nested_time_limits_keep_the_earliest():
    with time_limit(1000), time_limit(0.0):
        assert out_of_time()
    with time_limit(None):
        assert not out_of_time()


def test_growth_exponent_is_the_log_log_slope():
    assert growth_exponent([100, 1000], [1.0, 100.0]) == pytest.approx(2.0)
    assert growth_exponent([128, 512, 2048], [2.0, 8.0, 32.0]) == pytest.approx(1.0)


def test_scale_cluster_file_loads(tmp_path):
    path = write_scale_cluster(tmp_path / "s.yaml", 64)
    cluster, _ = load_cluster(path)
    assert cluster.num_machines == 64 and len(cluster.regions) == 32


def test_bench_scale_runs_each_size_in_its_own_process():
    result = bench_scale([24, 48], env_seconds=0.2)
    assert [r["machines"] for r in result["sizes"]] == [24, 48]
    for row in result["sizes"]:
        assert "error" not in row, row
        assert row["place_feasible"] and row["show_s"] > 0 and row["env_steps_per_s"] > 0
        assert row["peak_rss_mb"] > 10
    assert math.isfinite(result["growth_exponent"])
    json.dumps(result)


@pytest.mark.slow
def test_latency_chain_dp_at_2048_machines():
    from hulk_env.bench_scale import measure_size

    row = measure_size(2048, env_seconds=1.0)
    assert row["place_feasible"] and row["machines"] == 2048
    print(f"\n2,048 machines: {json.dumps(row)}")
