"""hulk/Placement-v1: a mask that never leads to a dead end, a sparse observation, any size."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import hulk_env  # noqa: F401  (registers the envs)
from hulk_env import cost
from hulk_env.bench import bench_cluster
from hulk_env.env import MACHINE_FEATURES_V1, PlacementEnv, PlacementEnvV1, observation_floats
from hulk_env.env.observation import bandwidth_feature, latency_feature
from hulk_env.env.observation_v1 import MACHINE_INDEX_V1, neighbour_lists
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite, suite_instance
from hulk_env.evaluation.suites import heldout_specs
from hulk_env.generators import FixedGenerator, InstanceListGenerator, ToyGenerator
from hulk_env.validation import limits

SUITES = ("tiny-v0", "geo-v0", "hard-v0", "paper-v0", "unseen-v0", "unseen-v1", "val-v0", "val-x-v0", "val-xl-v0", "settings-v0")


# ---- policies that play the env: random, and deterministic greedy rules --------------------------


def fastest(env: PlacementEnvV1, obs: dict, rng) -> int:
    """Greedy: the allowed machine with the most FLOP/s (lowest index on ties)."""
    mask = obs["action_mask"] > 0
    flops = np.where(mask, obs["machine_features"][:, MACHINE_INDEX_V1["flops_rel"]], -1.0)
    return int(np.argmax(flops))


def stay_then_slack(env: PlacementEnvV1, obs: dict, rng) -> int:
    """Greedy: stay on the predecessor's machine if allowed, else the most slack."""
    mf = obs["machine_features"]
    mask = obs["action_mask"] > 0
    pred = np.flatnonzero(mask & (mf[:, MACHINE_INDEX_V1["holds_predecessor"]] > 0))
    if len(pred):
        return int(pred[0])
    return int(np.argmax(np.where(mask, mf[:, MACHINE_INDEX_V1["slack"]], -1.0)))


def last_allowed(env: PlacementEnvV1, obs: dict, rng) -> int:
    """Greedy: the highest-index allowed machine (the opposite of the naive order)."""
    return int(np.flatnonzero(obs["action_mask"])[-1])


def uniform(env: PlacementEnvV1, obs: dict, rng) -> int:
    return int(rng.choice(np.flatnonzero(obs["action_mask"])))


GREEDY = (fastest, stay_then_slack, last_allowed)


def play(env: PlacementEnvV1, instance, policy, rng) -> dict:
    """One episode; returns its final info. Every action is an allowed one."""
    obs, info = env.reset(options={"instance": instance})
    while True:
        a = policy(env, obs, rng)
        assert obs["action_mask"][a] == 1
        obs, _, terminated, truncated, info = env.step(a)
        assert not info["invalid_action"]
        if terminated or truncated:
            return info


def assert_completes(instance, episodes: int, seed: int = 0) -> None:
    env = PlacementEnvV1(generator=InstanceListGenerator((instance,)))
    rng = np.random.default_rng(seed)
    for policy in GREEDY + (uniform,) * episodes:
        info = play(env, instance, policy, rng)
        assert not info["dead_end"], (instance.instance_id, policy.__name__)
        placement = np.array(info["placement"])
        assert (placement >= 0).all()
        used = cost.memory_use_bytes(instance.cluster, instance.workload, placement[None])[0]
        assert np.all(used <= instance.cluster.memory_bytes), instance.instance_id


# ---- never a dead end ---------------------------------------------------------------------------------


def sample(suite: str) -> list:
    """A few instances of each suite for the default run: all of tiny-v0 and hard-v0 (where memory
    binds), every third of the others up to 64 machines."""
    if suite in heldout_specs():  # drawn alone: the rest of the suite is never looked at
        cases = heldout_specs()[suite][0]
        return [suite_instance(suite, k) for k in [k for k, case in enumerate(cases) if case[0] <= 64][::3]]
    instances = load_suite(suite)
    if suite in ("tiny-v0", "hard-v0"):
        return instances
    return [i for i in instances if i.num_machines <= 64][::3]


@pytest.mark.parametrize("suite", SUITES)
def test_sampled_suite_instances_never_dead_end(suite):
    """Every suite instance admits the naive placement (so some baseline places it): random
    masked episodes and three greedy rules always complete, within memory."""
    for inst in sample(suite):
        # hard-v0: the 10 episodes test_v0_dead_ends_where_v1_does_not once ran again on v1
        assert_completes(inst, episodes=10 if suite == "hard-v0" else 5)


@pytest.mark.slow
@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_instance_never_dead_ends_in_1000_random_episodes(suite):
    for inst in load_suite(suite):
        assert_completes(inst, episodes=1000, seed=1)


def test_v0_dead_ends_where_v1_does_not():
    """The point of v1: on memory-tight instances v0's per-layer mask walks into dead ends (v1
    completes the same instances: test_sampled_suite_instances_never_dead_end[hard-v0])."""
    hard = load_suite("hard-v0")
    v0 = PlacementEnv(generator=InstanceListGenerator(tuple(hard)))
    rng = np.random.default_rng(0)
    dead = 0
    for inst in hard:
        for _ in range(10):
            obs, _ = v0.reset(options={"instance": inst})
            done = False
            while not done:
                obs, _, done, truncated, info = v0.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            dead += bool(info["dead_end"])
    assert dead > 0


# ---- the Gymnasium contract ---------------------------------------------------------------------------


def test_registered_and_passes_the_gymnasium_checker():
    env = gym.make("hulk/Placement-v1", cluster="default", model="gpt3-1.3b", generator_kwargs={"data_parallel": 2})
    check_env(env.unwrapped, skip_render_check=True)
    env = gym.make("hulk/Placement-v1", generator="random", reward="dense")
    check_env(env.unwrapped, skip_render_check=True)
    assert "hulk/Placement-v0" in gym.registry  # v0 stays


def test_observation_is_sparse_and_its_size_is_the_documented_one():
    env = PlacementEnvV1(generator=FixedGenerator(cluster=bench_cluster(128), model="gpt3-1.3b"))
    obs, _ = env.reset(seed=0)
    m, k = env.max_machines, env.num_neighbours
    assert max(v.size for v in obs.values()) == m * k * 2  # neighbour_links: nothing M x M
    assert sum(v.size for v in obs.values()) == observation_floats(env.max_machines, env.max_layers, env.max_edges, k)
    assert obs["machine_features"].shape == (m, len(MACHINE_FEATURES_V1))
    for key, value in obs.items():
        assert env.observation_space[key].contains(value), key


def test_same_seed_same_episode():
    def run(seed):
        env = PlacementEnvV1(generator="random")
        obs, _ = env.reset(seed=seed)
        out = [obs]
        rng = np.random.default_rng(seed)
        done = False
        while not done:
            obs, _, done, _, _ = env.step(uniform(env, obs, rng))
            out.append(obs)
        return out

    a, b = run(3), run(3)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


def test_dense_reward_returns_the_terminal_value():
    inst = load_suite("hard-v0")[3]
    rng = np.random.default_rng(0)
    actions = []
    env = PlacementEnvV1(generator=InstanceListGenerator((inst,)), reward="dense")
    obs, _ = env.reset()
    total, done = 0.0, False
    while not done:
        a = uniform(env, obs, rng)
        actions.append(a)
        obs, r, done, _, info = env.step(a)
        total += r
    terminal = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
    terminal.reset()
    for a in actions:
        _, r, done, _, _ = terminal.step(a)
    assert abs(total - r) < 1e-9


def test_restoring_a_snapshot_replays_the_same_episode():
    """A snapshot is the episode at that step: restoring it gives the same observation and mask,
    the same actions then give the same observations, rewards (dense: the reward's own state is
    in the snapshot) and placement (memory-tight D = 4, so the witness repairs in between), and
    stepping after a restore leaves the snapshot as it was."""
    inst = suite_instance("unseen-v0", 5)
    env = PlacementEnvV1(generator=InstanceListGenerator((inst,)), reward="dense")
    rng = np.random.default_rng(2)
    obs, _ = env.reset()
    half = inst.num_layers * inst.workload.data_parallel // 2
    trail, done = [], False
    while not done:
        if env.state.t == half:
            snap, at_snap = env.snapshot(), obs
        a = uniform(env, obs, rng)
        obs, r, done, _, info = env.step(a)
        if env.state.t > half:
            trail.append((a, obs, r))
    for _ in range(2):  # a snapshot stays valid after the episode it was restored into moves on
        again = env.restore(snap)
        for key in at_snap:
            np.testing.assert_array_equal(again[key], at_snap[key])
        np.testing.assert_array_equal(env.action_masks(), at_snap["action_mask"] > 0)
        for a, seen, r in trail:
            obs, r2, done2, _, info2 = env.step(a)
            for key in seen:
                np.testing.assert_array_equal(obs[key], seen[key])
            assert r2 == r
        assert done2 and info2["placement"] == info["placement"]
    with pytest.raises(HulkInputError, match="snapshot"):
        env.restore(at_snap)


# ---- features -------------------------------------------------------------------------------------------


def test_feature_columns_follow_the_witness_and_the_links():
    inst = suite_instance("unseen-v0", 5)  # memory-tight, D = 4
    env = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
    obs, _ = env.reset()
    rng = np.random.default_rng(1)
    c = inst.cluster
    m = inst.num_machines
    col = MACHINE_INDEX_V1
    done = False
    while not done:
        s = env.state
        mf = obs["machine_features"]
        w = s.witness
        own = w.own_machine()
        assert mf[own, col["witness"]] == 1 and mf[:m, col["witness"]].sum() == 1
        assert obs["action_mask"][own] == 1  # the witness's machine is always allowed
        np.testing.assert_allclose(mf[:m, col["slack"]], w.slack / c.memory_bytes, rtol=1e-6, atol=1e-7)
        r, layer = divmod(s.t, inst.num_layers)
        preds = inst.workload.predecessors[layer]
        if preds:
            p = s.placement[r, preds[0]]
            np.testing.assert_allclose(mf[:m, col["pred_latency"]], latency_feature(c.latency_s[p]), rtol=1e-6)
            np.testing.assert_allclose(mf[:m, col["pred_bandwidth"]], bandwidth_feature(c.bandwidth_bps[p]), rtol=1e-6)
        else:
            assert not mf[:m, col["pred_latency"]].any()
        if r > 0:
            q = s.placement[r - 1, layer]
            np.testing.assert_allclose(mf[:m, col["ring_latency"]], latency_feature(c.latency_s[q]), rtol=1e-6)
        obs, _, done, _, info = env.step(uniform(env, obs, rng))
    # at the end the witness is the placement: free memory is what the cost model says is left
    used = cost.memory_use_bytes(c, inst.workload, np.array(info["placement"])[None])[0]
    np.testing.assert_allclose(obs["machine_features"][:m, col["free_memory"]], 1 - used / c.memory_bytes, atol=1e-6)


def test_neighbour_lists_are_nearest_then_gateways_without_repeats():
    cluster = bench_cluster(128)
    k = 16
    nb = neighbour_lists(cluster, k)
    lat, region = cluster.latency_s, cluster.region_index
    for i in range(cluster.num_machines):
        row = nb[i]
        assert (row >= 0).all() and len(set(row.tolist())) == k and i not in row
        near = row[: k // 2]
        others = np.delete(np.arange(cluster.num_machines), i)
        assert lat[i, near].max() <= np.sort(lat[i, others])[k // 2 - 1] + 1e-15
        # the gateways reach other regions, nearest region first
        gates = [g for g in row[k // 2 :] if region[g] != region[i]]
        assert len({region[g] for g in gates}) == len(gates) > 0
    tiny = neighbour_lists(load_suite("tiny-v0")[0].cluster, k)  # fewer machines than K: padded
    assert (tiny[:, load_suite("tiny-v0")[0].num_machines - 1 :] == -1).all()


def test_invalid_actions_fall_back_to_an_allowed_machine():
    inst = load_suite("hard-v0")[0]
    env = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
    obs, _ = env.reset()
    done = False
    while not done:
        masked = np.flatnonzero(obs["action_mask"][: inst.num_machines] == 0)
        action = int(masked[0]) if len(masked) else env.max_machines + 3
        before = env.state
        preds = inst.workload.predecessors[before.t % inst.num_layers]
        expected = {int(before.witness.own_machine())}
        if preds:
            expected.add(int(before.placement[before.t // inst.num_layers, preds[0]]))
        obs, _, done, _, info = env.step(action)
        assert info["invalid_action"] and info["applied_action"] in expected
    assert not info["dead_end"]
    penalty = PlacementEnvV1(generator=InstanceListGenerator((inst,)), invalid_action="penalty")
    obs, _ = penalty.reset()
    _, r, _, _, info = penalty.step(-1)
    assert r == pytest.approx(-0.1) and info["applied_action"] == -1 and penalty.state.t == 0


# ---- sizes and limits -----------------------------------------------------------------------------------


def test_2048_machines_place_and_stay_sparse():
    env = PlacementEnvV1(generator=FixedGenerator(cluster=bench_cluster(2048), model="gpt3-1.3b"))
    obs, _ = env.reset(seed=0)
    assert obs["machine_features"].shape[0] == 2048
    rng = np.random.default_rng(0)
    done = False
    while not done:
        obs, _, done, _, info = env.step(uniform(env, obs, rng))
    assert not info["dead_end"] and info["speedup"] > 0


def test_limits_and_bad_arguments_are_clear_errors():
    gen = ToyGenerator()
    # the env's limits are the project's input limits: whatever a loader accepts, the env can pad to
    with pytest.raises(HulkInputError, match=r"max_machines=5000 is above Placement-v1's limit of 4,096 \(limit MAX_MACHINES"):
        PlacementEnvV1(generator=gen, max_machines=5000)
    too_many = limits.MAX_SLOTS + 1
    with pytest.raises(HulkInputError, match=rf"max_layers={too_many} is above .* limit of 16,384 \(limit MAX_SLOTS"):
        PlacementEnvV1(generator=gen, max_layers=too_many)
    assert PlacementEnvV1(generator=gen, max_layers=limits.MAX_SLOTS).max_layers == limits.MAX_SLOTS
    with pytest.raises(HulkInputError, match="num_neighbours must be a positive integer"):
        PlacementEnvV1(generator=gen, num_neighbours=0)
    env = PlacementEnvV1(generator=gen)
    big = load_suite("geo-v0")[0]
    with pytest.raises(HulkInputError, match="above the env's padding"):
        env.reset(options={"instance": big})


def test_bench_env_measures_v1_large_clusters_and_v0_beside():
    from hulk_env.bench import bench_env

    out = bench_env(seconds=0.05, large=(96,))
    assert out["env"] == "hulk/Placement-v1" and out["machines"] == 47
    assert out["env_steps_per_s_96"] > 0 and out["ratio_96"] > 0
    assert out["v0_ratio"] > 0
    assert bench_cluster(96).num_machines == 96 and len(bench_cluster(96).regions) == 16
