"""Honest cost_evals: the cost model counts every placement it evaluates, whoever asks."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.cluster import get_cluster
from hulk_env.env import PlacementEnvV1
from hulk_env.evaluation import load_suite, run_methods
from hulk_env.generators import InstanceListGenerator
from hulk_env.workload import catalog


def test_every_entry_point_counts_its_placements_and_blocks_nest():
    c, w = get_cluster("default"), catalog.get_model("gpt3-1.3b")
    one = np.zeros((1, w.num_layers), dtype=int)
    with cost.count_evals() as outer:
        cost.evaluate(c, w, one)
        cost.iteration_times(c, w, np.zeros((5, 1, w.num_layers), dtype=int))
        with cost.count_evals() as inner:
            cost.iteration_time(c, w, one)
            cost.evaluate_batch(c, w, np.zeros((3, 1, w.num_layers), dtype=int))
        cost.memory_use_bytes(c, w, one[None])  # memory alone is no cost evaluation
    assert (outer.evals, inner.evals) == (1 + 5 + 1 + 3, 1 + 3)
    with cost.count_evals() as after:
        pass
    assert after.evals == 0


def test_an_env_episode_costs_one_evaluation_per_instance_and_one_per_end():
    inst = load_suite("geo-v0")[1]
    env = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
    with cost.count_evals() as n:
        obs, _ = env.reset(options={"instance": inst})  # the reference (naive) time, once per instance
        done = False
        while not done:
            obs, _, done, _, _ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    assert n.evals == 2
    with cost.count_evals() as again:  # the instance's static parts are cached
        env.reset(options={"instance": inst})
    assert again.evals == 0


def test_a_lookahead_wrapper_is_counted():
    shaping = pytest.importorskip("agents.training.shaping")
    inst = load_suite("geo-v0")[1]
    env = shaping.StayLookahead(PlacementEnvV1(generator=InstanceListGenerator((inst,))), shape=True, lookahead=True)
    obs, _ = env.reset(options={"instance": inst})
    with cost.count_evals() as n:
        obs, *_ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    # the potential's completion (1) and one candidate completion per allowed machine of the next slot
    assert n.evals == 1 + int(np.count_nonzero(obs["action_mask"]))


def test_the_runner_reports_calls_a_method_does_not_count_itself():
    inst = load_suite("tiny-v0")[0]
    naive = get_method("naive")

    def quiet(instance, seed, budget):  # evaluates 7 placements, reports none
        cost.iteration_times(instance.cluster, instance.workload, np.zeros((7, instance.data_parallel, instance.num_layers), dtype=int))
        return naive(instance, seed, budget)

    rows = run_methods([inst], ["naive"], progress=False, extra_methods={"quiet": quiet})
    assert {r.method: r.cost_evals for r in rows}["quiet"] == 7
