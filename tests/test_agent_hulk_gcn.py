"""hulk-gcn: the paper's GCN-over-machines method, trained on the instance with REINFORCE."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from agents.decision.hulk_gcn import (
    HulkGCN,
    hulk_gcn_method,
    machine_features,
    normalized_adjacency,
    sample_chain,
)
from agents.decision.methods import agent_methods
from hulk_env import cost
from hulk_env.baselines import METHODS
from hulk_env.evaluation import load_suite


def test_registered_for_the_leaderboard():
    assert agent_methods()["hulk-gcn"] is hulk_gcn_method


def test_plackett_luce_log_probabilities_sum_to_one():
    scores = torch.tensor([0.3, -1.0, 2.0, 0.5])
    total = 0.0
    for order in itertools.permutations(range(4), 2):
        # log P of a given order, computed the way sample_chain does for the drawn one
        chosen = scores[list(order)]
        rest = [i for i in range(4) if i not in order]
        norm = [torch.logsumexp(torch.cat([chosen[i:], scores[rest]]), 0) for i in range(2)]
        total += float(torch.exp((chosen - torch.stack(norm)).sum()))
    assert abs(total - 1.0) < 1e-6
    g = torch.Generator().manual_seed(0)
    counts = {}
    for _ in range(4000):
        order, log_prob = sample_chain(scores, 2, g)
        key = tuple(int(i) for i in order)
        counts[key] = (counts.get(key, (0, 0.0))[0] + 1, float(torch.exp(log_prob)))
    for n, p in counts.values():  # empirical frequency matches the stated probability
        assert abs(n / 4000 - p) < 0.03


def test_gcn_is_permutation_equivariant():
    inst = load_suite("geo-v0")[1]
    perm = np.random.default_rng(0).permutation(inst.num_machines)
    x, a = machine_features(inst), normalized_adjacency(inst)
    torch.manual_seed(0)
    gcn = HulkGCN(x.shape[1])
    s = gcn(torch.from_numpy(x), torch.from_numpy(a))
    sp = gcn(torch.from_numpy(x[perm]), torch.from_numpy(a[np.ix_(perm, perm)]))
    torch.testing.assert_close(sp, s[torch.as_tensor(perm)], atol=1e-5, rtol=1e-5)


def test_feasible_within_budget_and_seeded():
    for inst in load_suite("tiny-v0")[:6]:
        a = hulk_gcn_method(inst, 3, 60)
        b = hulk_gcn_method(inst, 3, 60)
        assert a.feasible, a.reason
        assert cost.evaluate(inst.cluster, inst.workload, a.placement).memory_feasible
        assert a.cost_evals <= 60 + 1  # + the naive fallback's evaluation
        assert np.array_equal(a.placement, b.placement)


def test_beats_naive_on_the_default_instance():
    from hulk_env.generators import fixed_instance

    inst = fixed_instance("default", "default")
    result = hulk_gcn_method(inst, 0, 400)
    naive = METHODS["naive"](inst, 0, None)
    t = cost.iteration_time(inst.cluster, inst.workload, result.placement)
    assert t < 0.5 * cost.iteration_time(inst.cluster, inst.workload, naive.placement)


def v100_cluster_instance(model: str):
    """64 single-V100 (32 GB) machines in 4 cities: memory binds with the real 1F1B stash."""
    from hulk_env.cluster import geo_cluster
    from hulk_env.instance import Instance
    from hulk_env.workload import catalog

    cluster = geo_cluster(["London", "Paris", "Berlin", "Madrid"], 16, [("V100-32GB", 1, 1.0)], seed=0, name="v100x64")
    return Instance(cluster, catalog.get_model(model), f"v100x64/{model}")


def test_chains_are_sized_with_the_real_1f1b_stash():
    from agents.decision.hulk_gcn import chain_length
    from hulk_env.feasibility import model_memory_bytes, stash_count

    inst = v100_cluster_instance("gpt3-6.7b")
    k = chain_length(inst)
    assert stash_count(inst, k) > 1  # the stash of a k-deep pipeline, not one micro-batch
    median = float(np.median(inst.cluster.memory_bytes))
    assert 2 * model_memory_bytes(inst, k) <= k * median < 2 * model_memory_bytes(inst, k - 1) * k / (k - 1)


def test_on_64_v100s_it_beats_naive_or_says_why():
    from hulk_env.reference import naive_placement

    for model, budget in (("gpt3-6.7b", None), ("gpt3-13b", 200)):
        inst = v100_cluster_instance(model)
        result = hulk_gcn_method(inst, 0, budget)
        assert result.feasible and 1 < result.cost_evals <= (budget or 2000)
        t = cost.iteration_time(inst.cluster, inst.workload, result.placement)
        t_naive = cost.iteration_time(inst.cluster, inst.workload, naive_placement(inst))
        if model == "gpt3-6.7b":  # chains of 23 machines fit: it trains and improves on naive
            assert t < t_naive and result.reason == ""
        else:  # 200 evaluations are too few here: it returns naive and says why
            assert (t < t_naive and result.reason == "") or (t == t_naive and "beat the naive placement" in result.reason)


V100_8_REGIONS = ["Ashburn", "Sao Paulo", "Frankfurt", "Cape Town", "Mumbai", "Singapore", "Tokyo", "Sydney"]


def v100_8_regions_instance(tmp_path):
    """Issue 34's case: 8 machines x 8 V100 over 8 regions, GPT-3 1.3B, 4 replicas (from a cluster file)."""
    from hulk_env.cluster.files import load_cluster_file
    from hulk_env.instance import Instance
    from hulk_env.workload import catalog

    path = tmp_path / "v100-8region.yaml"
    path.write_text("machines:\n" + "".join(f"  - {{region: {r}, gpu: V100-32GB, num_gpus: 8}}\n" for r in V100_8_REGIONS))
    return Instance(load_cluster_file(path), catalog.get_model("gpt3-1.3b", data_parallel=4), "v100-8region")


def test_a_chains_timed_candidates_include_the_shared_layout(tmp_path):
    # By the DP's estimate alone (no data-parallel sync) the 3 timed were all split layouts, their
    # gradient rings over intercontinental links: 18.97-20.9 s per iteration against chain-dp's ~1.5-1.9 s.
    from agents.decision.hulk_gcn import chain_placements

    inst = v100_8_regions_instance(tmp_path)
    (timed,) = chain_placements(inst, [np.arange(8)], 3)
    assert len(timed) == 3 and any((p == p[0]).all() for p in timed)
    times = [cost.iteration_time(inst.cluster, inst.workload, p) for p in timed]
    split = [t for t, p in zip(times, timed, strict=True) if not (p == p[0]).all()]
    assert min(times) < 0.5 * min(split)  # the shared layout is the one worth timing here


@pytest.mark.slow
def test_no_worse_than_latency_chain_dp_on_8_regions_of_v100s(tmp_path):
    inst = v100_8_regions_instance(tmp_path)
    result = hulk_gcn_method(inst, 0, None)
    chain = METHODS["latency-chain-dp"](inst, 0, None)
    t, t_chain = (cost.iteration_time(inst.cluster, inst.workload, r.placement) for r in (result, chain))
    assert t <= t_chain * (1 + 1e-9)  # measured: 1.4866 s both (was 20.86 s)
