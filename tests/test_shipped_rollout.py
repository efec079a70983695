"""The shipped network's own greedy rollout is a placer: on the validation instances of at most
32 machines it follows the plan it is shown to the end, so its placement is as fast as that
plan (what ``experiments.signal_search`` fitted its signal weights for; before, it left the plan
at stage boundaries and was 36% behind on validation)."""

from __future__ import annotations

import pytest

from agents.decision.inference import instance_env, planned_greedy, policy_placement, single_thread
from agents.decision.methods import pretrained_policy
from experiments.expert_iteration import validation_instances

SMALL = [i for i in validation_instances(False) if i.num_machines <= 32]


@pytest.mark.parametrize("instance", SMALL, ids=[i.instance_id for i in SMALL])
def test_the_shipped_rollout_follows_its_plan(instance):
    loaded = pretrained_policy()
    with single_thread():
        env = instance_env(instance, lookahead=False, plan=True)
        plans = [r for r in planned_greedy(loaded.policy, env, instance, 8, region_aligned=False) if r.source == "plan"]
        rolled = policy_placement(loaded, instance, rollout_only=True)
    assert plans and rolled.placement is not None
    best = min(p.iteration_time_s for p in plans)
    from hulk_env import cost

    assert cost.iteration_time(instance.cluster, instance.workload, rolled.placement) == pytest.approx(best, rel=1e-9)
