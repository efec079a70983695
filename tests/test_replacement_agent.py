"""The re-placement agent: the shipped policy, lockstep rollouts, the stage-DP polish, training parts."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env.baselines import get_method
from hulk_env.generators import fixed_instance
from hulk_env.replacement import ReplacementProblem, standard_scenarios
from hulk_env.replacement.agent import (
    LinearPolicy,
    agent_method,
    dp_splits,
    pipeline_chain,
    rollouts,
)
from hulk_env.replacement.episode import FEATURES, action_mask, episode_spec, new_episodes
from hulk_env.replacement.methods import run_method
from hulk_env.replacement.train_agent import fit_imitation
from hulk_env.testing import placement_problems


@pytest.fixture(scope="module")
def problems():
    inst = fixed_instance("cloud-3region", "gpt3-1.3b", data_parallel=2)
    old = get_method("latency-chain-dp")(inst, 0, None).placement
    return [ReplacementProblem(inst, old, list(sc.failed), label=sc.label) for sc in standard_scenarios(inst.cluster, old)]


def test_the_shipped_policy_matches_the_features() -> None:
    policy = LinearPolicy.shipped()
    assert policy.weights.shape == (len(FEATURES),) and np.all(np.isfinite(policy.weights))
    with pytest.raises(ValueError, match="expected"):
        LinearPolicy(np.zeros(3))


def test_agent_answers_are_valid_seeded_and_counted(problems) -> None:
    for problem in problems:
        a = run_method(problem, "agent", 0)
        assert a.feasible and placement_problems(problem.instance, a.placement) == []
        assert not problem.failed[a.placement].any()
        assert a.cost_evals > 1
        b = run_method(problem, "agent", 0)
        np.testing.assert_array_equal(a.placement, b.placement)


def test_the_agent_is_never_worse_than_its_own_rollouts(problems) -> None:
    problem = problems[1]  # the region outage
    policy = LinearPolicy.shipped()
    greedy, dead = rollouts(episode_spec(problem, "all"), policy.weights, 1)
    assert not dead[0]
    answer = run_method(problem, "agent", 0, method=agent_method(policy, samples=8))
    assert answer.outcome.total_s <= problem.totals(greedy).total_s[0] + 1e-9


def test_lockstep_rollouts_sample_different_placements_and_respect_the_mask(problems) -> None:
    spec = episode_spec(problems[1], "all")
    weights = LinearPolicy.shipped().weights
    rng = np.random.default_rng(0)
    placements, dead = rollouts(spec, weights, 16, 1.0, rng, np.zeros(16, dtype=bool))
    assert len(np.unique(placements[~dead], axis=0)) > 1
    for p in placements[~dead]:
        assert placement_problems(problems[1].instance, p) == []
    ep = new_episodes(spec, 2)
    assert action_mask(spec, ep).shape == (2, problems[1].instance.num_machines)


def test_dp_splits_cut_the_chosen_machines_only(problems) -> None:
    problem = problems[0]
    policy = LinearPolicy.shipped()
    placements, _ = rollouts(episode_spec(problem, "all"), policy.weights, 1)
    chain = pipeline_chain(placements[0])
    split = dp_splits(problem, placements)
    assert len(split) > 0
    assert set(np.unique(split).tolist()) <= set(chain.tolist())


def test_imitation_recovers_a_known_linear_teacher() -> None:
    rng = np.random.default_rng(0)
    true = rng.normal(size=5)
    feats = rng.normal(size=(400, 7, 5))
    masks = rng.random((400, 7)) < 0.8
    masks[:, 0] = True
    targets = np.where(masks, feats @ true, -np.inf).argmax(axis=1)
    w = fit_imitation(feats, masks, targets, l2=0.0, steps=800)
    agree = (np.where(masks, feats @ w, -np.inf).argmax(axis=1) == targets).mean()
    assert agree > 0.95
    assert np.corrcoef(w, true)[0, 1] > 0.95


def test_teacher_forced_targets_are_always_allowed_by_the_mask(problems) -> None:
    from hulk_env.replacement.train_agent import imitation_data, scores

    features, masks, targets = imitation_data(problems[:2], teacher_budget=300)
    assert len(targets) == 2 * problems[0].old.size
    assert masks[np.arange(len(targets)), targets].all()
    assert features.shape[2] == len(FEATURES)
    table = scores(np.stack([LinearPolicy.shipped().weights, np.zeros(len(FEATURES))]), problems[:2], samples=2)
    assert table.shape == (2, 2) and np.all(np.isfinite(table))
