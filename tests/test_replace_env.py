"""``hulk/Replace-v0``: Gymnasium conventions, the memory mask, the reward, and its agreement with
the batched episodes the agent drives."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import hulk_env  # noqa: F401  (registers the envs)
from hulk_env.env.replace_env import ReplaceEnv
from hulk_env.errors import HulkInputError
from hulk_env.generators import fixed_instance
from hulk_env.replacement import ReplacementProblem, outcome
from hulk_env.replacement.agent import LinearPolicy, rollouts
from hulk_env.replacement.episode import FEATURES, episode_spec
from hulk_env.testing import placement_problems

REPO = Path(__file__).resolve().parents[1]
ID = "hulk/Replace-v0"
SMALL = {"cluster": "cloud-3region", "model": "gpt3-1.3b", "data_parallel": 2}


def play(env, seed: int, policy=None):
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done, reward = False, 0.0
    while not done:
        valid = np.flatnonzero(obs["action_mask"])
        if policy is None:
            action = int(rng.choice(valid))
        else:
            scores = obs["candidate_features"] @ policy
            action = int(valid[np.argmax(scores[valid])])
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return reward, info


def test_check_env_and_registration() -> None:
    env = gym.make(ID, **SMALL)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.spec.id == ID


@pytest.mark.parametrize("scope", ["all", "displaced"])
def test_episodes_end_feasible_on_survivors_with_the_horizon_reward(scope: str) -> None:
    env = ReplaceEnv(**SMALL, scope=scope)
    for seed in range(6):
        reward, info = play(env, seed)
        assert not info["dead_end"]
        problem = env.problem
        placement = np.array(info["placement"])
        assert placement_problems(problem.instance, placement) == []
        assert not problem.failed[placement].any()
        if scope == "displaced":
            kept = ~problem.displaced
            np.testing.assert_array_equal(placement[kept], problem.old[kept])
        o = outcome(problem, placement)
        assert info["total_s"] == pytest.approx(o.total_s)
        expected = max(math.log(info["reference_total_s"] / o.total_s), -5.0)
        assert reward == pytest.approx(expected)


def test_same_seed_same_episode_and_failures_vary() -> None:
    env = ReplaceEnv(**SMALL)
    a, b = play(env, 3)[1], play(env, 3)[1]
    assert a["placement"] == b["placement"]
    labels = {env.reset(seed=s)[1]["label"] for s in range(12)}
    assert len(labels) > 1


def test_the_env_and_the_batched_episodes_agree() -> None:
    """The Gymnasium env (K = 1) and the agent's lockstep episodes are one set of dynamics."""
    env = ReplaceEnv(**SMALL, fail="region:Frankfurt")
    weights = LinearPolicy.shipped().weights
    _, info = play(env, 0, weights)
    placements, dead = rollouts(episode_spec(env.problem, "all"), weights, 1)
    assert not dead[0]
    np.testing.assert_array_equal(np.array(info["placement"]), placements[0])


def test_invalid_actions_fall_back_to_a_valid_machine() -> None:
    env = ReplaceEnv(**SMALL, fail="region:Frankfurt")
    obs, _ = env.reset(seed=0)
    failed = int(np.flatnonzero(env.problem.failed)[0])
    assert obs["action_mask"][failed] == 0
    obs, _, _, _, info = env.step(failed)
    assert info["invalid_action"]
    assert env.placement.ravel()[0] != failed and env.placement.ravel()[0] >= 0
    for bad in (-3, 10**6, "x"):
        _, _, _, _, info = env.step(bad)
        assert info["invalid_action"]


def test_given_problems_placements_and_bad_arguments(tmp_path) -> None:
    inst = fixed_instance("cloud-3region", "gpt3-1.3b", data_parallel=2)
    old = np.full((2, inst.num_layers), 8)  # everything on frankfurt-0 (640 GB)
    env = ReplaceEnv(**SMALL, scope="displaced")
    obs, info = env.reset(options={"problem": ReplacementProblem(inst, old, [8], label="frankfurt-0")})
    assert info["failed"] == ["frankfurt-0"] and obs["cursor"][0] == 0
    names = [[inst.cluster.machines[8].name] * inst.num_layers] * 2
    by_name = ReplaceEnv(**SMALL, placement=names, fail="frankfurt-0")
    assert by_name.reset(seed=0)[1]["failed"] == ["frankfurt-0"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"placement": old.tolist()}))
    from_file = ReplaceEnv(cluster="cloud-3region", model="gpt3-1.3b", placement=str(path), fail="frankfurt-0")
    np.testing.assert_array_equal(from_file.reset(seed=0)[0]["old_machine"][: old.size], -1)
    with pytest.raises(HulkInputError, match="unknown scope"):
        ReplaceEnv(**SMALL, scope="some")
    with pytest.raises(HulkInputError, match="unknown machine"):
        ReplaceEnv(**SMALL, fail="nowhere-0")
    with pytest.raises(HulkInputError, match="hits no slot"):
        ReplaceEnv(**SMALL, placement=names, fail="region:Dublin", scope="displaced").reset(seed=0)
    with pytest.raises(HulkInputError, match="unknown reset option"):
        env.reset(options={"instance": inst})


def test_features_are_named_and_bounded() -> None:
    env = ReplaceEnv(**SMALL)
    obs, _ = env.reset(seed=1)
    assert obs["candidate_features"].shape == (env.max_machines, len(FEATURES))
    assert env.observation_space.contains(obs)


def test_making_and_resetting_the_replace_env_loads_no_search_and_no_torch() -> None:
    code = (
        "import sys, gymnasium as gym, hulk_env\n"
        f"env = gym.make({ID!r}, cluster='cloud-3region', model='gpt3-1.3b')\n"
        "env.reset(seed=0)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'stable_baselines3') "
        "or m.startswith(('hulk_env.baselines', 'hulk_env.evaluation')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == ""


def test_ansi_render_shows_progress_then_the_placement() -> None:
    env = ReplaceEnv(**SMALL, fail="region:Frankfurt", render_mode="ansi")
    env.reset(seed=0)
    assert "slots placed" in env.render()
    play(env, 0)
    text = env.render()
    frankfurt = [line for line in text.splitlines() if "frankfurt-" in line]
    assert len(frankfurt) == 4 and not any("r0:" in line or "r1:" in line for line in frankfurt)
    assert "r0:" in text and "iteration" in text
