"""Rewards: log speed-up values, and dense (potential-based) returns equal terminal returns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hulk_env.env import PlacementEnv
from hulk_env.errors import HulkInputError
from hulk_env.rewards import (
    DEAD_END_REWARD,
    INVALID_ACTION_REWARD,
    MIN_REWARD,
    complete_placement,
    completion_potential,
    log_speedup_reward,
    make_reward,
)
from tests.test_env import dead_end_instance


def test_log_speedup_values():
    assert log_speedup_reward(2.0, 2.0) == 0.0
    assert log_speedup_reward(1.0, 2.0) == pytest.approx(math.log(2))
    assert log_speedup_reward(4.0, 2.0) == pytest.approx(-math.log(2))
    assert log_speedup_reward(1e9, 1.0) == MIN_REWARD
    assert DEAD_END_REWARD < MIN_REWARD


def test_completion_fills_unplaced_slots_from_the_reference():
    partial = np.array([[2, -1, -1], [-1, -1, -1]])
    reference = np.array([[0, 0, 1], [1, 1, 1]])
    assert complete_placement(partial, reference).tolist() == [[2, 0, 1], [1, 1, 1]]


def test_unknown_reward_is_a_clear_error():
    with pytest.raises(HulkInputError, match="unknown reward 'shaped'"):
        make_reward("shaped")


def _play(env: PlacementEnv, seed: int, actions_rng: np.random.Generator, invalid_every: int = 0):
    """One episode; returns (rewards, actions). Every ``invalid_every``-th action is invalid."""
    obs, _ = env.reset(seed=seed)
    rewards, actions = [], []
    done = False
    while not done:
        valid = np.flatnonzero(obs["action_mask"])
        invalid = np.flatnonzero(obs["action_mask"] == 0)
        if invalid_every and len(actions) % invalid_every == 1 and len(invalid):
            a = int(invalid[0])
        else:
            a = int(valid[actions_rng.integers(len(valid))])
        obs, reward, terminated, truncated, info = env.step(a)
        rewards.append(reward)
        actions.append(a)
        done = terminated or truncated
    return rewards, info


@pytest.mark.parametrize("generator", ["toy", "random"])
def test_dense_and_terminal_returns_are_equal(generator):
    kwargs = {} if generator == "toy" else {"generator_kwargs": {"num_machines": [3, 8], "num_blocks": [2, 5]}}
    terminal = PlacementEnv(generator=generator, reward="terminal", **kwargs)
    dense = PlacementEnv(generator=generator, reward="dense", **kwargs)
    dead_ends = 0
    for seed in range(40):
        rt, info_t = _play(terminal, seed, np.random.default_rng(seed))
        rd, info_d = _play(dense, seed, np.random.default_rng(seed))
        assert len(rt) == len(rd)
        assert all(r == 0.0 for r in rt[:-1])
        assert sum(rd) == pytest.approx(rt[-1], abs=1e-9)
        assert info_t.get("iteration_time_s") == info_d.get("iteration_time_s")
        dead_ends += bool(info_t.get("dead_end"))
        if not info_t.get("dead_end"):
            assert rt[-1] == pytest.approx(max(math.log(info_t["speedup"]), MIN_REWARD))
    if generator == "toy":
        assert dead_ends > 0  # dead ends are covered too


def test_dense_partial_returns_track_the_completion_potential():
    env = PlacementEnv(generator="random", reward="dense", generator_kwargs={"num_blocks": [3, 6]})
    obs, _ = env.reset(seed=3)
    inst = env.instance
    total = 0.0
    rng = np.random.default_rng(0)
    while True:
        valid = np.flatnonzero(obs["action_mask"])
        obs, reward, terminated, _, _ = env.step(int(rng.choice(valid)))
        total += reward
        if terminated:
            break
        phi = completion_potential(
            inst.cluster, inst.workload, env.placement, env.reference_placement, env.state.static.reference_time_s
        )
        assert total == pytest.approx(phi, abs=1e-9)


@pytest.mark.parametrize("reward", ["terminal", "dense"])
def test_dead_end_return_is_the_penalty(reward):
    env = PlacementEnv(generator="toy", reward=reward, max_machines=4, max_layers=10, max_edges=10)
    env.reset(options={"instance": dead_end_instance()})
    _, r, terminated, _, info = env.step(1)
    assert terminated and info["dead_end"]
    assert r == pytest.approx(DEAD_END_REWARD, abs=1e-12)  # one step: the whole return


@pytest.mark.parametrize("reward", ["terminal", "dense"])
def test_penalty_mode_adds_the_invalid_action_reward(reward):
    plain = PlacementEnv(generator="toy", reward=reward)
    penalised = PlacementEnv(generator="toy", reward=reward, invalid_action="penalty")
    compared = penalties = 0
    for seed in range(10):
        # Invalid actions draw no random number, so both envs place the same machines.
        r_plain, info_plain = _play(plain, seed, np.random.default_rng(seed))
        r_pen, info_pen = _play(penalised, seed, np.random.default_rng(seed), invalid_every=3)
        invalid = sum(1 for r in r_pen if r == INVALID_ACTION_REWARD)
        penalties += invalid
        assert info_pen.get("placement") == info_plain.get("placement")
        assert sum(r_pen) == pytest.approx(sum(r_plain) + invalid * INVALID_ACTION_REWARD, abs=1e-9)
        compared += 1
    assert compared == 10 and penalties > 0
