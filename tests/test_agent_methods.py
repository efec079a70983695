"""The shipped policy's methods: ``gnn-ppo`` and ``gnn-ppo+search`` work right after install."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.decision.methods import (
    AGENT_METHODS,
    POLISH_BUDGET,
    PRETRAINED_DIR,
    agent_methods,
    pretrained_policy,
)
from hulk_env import cost
from hulk_env.evaluation import load_suite, suite_instance


@pytest.fixture(scope="module")
def methods():
    return agent_methods()


def test_the_pretrained_policy_ships_weights_only_with_its_config():
    for name in ("policy.json", "weights.pt", "config.yaml", "TRAINING.md"):
        assert (PRETRAINED_DIR / name).is_file(), name
    meta = json.loads((PRETRAINED_DIR / "policy.json").read_text())
    assert meta["env_id"] == "hulk/Placement-v1" and meta["observation"] == {"lookahead": False, "plan": True}
    assert (PRETRAINED_DIR / "weights.pt").stat().st_size < 5 * 2**20  # a few MB at most
    assert "python -m experiments.generalist" in (PRETRAINED_DIR / "TRAINING.md").read_text()
    assert pretrained_policy().policy is pretrained_policy().policy  # loaded once


def test_both_methods_are_registered(methods):
    assert {"gnn-ppo", "gnn-ppo+search"} <= set(AGENT_METHODS) <= set(methods)


@pytest.mark.parametrize("index", [0, 3])
def test_search_polish_is_never_worse_than_the_policy_and_stays_in_budget(methods, index):
    inst = suite_instance("unseen-v0", index)
    greedy = methods["gnn-ppo"](inst, 0, None)
    polished = methods["gnn-ppo+search"](inst, 0, 2_000)
    assert greedy.feasible and polished.feasible
    t_greedy, t_polished = (cost.iteration_time(inst.cluster, inst.workload, r.placement) for r in (greedy, polished))
    assert t_polished <= t_greedy * (1 + 1e-12)
    # every cost-model call counted (the rollouts' and the search's), within the budget
    assert greedy.cost_evals >= 1 and polished.cost_evals <= 2_000 + 8
    assert POLISH_BUDGET == 5_000


def test_sampling_more_never_hurts(methods):
    inst = suite_instance("unseen-v0", 4)
    one, more = (methods["gnn-ppo"](inst, 0, b) for b in (None, 4))
    t = [cost.iteration_time(inst.cluster, inst.workload, r.placement) for r in (one, more)]
    assert t[1] <= t[0] * (1 + 1e-12) and more.cost_evals > one.cost_evals
    assert np.array_equal(one.placement, methods["gnn-ppo"](inst, 0, None).placement)  # same seed, same placement


def test_chains_from_the_policys_machines_find_the_chain_of_a_placement_that_uses_them():
    from agents.decision.methods import chain_starts
    from hulk_env.baselines import get_method

    # latency-chain-dp's placement uses the machines of its best chain, the start among them: the
    # chains from its machines find it (or better), within the budget, every evaluation counted
    for inst in load_suite("geo-v0")[:4]:
        best = get_method("latency-chain-dp")(inst, 0, None)
        with cost.count_evals() as counter:
            found = chain_starts(inst, [best.placement], budget=400)
        assert 1 <= len(found) <= 2 and counter.evals <= 400
        times = [cost.iteration_time(inst.cluster, inst.workload, p) for p in found]
        assert min(times) <= cost.iteration_time(inst.cluster, inst.workload, best.placement) * (1 + 1e-9)
    # no start machine, no chain
    assert chain_starts(inst, [], budget=400) == []


def test_a_model_the_cluster_cannot_hold_is_one_clear_reason_not_the_envs_refusal(methods, tmp_path):
    from hulk_env.feasibility import capacity_reason
    from hulk_env.generators import fixed_instance

    path = tmp_path / "small.yaml"
    path.write_text("machines:\n  - {region: london, gpu: T4, count: 2}\n")
    inst = fixed_instance(path, "gpt3-13b")
    for name in ("gnn-ppo", "gnn-ppo+search"):
        result = methods[name](inst, 0, None)
        assert not result.feasible and result.cost_evals == 0
        assert result.reason == capacity_reason(inst) and "naive placement" not in result.reason
