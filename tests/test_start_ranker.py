"""The start ranker (agents.decision.start_ranker): its labels, its loss, that it learns a ranking, that
it ships with the policy and steers the greedy decision's starts."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from agents.decision.inference import instance_env, single_thread
from agents.decision.plan import plan_from
from agents.decision.start_ranker import (
    instance_labels,
    labels_from_json,
    labels_to_json,
    ranker_sample,
    ranking_loss,
    regret,
    start_scores,
    start_times,
    suite_labels,
    target_distribution,
    top_starts,
    train_ranker,
)
from agents.network.saved_policy import RANKER_DIR, build_policy_network, load_policy, save_policy
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import Padding
from hulk_env.generators import RandomGeoGenerator
from hulk_env.instance import Instance

POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2}
PADDING = Padding(16, 64, 64)


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


def _instance(seed: int, d: int = 1, machines: int = 10) -> Instance:
    gen = RandomGeoGenerator(num_machines=(machines, machines), num_regions=(2, 4), num_blocks=(4, 6), data_parallel=(d,))
    return gen(np.random.default_rng(seed))


def _net(seed: int = 1):
    torch.manual_seed(seed)
    net = build_policy_network(POLICY, PADDING, lookahead=False, plan=True)
    net.set_training_mode(False)
    return net


def test_labels_are_each_starts_plan_time_and_inf_where_forbidden():
    inst = _instance(3, d=2)
    env = instance_env(inst, lookahead=False, plan=True)
    times = start_times(inst, env)
    env.reset(options={"instance": inst})
    allowed = env.action_masks()[: inst.num_machines]
    for s in range(inst.num_machines):
        plan = plan_from(inst, s) or plan_from(inst, s, reverse=True)
        expected = plan.iteration_time_s if allowed[s] and plan is not None else math.inf
        assert times[s] == pytest.approx(expected, rel=1e-12), s
    assert np.isfinite(times).any()
    again = labels_from_json(labels_to_json(instance_labels([inst])))[0]
    np.testing.assert_array_equal(again.times_s, times)  # JSON round trip, inf included


def test_suite_labels_in_worker_processes_are_those_of_this_process():
    from hulk_env.evaluation import load_suite

    here = instance_labels(load_suite("tiny-v0")[:4])
    there = suite_labels("tiny-v0", workers=2)[:4]
    assert [lab.instance_id for lab in there] == [lab.instance_id for lab in here]
    for a, b in zip(here, there, strict=True):
        np.testing.assert_array_equal(a.times_s, b.times_s)


def test_target_puts_most_weight_on_the_fastest_start_and_none_on_starts_without_a_plan():
    t = np.array([2.0, 1.0, np.inf, 1.05, 4.0])
    p = target_distribution(t, tau=0.05)
    assert p.sum() == pytest.approx(1.0) and p[2] == 0.0
    assert p.argmax() == 1 and p[1] > p[3] > p[0] > p[4]
    assert p[3] / p[1] == pytest.approx(math.exp(-math.log(1.05) / 0.05))
    assert not target_distribution(np.full(3, np.inf)).any()
    # the loss is lowest when the scores put the fastest first
    good = ranking_loss(torch.tensor([0.0, 5.0, -torch.inf, 3.0, -2.0]), torch.from_numpy(p).float())
    bad = ranking_loss(torch.tensor([5.0, 0.0, -torch.inf, 0.0, 3.0]), torch.from_numpy(p).float())
    assert torch.isfinite(good) and good < bad


def test_regret_is_zero_when_the_best_start_is_among_the_chosen_and_counts_regions_first():
    times = np.array([1.0, 1.2, 1.5, 1.1])
    regions = ["a", "a", "b", "b"]
    scores = np.array([0.0, 3.0, 2.0, 1.0])  # ranked 1, 2, 3, 0
    assert top_starts(scores, regions, 2) == [1, 2]  # best of region a, best of region b
    assert regret(scores, times, regions, 2) == pytest.approx(math.log(1.2))
    assert regret(scores, times, regions, 4) == 0.0
    assert top_starts(np.array([0.0, -np.inf, 1.0, 2.0]), regions, 4) == [3, 0, 2]  # forbidden never taken
    assert regret(scores, np.full(4, np.inf), regions, 1) == 0.0


def test_training_teaches_the_network_to_rank_the_starts():
    """An untrained network ranks the starts of these instances by chance; a few epochs of the
    ListNet loss on their labels put a fastest start first on most of them (here the training
    instances are the validation ones too), and the kept epoch is never worse on validation
    than the policy's own logits (epoch 0)."""
    insts = [_instance(seed, d=1 + seed % 2) for seed in range(10, 16)]
    samples = [ranker_sample(inst, lab) for inst, lab in zip(insts, instance_labels(insts), strict=True)]
    net = _net()
    before = np.mean([regret(start_scores(net, s.obs, s.mask).detach().numpy(), s.times_s, s.regions, 1) for s in samples])
    trained = train_ranker(net, samples, samples, epochs=25, lr=3e-3, seed=0)
    assert before > 0.01  # the test's point: chance ranking misses the best start
    assert trained.history[0]["val_regret_top1"] == pytest.approx(before)
    assert min(row["val_regret_top1"] for row in trained.history[1:]) < 0.5 * before
    kept = trained.history[trained.best_epoch]
    assert kept["val_regret_decision"] <= trained.history[0]["val_regret_decision"]
    assert np.mean([regret(start_scores(trained.network, s.obs, s.mask).detach().numpy(), s.times_s, s.regions, 4, 2)
                    for s in samples]) == pytest.approx(kept["val_regret_decision"])  # the kept epoch is the network returned
    assert trained.history[-1]["train_loss"] < trained.history[1]["train_loss"]
    # the policy it was copied from is untouched
    for a, b in zip(net.state_dict().values(), _net().state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_ranker_saved_beside_the_policy_loads_with_it_and_picks_the_decisions_starts(tmp_path):
    from agents.decision.inference import first_slot_candidates, policy_placement

    inst = _instance(5, d=2)
    net, ranker = _net(1), _net(2)
    policy_dir = tmp_path / "policy"
    save_policy(net, policy_dir, policy_config=POLICY, padding=PADDING, lookahead=False, plan=True)
    assert load_policy(policy_dir).ranker is None
    save_policy(ranker, policy_dir / RANKER_DIR, policy_config=POLICY, padding=PADDING, lookahead=False, plan=True)
    loaded = load_policy(policy_dir)
    assert loaded.ranker is not None
    env = instance_env(inst, lookahead=False, plan=True)
    with torch.inference_mode():
        own = first_slot_candidates(loaded.policy, env, inst, 2)
        ranked = first_slot_candidates(loaded.policy, env, inst, 2, loaded.ranker)
        assert ranked == first_slot_candidates(ranker, env, inst, 2)  # the ranker's scores decide
    assert own != ranked  # two seeds, two rankings: the test would not see the ranker otherwise
    result = policy_placement(loaded, inst)
    assert result.feasible
    # A damaged ranker is one clear error naming its file, like a damaged policy.
    weights = policy_dir / RANKER_DIR / "weights.pt"
    weights.write_bytes(weights.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(HulkInputError, match="checksum"):
        load_policy(policy_dir)
    shutil.rmtree(policy_dir / RANKER_DIR)
    assert load_policy(policy_dir).ranker is None


def test_the_second_round_of_starts_stays_in_the_region_of_the_fastest_plan():
    from agents.decision.inference import choose_starts, refine_in_region

    regions = ["a", "a", "b", "b", "a", "c", "b"]
    ranked = [0, 2, 5, 1, 3, 4, 6]  # the network's order
    times = {0: 2.0, 2: 1.5, 5: math.inf}
    assert refine_in_region(ranked, regions, times, 2) == [3, 6]  # b's plan was fastest: b's next best
    assert refine_in_region(ranked, regions, {0: 1.0, 2: 1.0}, 1) == [1]  # ties: the earlier start's region
    assert refine_in_region(ranked, regions, {0: math.inf}, 2) == []  # no plan anywhere: nothing to refine
    asked = []
    chosen = choose_starts(ranked, regions, 2, 2, lambda first: asked.extend(first) or [{0: 2.0, 2: 1.5}[s] for s in first])
    assert asked == [0, 2] and chosen == [0, 2, 3, 6]
    # the regret of a setting is that of its chosen starts
    scores = -np.argsort(ranked).astype(float)  # scores that rank the machines as ``ranked``
    t = np.array([2.0, 1.9, 1.5, 1.2, 3.0, 4.0, 1.3])
    assert regret(scores, t, regions, 2) == pytest.approx(math.log(1.5 / 1.2))
    assert regret(scores, t, regions, 2, refine=1) == 0.0
