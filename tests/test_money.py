"""Dollars per iteration: rental of the machines used plus egress by tier."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost, money
from hulk_env.cluster.files import load_cluster_file
from hulk_env.errors import HulkInputError
from hulk_env.workload import load_workload


def _three_providers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "machines:\n"
        "  - {name: a, region: aws:us-east-1, gpu: A100-80GB, num_gpus: 8}\n"
        "  - {name: b, region: aws:us-east-1, gpu: A100-80GB, num_gpus: 8}\n"
        "  - {name: c, region: gcp:europe-west4, gpu: H100, num_gpus: 8}\n"
        "  - {name: d, region: azure:eastus, gpu: A100-80GB, num_gpus: 8, usd_per_hour: 20}\n"
    )
    return load_cluster_file(path)


def test_tiers_and_prices(tmp_path):
    cluster = _three_providers(tmp_path)
    tiers = money.tier_matrix(cluster)
    assert money.TIERS[tiers[0, 1]] == "same_zone"
    assert money.TIERS[tiers[0, 2]] == "across_providers"
    assert money.TIERS[tiers[0, 3]] == "across_providers"
    prices = money.machine_usd_per_hour(cluster)
    assert prices[0] == pytest.approx(8 * 3.4309) and prices[2] == pytest.approx(8 * 6.88) and prices[3] == 20


def test_usd_per_iteration_by_hand(tmp_path):
    cluster = _three_providers(tmp_path)
    w = load_workload("gpt3-350m", data_parallel=2)
    n = w.num_layers
    place = np.array([[0] * n, [2] * n])  # replicas on a (AWS) and c (GCP): a ring of 2
    t = cost.evaluate(cluster, w, place).iteration_time_s
    got = money.dollars(cluster, w, place)
    ring = 2 * 1 / 2 * float(w.params.sum()) * w.grad_bytes_per_param  # each way
    assert got.egress_bytes == pytest.approx(2 * ring)
    assert got.egress_usd == pytest.approx(2 * ring / 1e9 * 0.09)
    assert got.rental_usd == pytest.approx(t / 3600 * 8 * (3.4309 + 6.88))
    assert money.usd_per_iteration(cluster, w, place) == pytest.approx(got.rental_usd + got.egress_usd)
    # DiLoCo: the exchange's bytes once every 100 steps at 8 bits instead of 16
    dil = money.dollars(cluster, w.with_training(sync="diloco", inner_steps=100, outer_bits=8), place)
    assert dil.egress_bytes == pytest.approx(2 * ring / 200)


def test_unpriced_gpu_says_what_to_give(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("machines:\n  - {name: a, region: Tokyo, gpu: RTX-3090, num_gpus: 4}\n")
    with pytest.raises(HulkInputError, match="usd_per_hour"):
        money.machine_usd_per_hour(load_cluster_file(path))


def test_env_cost_and_mixed_rewards():
    from hulk_env.env import PlacementEnv

    returns = {}
    for name in ("terminal", "cost", "mixed"):
        env = PlacementEnv(cluster="cloud-3region", model="gpt3-350m", reward=name,
                           generator_kwargs={"data_parallel": 2})
        obs, info = env.reset(seed=0)
        total, done = 0.0, False
        while not done:
            mask = info["action_mask"]
            obs, reward, done, _, info = env.step(int(np.flatnonzero(mask)[0]))
            total += reward
        returns[name] = total
        placement = np.array(info["placement"])
    inst = env.instance
    usd = money.dollars(inst.cluster, inst.workload, placement, impute=True).usd_per_iteration
    ref = money.dollars(inst.cluster, inst.workload, env.reference_placement, impute=True).usd_per_iteration
    saving = max(np.log(ref / usd), -5.0)
    assert returns["cost"] == pytest.approx(saving)
    assert returns["mixed"] == pytest.approx((returns["terminal"] + saving) / 2)
