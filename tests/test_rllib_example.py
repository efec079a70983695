"""The env under RLlib: experiments/rllib_ppo.py, a small PPO run with action masking.

RLlib pins gymnasium 1.2.2, so this runs in its own virtualenv: ``make test-rllib`` (part of
``make test``) runs it in ``.venv-rllib`` with ``HULK_REQUIRE_RLLIB=1``, where it must not skip.
"""

from __future__ import annotations

import math
import os

import gymnasium as gym
import numpy as np
import pytest

try:
    import ray.rllib.algorithms.ppo  # noqa: F401
except ImportError:
    if os.environ.get("HULK_REQUIRE_RLLIB"):
        raise
    pytest.skip("RLlib runs in its own environment: make test-rllib", allow_module_level=True)

from gymnasium.utils.env_checker import check_env

from experiments.rllib_ppo import EVAL_SUITE, MaskedObservation, make_env, run, toy_padding
from hulk_env import cost
from hulk_env.env import ENV_ID, ENV_ID_V1
from hulk_env.evaluation import geometric_mean, load_suite
from hulk_env.generators import exhaustive_optimum
from hulk_env.reference import naive_placement


@pytest.mark.parametrize("env_id", [ENV_ID, ENV_ID_V1])
def test_the_env_passes_this_gymnasiums_checker(env_id):
    check_env(gym.make(env_id, generator="toy").unwrapped, skip_render_check=True)


def test_masked_observation_keeps_every_value_and_the_mask():
    pad = toy_padding()
    kwargs = {"max_machines": pad.max_machines, "max_layers": pad.max_layers, "max_edges": pad.max_edges}
    env = make_env({"env_id": ENV_ID_V1, **kwargs})
    assert isinstance(env, MaskedObservation)
    obs, _ = env.reset(seed=3)
    raw, _ = gym.make(ENV_ID_V1, generator="toy", reward="dense", **kwargs).reset(seed=3)  # same seed, same obs
    assert env.observation_space.contains(obs)
    assert np.array_equal(obs["action_mask"], raw["action_mask"])
    rest = [raw[k].ravel() for k in sorted(raw) if k != "action_mask"]  # Dict spaces sort their keys
    assert np.array_equal(obs["observations"], np.concatenate(rest))


def test_a_few_ppo_iterations_report_speedups_and_a_greedy_evaluation(capsys):
    figures = run(ENV_ID_V1, iterations=2, seed=0, batch_steps=400)
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert [line.split(":")[0] for line in lines] == ["iteration 1", "iteration 2", "greedy policy on tiny-v0"]
    assert [r["iteration"] for r in figures["iterations"]] == [1, 2]
    for row in figures["iterations"]:
        assert row["episodes"] > 0 and math.isfinite(row["mean_speedup"]) and row["mean_speedup"] > 0
        assert row["dead_end_share"] == 0.0  # v1's mask never leads to a dead end
    assert figures["iterations"][-1]["steps"] >= 800
    suite = {i.instance_id: i for i in load_suite(EVAL_SUITE)}
    assert [e["instance"] for e in figures["eval"]] == list(suite)
    assert figures["eval_feasible"] == len(suite)
    for e in figures["eval"]:  # the printed figures are the cost model's, over naive and the optimum
        inst = suite[e["instance"]]
        t = cost.evaluate(inst.cluster, inst.workload, np.array(e["placement"]))
        assert t.memory_feasible
        naive_s = cost.evaluate(inst.cluster, inst.workload, naive_placement(inst)).iteration_time_s
        assert e["speedup"] == pytest.approx(naive_s / t.iteration_time_s)
        assert e["of_optimum"] == pytest.approx(exhaustive_optimum(inst)[1] / t.iteration_time_s)
        assert 0 < e["of_optimum"] <= 1 + 1e-9  # nothing beats the exhaustive optimum
    assert figures["eval_geomean_speedup"] == pytest.approx(geometric_mean([e["speedup"] for e in figures["eval"]]))
