"""The env under vector wrappers: Gymnasium make_vec (sync, async) and SB3 make_vec_env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import hulk_env  # noqa: F401  (registers the env)
from hulk_env.env import ENV_ID


def _masked_actions(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasium_make_vec(mode):
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode=mode, generator="toy")
    try:
        obs, infos = envs.reset(seed=0)
        assert obs["action_mask"].shape == (2, 4)
        assert envs.single_observation_space.contains({k: v[0] for k, v in obs.items()})
        rng = np.random.default_rng(0)
        episodes = 0
        for _ in range(60):
            obs, rewards, terminated, truncated, infos = envs.step(_masked_actions(obs["action_mask"], rng))
            episodes += int(np.sum(terminated | truncated))
            assert np.all(np.isfinite(rewards))
        assert episodes >= 4
    finally:
        envs.close()


@pytest.mark.parametrize("vec_cls", ["dummy", "subproc"])
def test_sb3_make_vec_env(vec_cls):
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    cls = DummyVecEnv if vec_cls == "dummy" else SubprocVecEnv
    # "module:id" makes gym.make import hulk_env inside fresh subprocesses too.
    venv = make_vec_env(f"hulk_env:{ENV_ID}", n_envs=2, seed=0, vec_env_cls=cls, env_kwargs={"generator": "toy"})
    try:
        assert venv.render_mode == "rgb_array"  # make_vec_env asks for it; the env accepts it
        obs = venv.reset()
        rng = np.random.default_rng(0)
        done_count = 0
        for _ in range(40):
            masks = get_action_masks(venv)
            np.testing.assert_array_equal(masks, obs["action_mask"] > 0)
            obs, rewards, dones, infos = venv.step(_masked_actions(masks, rng))
            for done, info in zip(dones, infos, strict=True):
                if done:
                    done_count += 1
                    assert "terminal_observation" in info and "episode" in info
        assert done_count >= 4
        frames = venv.get_images()
        assert len(frames) == 2 and frames[0].ndim == 3
    finally:
        venv.close()
