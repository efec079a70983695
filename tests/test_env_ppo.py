"""A MaskablePPO smoke run on the toy generator (sb3-contrib, Dict observations)."""

from __future__ import annotations

import numpy as np

import hulk_env  # noqa: F401  (registers the env)
from hulk_env.env import ENV_ID


def test_maskable_ppo_runs_and_respects_masks():
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(ENV_ID, n_envs=2, seed=0, env_kwargs={"generator": "toy", "reward": "dense"})
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, gamma=1.0, seed=0)
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    obs = venv.reset()
    for _ in range(30):
        masks = get_action_masks(venv)
        actions, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert all(masks[i, a] for i, a in enumerate(actions))
        obs, rewards, dones, infos = venv.step(actions)
        assert np.all(np.isfinite(rewards))
    venv.close()
