"""PlacementEnv: API contract, checkers, determinism, masks, invalid actions, dead ends, info."""

from __future__ import annotations

import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import hulk_env
from hulk_env import cost
from hulk_env.env import ENV_ID, MACHINE_FEATURES, PlacementEnv
from hulk_env.errors import HulkInputError
from hulk_env.generators import ToyGenerator
from hulk_env.instance import Instance
from hulk_env.rewards import DEAD_END_REWARD, INVALID_ACTION_REWARD
from hulk_env.testing import random_masked_rollout, replay
from tests.strategies import make_chain, make_cluster

GB = 1e9

# SB3's checker warns about every non-1D Box in a Dict ("not an image, flatten it"): our
# matrices are meant for a graph network, so these known messages (and only these) are filtered.
SB3_KNOWN_WARNINGS = (
    r"Your observation \w+ has an unconventional shape \(neither an image, nor a 1D vector\)",
    r"It seems that your observation links is an image but its `dtype` is \(float32\)",
    r"It seems that your observation space links is an image but the upper and lower bounds",
    r"The minimal resolution for an image is 36x36 for the default `CnnPolicy`",
)


def dead_end_instance() -> Instance:
    """Two machines; layer 0 on the small one is valid but leaves layer 1 nowhere.

    1F1B with 2 micro-batches: layer 0 (16 MB state + 1 GB stash) fits the 1.5 GB machine
    with one stashed micro-batch; layer 1 (1.6 GB state) does not fit there, and putting it on
    the big machine makes the replica two machines deep, so machine 1 would have to stash two
    micro-batches of layer 0 (2.016 GB > 1.5 GB).
    """
    cluster = make_cluster(
        [100e12, 100e12], [[0, 0.01], [0.01, 0]], [[np.inf, 1e9], [1e9, np.inf]], memory_bytes=1.0
    )
    machines = (
        cluster.machines[0].__class__("big", "r0", "custom", 1, 100e12, 100 * GB),
        cluster.machines[1].__class__("small", "r1", "custom", 1, 100e12, 1.5 * GB),
    )
    cluster = hulk_env.Cluster(machines, cluster.latency_s, cluster.bandwidth_bps, name="dead-end")
    workload = make_chain(
        [1e12, 1e12], [1e7, 1e7], params=[1e6, 1e8], stash=[1e9, 1e9], num_micro_batches=2, schedule="1f1b"
    )
    return Instance(cluster, workload, "dead-end")


def toy_env(**kwargs) -> PlacementEnv:
    return PlacementEnv(generator="toy", **kwargs)


# ---- registration and spaces ----------------------------------------------------------------


def test_registered_and_import_is_torch_free():
    assert ENV_ID in gym.registry
    env = gym.make(ENV_ID, generator="toy")
    assert isinstance(env.unwrapped, PlacementEnv)
    assert isinstance(env.action_space, gym.spaces.Discrete)
    assert all(isinstance(s, gym.spaces.Box) and s.dtype == np.float32 for s in env.observation_space.spaces.values())


def test_import_does_not_load_torch():
    import subprocess

    code = "import sys, hulk_env, hulk_env.env, hulk_env.testing, hulk_env.bench; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_spaces_are_padded_to_the_generator_bounds():
    env = gym.make(ENV_ID, cluster="default", model="default")
    obs, info = env.reset(seed=0)
    m, n = 47, 26
    assert env.action_space.n == m
    assert obs["machine_features"].shape == (m, len(MACHINE_FEATURES))
    assert obs["links"].shape == (m, m, 2)
    assert obs["layer_features"].shape[0] == n and obs["edges"].shape == (25, 2)
    assert info["instance_id"] == "paper-12city-47xgpt3-1.3b"
    big = gym.make(ENV_ID, cluster="default", model="default", max_machines=64, max_layers=40, max_edges=50)
    obs, _ = big.reset(seed=0)
    assert obs["machine_mask"].sum() == m and obs["machine_mask"][m:].sum() == 0
    assert obs["action_mask"][m:].sum() == 0
    assert np.all(obs["links"][m:] == 0) and np.all(obs["layer_machine"][n:] == -1)
    assert obs["edge_mask"].sum() == 25


def test_padding_below_the_generator_is_a_clear_error():
    with pytest.raises(HulkInputError, match=r"max_machines=3 is below what the generator can draw \(4\)"):
        PlacementEnv(generator="toy", max_machines=3)  # toy draws up to 4 machines
    with pytest.raises(HulkInputError, match="unknown reward"):
        PlacementEnv(generator="toy", reward="sparse")
    with pytest.raises(HulkInputError, match="unknown invalid_action"):
        PlacementEnv(generator="toy", invalid_action="ignore")
    with pytest.raises(HulkInputError, match="unknown render_mode"):
        PlacementEnv(generator="toy", render_mode="human")
    with pytest.raises(HulkInputError, match="unknown generator"):
        PlacementEnv(generator="toys")
    with pytest.raises(HulkInputError, match="'fixed' generator"):
        PlacementEnv(generator="toy", cluster="default")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"generator": "toy"},
        {"generator": "toy", "reward": "dense", "invalid_action": "penalty", "render_mode": "ansi"},
        {"cluster": "default", "model": "default", "render_mode": "rgb_array"},
        {"generator": "random", "generator_kwargs": {"num_machines": [3, 6], "num_blocks": [2, 4]}},
    ],
)
def test_gymnasium_and_sb3_checkers_pass(kwargs):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(ENV_ID, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=kwargs.get("render_mode") is None)
        for message in SB3_KNOWN_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        sb3_check_env(env.unwrapped, warn=True)


# ---- determinism, replay, spaces -------------------------------------------------------------


def _rollout_arrays(env, seed, action_seed):
    rng = np.random.default_rng(action_seed)
    obs, _ = env.reset(seed=seed)
    trace = [obs]
    rewards = []
    done = False
    while not done:
        valid = np.flatnonzero(obs["action_mask"])
        obs, reward, terminated, truncated, _ = env.step(int(valid[rng.integers(len(valid))]))
        trace.append(obs)
        rewards.append(reward)
        done = terminated or truncated
    return trace, rewards


@pytest.mark.parametrize("generator", ["toy", "random"])
def test_same_seed_same_episode(generator):
    a, ra = _rollout_arrays(PlacementEnv(generator=generator, reward="dense"), seed=7, action_seed=1)
    b, rb = _rollout_arrays(PlacementEnv(generator=generator, reward="dense"), seed=7, action_seed=1)
    assert ra == rb
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    c, _ = _rollout_arrays(PlacementEnv(generator=generator), seed=8, action_seed=1)
    assert not all(np.array_equal(x["links"], y["links"]) for x, y in zip(a, c, strict=False))


def test_replaying_actions_reproduces_the_iteration_time():
    env = PlacementEnv(generator="random")
    rng = np.random.default_rng(3)
    for seed in range(5):
        first = random_masked_rollout(env, rng, seed=seed)
        again = replay(PlacementEnv(generator="random"), first.actions, seed=seed)
        assert again.instance_id == first.instance_id
        np.testing.assert_array_equal(again.placement, first.placement)
        assert again.iteration_time_s == first.iteration_time_s
        assert again.rewards == first.rewards
        # ... and on the instance itself, through reset options
        inst = env.instance
        third = replay(PlacementEnv(generator="random"), first.actions, options={"instance": inst})
        assert third.iteration_time_s == first.iteration_time_s


def test_fresh_arrays_every_step():
    env = PlacementEnv(generator="toy", generator_kwargs={"num_layers": [4, 5]})
    obs, _ = env.reset(seed=0)
    before = {k: v.copy() for k, v in obs.items()}
    obs2, *_ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    for key in obs:
        assert obs[key] is not obs2[key]
        np.testing.assert_array_equal(obs[key], before[key])  # stepping did not touch old arrays
        obs2[key][...] = 0  # users may scribble on what they get ...
    obs3, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert obs3["machine_mask"].sum() == env.instance.num_machines  # ... without harm
    assert obs3["links"].any() and obs3["layer_features"][:, -2].sum() == 2


# ---- what an episode records -------------------------------------------------------------------


def test_following_the_naive_placement_scores_zero():
    env = gym.make(ENV_ID, cluster="default", model="default", generator_kwargs={"data_parallel": 2})
    obs, info = env.reset(seed=0)
    ref = env.unwrapped.reference_placement
    for machine in ref.reshape(-1):
        assert obs["action_mask"][machine] == 1
        obs, reward, terminated, truncated, info = env.step(int(machine))
    assert terminated and not truncated
    assert reward == 0.0 and info["speedup"] == 1.0
    assert info["iteration_time_s"] == info["reference_time_s"]
    np.testing.assert_array_equal(info["placement"], ref)


def test_final_info_holds_the_cost_breakdown():
    env = toy_env()
    roll = random_masked_rollout(env, np.random.default_rng(0), seed=4)
    while not roll.completed:
        roll = random_masked_rollout(env, np.random.default_rng(len(roll.actions)))
    info = roll.info
    inst = env.instance
    breakdown = cost.evaluate(inst.cluster, inst.workload, roll.placement)
    assert info["cost"] == {**breakdown.to_dict(), "bottleneck": info["cost"]["bottleneck"]}
    expected = breakdown.to_dict()["bottleneck"]
    assert info["cost"]["bottleneck"] == (expected if isinstance(expected, list) else [expected])
    assert info["iteration_time_s"] == breakdown.iteration_time_s
    assert info["speedup"] == pytest.approx(info["reference_time_s"] / info["iteration_time_s"])
    assert roll.rewards[-1] == pytest.approx(np.log(info["speedup"]))
    assert info["dead_end"] is False and info["cost"]["memory_feasible"] is True
    assert np.all(roll.placement >= 0)


def test_cursor_and_flags_advance():
    env = PlacementEnv(generator="toy", generator_kwargs={"data_parallel": [2], "num_layers": [2, 3], "num_machines": [2, 2]})
    obs, _ = env.reset(seed=0)
    d, n = env.instance.data_parallel, env.instance.num_layers
    for t in range(d * n):
        assert obs["cursor"][0] == t
        current = obs["layer_features"][:, -1]
        assert current[t] == 1 and current.sum() == 1
        assert obs["layer_features"][:t, -2].sum() == t  # placed flags
        a = int(np.flatnonzero(obs["action_mask"])[0])
        obs, _, terminated, _, _ = env.step(a)
        assert obs["layer_machine"][t] == a
        if terminated:
            break


# ---- invalid actions and dead ends ---------------------------------------------------------------


def test_dead_end_terminates_with_the_documented_penalty():
    env = PlacementEnv(generator="toy", max_machines=4, max_layers=10, max_edges=10)
    obs, info = env.reset(options={"instance": dead_end_instance()})
    np.testing.assert_array_equal(obs["action_mask"][:2], [1, 1])
    obs, reward, terminated, truncated, info = env.step(1)  # layer 0 on the small machine
    assert terminated and not truncated
    assert reward == DEAD_END_REWARD
    assert info["dead_end"] is True
    np.testing.assert_array_equal(info["placement"], [[1, -1]])
    assert env.observation_space.contains(obs)
    assert obs["action_mask"][:2].sum() == 2  # final observations mark every real machine
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)


def test_invalid_action_falls_back_to_the_predecessor_machine():
    env = PlacementEnv(generator="toy", max_machines=4, max_layers=10, max_edges=10)
    env.reset(options={"instance": dead_end_instance()})
    obs, reward, terminated, _, info = env.step(0)
    np.testing.assert_array_equal(obs["action_mask"][:4], [1, 0, 0, 0])  # machine 1 cannot join
    assert info["invalid_action"] is False
    obs, reward, terminated, _, info = env.step(1)
    assert info["invalid_action"] is True and info["applied_action"] == 0
    assert terminated and info["placement"] == ((0, 0),)
    for bad in (3, 99, -1, "x"):  # padding, out of range, negative, not a number
        env.reset(options={"instance": dead_end_instance()})
        env.step(0)
        _, _, _, _, info = env.step(bad)
        assert info["invalid_action"] is True and info["applied_action"] == 0


def test_invalid_action_fallback_prefers_free_memory_without_a_predecessor():
    env = PlacementEnv(generator="toy", max_machines=4, max_layers=10, max_edges=10)
    env.reset(options={"instance": dead_end_instance()})
    _, _, _, _, info = env.step(3)  # padding: layer 0 has no predecessor -> most free memory
    assert info["applied_action"] == 0


def test_penalty_mode_keeps_the_slot_and_truncates():
    env = PlacementEnv(generator="toy", invalid_action="penalty", max_machines=4, max_layers=10, max_edges=10)
    env.reset(options={"instance": dead_end_instance()})
    env.step(0)
    obs, reward, terminated, truncated, info = env.step(1)
    assert reward == INVALID_ACTION_REWARD and not terminated and not truncated
    assert info["invalid_action"] is True and info["applied_action"] == -1
    assert obs["cursor"][0] == 1 and env.placement.tolist() == [[0, -1]]
    obs, reward, terminated, truncated, info = env.step(2)  # second invalid: D * L = 2 reached
    assert truncated and not terminated and reward == INVALID_ACTION_REWARD
    assert info["placement"] == ((0, -1),)


def test_reset_rejects_bad_instances():
    env = toy_env()
    with pytest.raises(HulkInputError, match="max_machines"):
        env.reset(options={"instance": ToyGenerator(num_machines=(5, 5), num_layers=(2, 2), data_parallel=(1,), max_placements=10**6)(np.random.default_rng(0))})
    with pytest.raises(HulkInputError, match="unknown reset option"):
        env.reset(options={"instances": None})
    with pytest.raises(HulkInputError, match="must be a hulk_env.Instance"):
        env.reset(options={"instance": "toy/1"})
    tight = dead_end_instance()
    infeasible = Instance(tight.cluster.subset([1]), tight.workload, "too-small")
    with pytest.raises(HulkInputError, match="naive placement"):
        env.reset(options={"instance": infeasible})


# ---- rendering -----------------------------------------------------------------------------------


def test_ansi_render_lists_every_machine_by_region():
    env = gym.make(ENV_ID, cluster="default", model="default", render_mode="ansi")
    env.reset(seed=0)
    for _ in range(3):
        env.step(5)
    text = env.render()
    cluster = env.unwrapped.instance.cluster
    assert all(mc.name in text for mc in cluster.machines)
    assert all(region in text for region in cluster.regions)
    assert "r0:0-2" in text and "step 3/26" in text


@pytest.mark.parametrize("kwargs", [{"cluster": "default", "model": "default"}, {"generator": "toy"}])
def test_rgb_render_is_an_image(kwargs):
    env = gym.make(ENV_ID, render_mode="rgb_array", **kwargs)
    obs, _ = env.reset(seed=0)
    env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert img.shape[0] >= 200 and img.std() > 0


def test_render_without_mode_warns_and_returns_none():
    env = toy_env()
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None
