"""One rule for a layer's training FLOPs: the env's and re-placement's compute seconds are the
cost model's ``C_m``, activation recomputation included."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.env import MACHINE_FEATURES, PlacementEnv, PlacementEnvV1
from hulk_env.generators import fixed_instance
from hulk_env.replacement import ReplacementProblem, standard_scenarios
from hulk_env.replacement.episode import (
    action_mask,
    apply_actions,
    episode_spec,
    finished,
    new_episodes,
)

LOAD = MACHINE_FEATURES.index("load")


@pytest.fixture(scope="module")
def full():
    """GPT-3 1.3B x 2 replicas with full recomputation on the 3-region cloud."""
    inst = fixed_instance("cloud-3region", "gpt3-1.3b", data_parallel=2, recompute="full")
    assert inst.workload.recompute_flops.sum() > 0
    return inst


def test_train_flops_is_what_the_cost_model_charges(full) -> None:
    w, c = full.workload, full.cluster
    np.testing.assert_array_equal(cost.train_flops(w), 3 * w.flops + w.recompute_flops)
    np.testing.assert_array_equal(cost.backward_flops(w), 2 * w.flops + w.recompute_flops)
    for m in range(c.num_machines):  # every layer of one replica on machine m
        only_m = np.full((1, 1, w.num_layers), m)
        compute = cost.machine_compute_s(c, w, only_m)[0, m]
        assert compute == pytest.approx(cost.train_flops(w).sum() / c.flops[m], rel=1e-12)


@pytest.mark.parametrize("env_cls", [PlacementEnv, PlacementEnvV1])
def test_env_train_seconds_are_the_cost_models_compute_per_micro_batch(full, env_cls) -> None:
    c, w = full.cluster, full.workload
    env = env_cls(cluster="cloud-3region", model="gpt3-1.3b", generator_kwargs={"data_parallel": 2})
    env.reset(seed=0, options={"instance": full})
    static = env.state.static
    for m in range(c.num_machines):  # a layer's train seconds: its share of C_m
        only_m = np.full((1, 1, w.num_layers), m)
        assert static.train_s[:, m].sum() == pytest.approx(cost.machine_compute_s(c, w, only_m)[0, m], rel=1e-12)
    rng = np.random.default_rng(0)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        done = terminated or truncated
    placed = cost.evaluate(c, w, env.placement).compute_s_per_mb
    np.testing.assert_allclose(env.state.load_s[: c.num_machines], placed, rtol=1e-12)
    expected = placed / (placed + static.balanced_s)
    np.testing.assert_allclose(obs["machine_features"][: c.num_machines, LOAD], expected, rtol=1e-6)


def test_replacement_episode_load_is_the_cost_models_compute(full) -> None:
    c, w = full.cluster, full.workload
    old = get_method("latency-chain-dp")(full, 0, None).placement
    scenario = standard_scenarios(c, old)[0]
    spec = episode_spec(ReplacementProblem(full, old, list(scenario.failed)))
    ep = new_episodes(spec, 1)
    while not finished(spec, ep):
        apply_actions(spec, ep, np.array([int(np.flatnonzero(action_mask(spec, ep)[0])[0])]))
    np.testing.assert_allclose(ep.load_s[0], cost.evaluate(c, w, ep.placement[0]).compute_s_per_mb, rtol=1e-12)
