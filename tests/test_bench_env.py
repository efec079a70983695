"""bench_env returns the figures `hulk bench env --json` prints (speed itself is not asserted)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import hulk_env  # noqa: F401  (registers the env)
from hulk_env.bench import bench_env


def test_bench_env_reports_both_rates_and_their_ratio():
    out = bench_env(seconds=0.05)
    assert out["env_steps_per_s"] > 0 and out["cartpole_steps_per_s"] > 0
    # The benchmark's instance is the one `gym.make` builds from the same names: one episode
    # of it takes exactly the steps the benchmark says it counts per episode.
    env = gym.make("hulk/Placement-v0", cluster="default", model="gpt3-1.3b")
    obs, _ = env.reset(seed=0)
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, _ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
        steps, done = steps + 1, terminated or truncated
    assert steps == out["steps_per_episode"]
    assert out["machines"] == 47 and out["instance"] == "paper-12city-47xgpt3-1.3b"
    assert out["steps_per_episode"] == out["layers"] * out["data_parallel"]
