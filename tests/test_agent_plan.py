"""The stage DP's plan as an observation (agents.decision.plan): what it shows, and that it can be followed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from agents.decision.inference import instance_env, rollout, sampled_rollouts, single_thread
from agents.decision.plan import PLAN_KEY, better_of_plan, plan_from
from agents.network.saved_policy import build_policy_network
from agents.training.imitation import Demonstration, expert_action
from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.baselines.chains import chain_candidates
from hulk_env.baselines.common import nearest_neighbour_chain
from hulk_env.feasibility import Padding
from hulk_env.generators import RandomGeoGenerator
from hulk_env.instance import Instance
from hulk_env.reference import naive_placement

POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2}


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


def _instance(d: int, seed: int = 3, machines: int = 10) -> Instance:
    gen = RandomGeoGenerator(num_machines=(machines, machines), num_regions=(2, 4), num_blocks=(4, 6), data_parallel=(d,))
    return gen(np.random.default_rng(seed))


def _time(inst: Instance, placement: np.ndarray) -> float:
    return float(cost.iteration_time(inst.cluster, inst.workload, placement))


def _plan_net_and_env(inst: Instance, seed: int = 1):
    """A small untrained plan policy (seeded), in evaluation mode, and its env on ``inst``."""
    torch.manual_seed(seed)
    net = build_policy_network(POLICY, Padding(16, 64, 64), lookahead=False, plan=True)
    net.set_training_mode(False)
    return net, instance_env(inst, lookahead=False, plan=True)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_plan_keeps_the_start_fits_and_is_the_chains_best(d):
    inst = _instance(d)
    for start in range(inst.num_machines):
        planned = plan_from(inst, start)
        chain = nearest_neighbour_chain(inst, start)
        kept = [p for _, p in chain_candidates(inst, chain) if p[0, 0] == start]
        times = cost.iteration_times(inst.cluster, inst.workload, np.stack(kept)).penalised() if kept else np.array([np.inf])
        if planned is None:
            assert not np.isfinite(times.min())
            continue
        plan = planned.placement
        assert planned.iteration_time_s == pytest.approx(_time(inst, plan), rel=1e-12)  # the cost model's time
        assert plan.shape == (d, inst.num_layers) and plan[0, 0] == start
        assert cost.evaluate(inst.cluster, inst.workload, plan).memory_feasible
        assert _time(inst, plan) == pytest.approx(float(times.min()), rel=1e-12)


def test_plan_from_chain_dps_start_is_as_fast_when_its_chain_made_it():
    """latency-chain-dp's placement comes from some start's chain; where that chain starts on the
    machine holding layer 0 (a forward split), the plan from that machine is at least as fast."""
    checked = 0
    for seed in range(6):
        inst = _instance(2, seed)
        best = get_method("latency-chain-dp")(inst).placement
        start = int(best[0, 0])
        if any(np.array_equal(p, best) for _, p in chain_candidates(inst, nearest_neighbour_chain(inst, start))):
            checked += 1
            assert plan_from(inst, start).iteration_time_s <= _time(inst, best) * (1 + 1e-12)
    assert checked >= 2


@pytest.mark.parametrize("d", [1, 2])
def test_following_the_shown_plan_places_the_plan(d):
    inst = _instance(d)
    env = instance_env(inst, lookahead=False, plan=True)
    obs, _ = env.reset(options={"instance": inst})
    assert not obs[PLAN_KEY].any()  # nothing to show before the start machine is chosen
    start = int(np.flatnonzero(env.action_masks())[-1])
    plan = plan_from(inst, start).placement
    obs, _, terminated, _, info = env.step(start)
    for t in range(1, plan.size):
        shown = np.flatnonzero(obs[PLAN_KEY])
        assert shown.tolist() == [int(plan.reshape(-1)[t])]
        assert env.action_masks()[shown[0]]  # the plan fits in memory, so the mask allows it
        obs, _, terminated, _, info = env.step(int(shown[0]))
    assert terminated and not obs[PLAN_KEY].any()
    assert np.array_equal(np.asarray(info["placement"]), plan)
    assert info["iteration_time_s"] == pytest.approx(_time(inst, plan))


def test_plan_observation_passes_the_env_checker():
    check_env(instance_env(_instance(2), lookahead=False, shape=True, plan=True), skip_render_check=True)


def test_better_of_plan_never_slower():
    inst = _instance(2)
    naive = naive_placement(inst)
    t_naive = _time(inst, naive)
    placement, t, planned = better_of_plan(inst, naive, t_naive)
    assert t <= t_naive and _time(inst, placement) == pytest.approx(t)
    assert planned == (not np.array_equal(placement, naive))
    again, t_again, planned_again = better_of_plan(inst, placement, t)
    assert not planned_again and np.array_equal(again, placement) and t_again == t


def test_the_network_reads_the_plan():
    """A policy built with the plan scores the machine the plan shows higher than when it is
    shown no plan (the prior starts positive: the largest gain of all machines), and it places
    with the plan observation end to end."""
    inst = _instance(2)
    torch.manual_seed(0)
    net = build_policy_network(POLICY, Padding(4, 4, 4), lookahead=False, plan=True)
    net.set_training_mode(False)
    env = instance_env(inst, lookahead=False, plan=True)
    obs, _ = env.reset(options={"instance": inst})
    obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    shown = int(np.flatnonzero(obs[PLAN_KEY])[0])
    other = dict(obs, **{PLAN_KEY: np.zeros_like(obs[PLAN_KEY])})

    def logits(o):
        with torch.no_grad():
            return net.action_logits({k: torch.as_tensor(v).unsqueeze(0) for k, v in o.items()})[0]

    gain = logits(obs) - logits(other)
    assert gain[shown] > 1.0 and torch.argmax(gain) == shown
    (greedy,) = sampled_rollouts(net, inst, lookahead=False, plan=True)
    assert np.isfinite(greedy.iteration_time_s)


def test_expert_labels_follow_a_faster_alternative():
    """With the plan as an alternative completion, the DAgger expert's labels along the plan
    finish no slower than the plan, even when the demonstration itself is the slow naive one."""
    inst = _instance(2)
    naive = naive_placement(inst)
    demo = Demonstration(inst, naive, "naive", _time(inst, naive), 0, 0.0)
    plan = plan_from(inst, int(np.argmax(inst.cluster.flops))).placement
    assert _time(inst, plan) < demo.iteration_time_s
    env = instance_env(inst, lookahead=False)
    env.reset(options={"instance": inst})
    placed = np.full(plan.size, -1, dtype=np.int64)
    placed[0] = plan[0, 0]
    _, _, done, _, info = env.step(int(placed[0]))
    for t in range(1, plan.size):
        placed[t] = expert_action(demo, placed, t, env.action_masks(), [plan])
        _, _, done, _, info = env.step(int(placed[t]))
    assert done and info["iteration_time_s"] <= _time(inst, plan) * (1 + 1e-9)


def test_a_saved_plan_policy_loads_and_places_with_its_plan(tmp_path):
    """policy.json records that the policy reads the plan; loading rebuilds the plan input, and
    the policy's placement counts the plan's cost-model evaluations."""
    from agents.decision.inference import policy_placement
    from agents.network.saved_policy import load_policy, plan_of, save_policy

    torch.manual_seed(2)
    padding = Padding(16, 64, 64)
    net = build_policy_network(POLICY, padding, lookahead=False, plan=True)
    save_policy(net, tmp_path, policy_config=POLICY, padding=padding, lookahead=False, plan=True)
    loaded = load_policy(tmp_path)
    assert plan_of(loaded.meta) and loaded.policy.features_extractor.use_plan
    inst = _instance(2)
    result = policy_placement(loaded, inst)
    assert result.feasible
    with cost.count_evals() as counter:
        plan_from(inst, int(result.placement[0, 0]))
    assert result.cost_evals > counter.evals >= 1  # the plan's evaluations, and the env's


@pytest.mark.parametrize("d, bound", [(1, 0), (2, 0), (2, 3)])
def test_planned_greedy_starts_where_the_best_of_its_candidates_plans_is(d, bound):
    """The greedy decision of a plan policy: the network ranks the first slot's machines, the
    plans from its best few (one per region first; with ``bound``, then the best few by the
    bottleneck bound not among them; then 2 more in the region of the fastest) are built, and
    the fastest plan and the naive placement are the candidates; with ``always_rollout`` the
    rollout that starts where the plan is fastest too."""
    from agents.decision.inference import (
        distinct_regions_first,
        first_slot_candidates,
        masked_logits,
        planned_greedy,
        refine_in_region,
        rollout,
    )
    from agents.decision.start_bound import bottleneck_bounds_s

    refine = 2

    inst = _instance(d, seed=5)
    # Untrained weights whose fastest first-round plan is in a region with untried machines, so
    # the refine round has something to add (with seed 1 it lands in a one-machine region once
    # the observation's globals grew to 13 columns: a different random network).
    net, env = _plan_net_and_env(inst, seed=0)
    with torch.inference_mode():
        candidates = first_slot_candidates(net, env, inst, 4)
        obs, _ = env.reset(options={"instance": inst})
        logits, _ = masked_logits(net, obs, env.action_masks())
        assert len(candidates) == 4 and all(env.action_masks()[s] for s in candidates)
        # The network's best machine of each region, in score order, then its next best.
        ranked = [int(i) for i in torch.argsort(logits, descending=True, stable=True)[: int(torch.isfinite(logits).sum())]]
        regions = [m.region for m in inst.cluster.machines]
        assert candidates == distinct_regions_first(ranked, regions, 4) and candidates[0] == ranked[0]
        bounds = bottleneck_bounds_s(inst)  # then the allowed machines of least bound, not yet candidates
        candidates += sorted((s for s in ranked if s not in candidates), key=lambda s: (bounds[s], s))[:bound]
        plans = {s: plan_from(inst, s) for s in candidates}
        times = {s: np.inf if p is None else p.iteration_time_s for s, p in plans.items()}
        more = refine_in_region(ranked, regions, times, refine)
        assert (more or bound) and all(regions[s] == regions[min(times, key=times.get)] for s in more)
        plans |= {s: plan_from(inst, s) for s in more}
        candidates = candidates + more
        fastest = min((p.iteration_time_s for p in plans.values() if p is not None), default=np.inf)
        decided = planned_greedy(net, env, inst, 4, refine=refine, bound_starts=bound)
        built = {start for start, reverse in env._cache[id(inst)][2] if not reverse}
        assert built == set(candidates)  # a plan from every candidate, no other
        # a forward plan fits: no rollout; with replicas, the best region-aligned layout too
        assert [r.source for r in decided] == ["plan", *(["region"] if d > 1 else []), "naive"]
        if d > 1:
            from hulk_env.baselines.region_aligned import region_aligned_candidates

            region = [_time(inst, q) for _, q in region_aligned_candidates(inst, candidates)]
            assert decided[1].iteration_time_s == pytest.approx(min(region))
            decided = [r for r in decided if r.source != "region"]
        done = planned_greedy(net, env, inst, 4, refine=refine, bound_starts=bound, always_rollout=True, region_aligned=False)
        assert done[0].placement[0, 0] in candidates  # the rollout starts on a candidate...
        assert plans[int(done[0].placement[0, 0])].iteration_time_s == fastest  # ...with the fastest plan
        rolled, plan, naive = done
        assert plan.iteration_time_s == fastest and np.array_equal(plan.placement, plans[int(rolled.placement[0, 0])].placement)
        assert all(np.array_equal(a.placement, b.placement) for a, b in zip(decided, done[1:], strict=True))
        assert np.array_equal(naive.placement, naive_placement(inst)) and naive.iteration_time_s == pytest.approx(_time(inst, naive.placement))
        forced = rollout(net, env, inst, first=candidates[-1])
        assert forced.placement[0, 0] == candidates[-1]
        again = planned_greedy(net, env, inst, 4, refine=refine, bound_starts=bound, always_rollout=True, region_aligned=False)
    assert all(np.array_equal(a.placement, b.placement) for a, b in zip(done, again, strict=True))


def test_where_no_forward_plan_fits_the_reverse_plans_are_candidates():
    """On a memory-tight validation draw (LLaMA-65B, 2 replicas, 64 machines) no start's chain
    fits forward (the start holding layer 0); its reverse split (the start holding the last
    layers) fits from about half of them. Each start candidate's reverse plan is then a
    candidate of the decision: memory-feasible, the chain's best reverse split."""
    from agents.decision.inference import first_slot_candidates, planned_greedy
    from hulk_env.evaluation.suites import VALIDATION_CITIES, _draw_heldout_instance

    inst = _draw_heldout_instance(np.random.default_rng([20245, 2]), 64, "llama-65b", 2, True, VALIDATION_CITIES, "val")
    net, env = _plan_net_and_env(inst)
    with torch.inference_mode():
        candidates = first_slot_candidates(net, env, inst, 4)
        assert all(plan_from(inst, s) is None for s in candidates)
        reverse = [p for s in candidates if (p := plan_from(inst, s, reverse=True)) is not None]
        assert reverse  # the test instance's point: some candidate's chain fits reversed
        done = planned_greedy(net, env, inst, 4, refine=0, bound_starts=0)
    plans = [r for r in done if r.source == "plan"]
    assert [r.iteration_time_s for r in plans] == [p.iteration_time_s for p in reverse]
    for r in plans:
        assert cost.evaluate(inst.cluster, inst.workload, r.placement).memory_feasible
        assert r.iteration_time_s == pytest.approx(_time(inst, r.placement), rel=1e-12)
    assert done[-1].source == "naive"


def test_start_candidates_take_one_machine_per_region_first():
    from agents.decision.inference import distinct_regions_first

    regions = ["a", "a", "b", "c", "b", "a"]
    ranked = [1, 0, 4, 5, 2, 3]  # the network's order
    assert distinct_regions_first(ranked, regions, 3) == [1, 4, 3]  # best of a, of b, of c
    assert distinct_regions_first(ranked, regions, 5) == [1, 4, 3, 0, 5]  # then by score
    assert distinct_regions_first(ranked, regions, 9) == [1, 4, 3, 0, 5, 2]
    assert distinct_regions_first([2], regions, 4) == [2]


def test_policy_placement_counts_every_candidates_plan(tmp_path):
    """``starts`` plans are built and evaluated: their evaluations are in ``cost_evals``, and the
    placement is at least as fast as the plan from the network's own first choice."""
    from agents.decision.inference import policy_placement
    from agents.network.saved_policy import load_policy, save_policy

    torch.manual_seed(4)
    padding = Padding(16, 64, 64)
    net = build_policy_network(POLICY, padding, lookahead=False, plan=True)
    save_policy(net, tmp_path, policy_config=POLICY, padding=padding, lookahead=False, plan=True)
    loaded = load_policy(tmp_path)
    inst = _instance(2, seed=6)
    one = policy_placement(loaded, inst, starts=1)
    many = policy_placement(loaded, inst, starts=4)
    own = plan_from(inst, int(one.placement[0, 0]))  # the network's first choice's plan
    assert many.cost_evals > one.cost_evals  # the other candidates' plans are counted
    assert _time(inst, many.placement) <= own.iteration_time_s * (1 + 1e-12)


class _Follower:
    """A stand-in policy that follows the shown plan except, with ``leave_every``, every that many
    slots it takes the highest-index allowed machine: scores as ``observation_logits`` does,
    counting the observations and passes it was asked about."""

    def __init__(self, leave_every: int = 0) -> None:
        self.leave_every, self.passes, self.observations = leave_every, 0, 0

    def observation_logits(self, read):
        self.passes += 1
        self.observations += read.plan.shape[0]
        if not self.leave_every:
            return read.plan.clone()
        leave = (read.cursor % self.leave_every == self.leave_every - 1).unsqueeze(1)
        last = torch.arange(read.plan.shape[1], dtype=torch.float32).expand_as(read.plan)
        return torch.where(leave, last, read.plan)


def _step_by_step(policy, env, inst, first):
    """The greedy rollout one observation at a time (the batched path switched off)."""
    from agents.decision import inference

    batched = inference.plan_ahead
    inference.plan_ahead = lambda env, policy: None
    try:
        return inference.rollout(policy, env, inst, first=first)
    finally:
        inference.plan_ahead = batched


@pytest.mark.parametrize(("suite", "index"), [("val-x-v0", 1), ("hard-v0", 2)])
def test_the_batched_greedy_rollout_is_the_step_by_step_one(suite, index):
    """greedy_along_plan guesses that the network follows the plan, scores the guessed slots in
    one pass and rewinds the env where it does not: the placement is the step-by-step one,
    whether the policy follows the plan (a real network, untrained, mostly does not; a follower
    does; one that leaves it every third slot, mid-guess), and a follower needs a few
    passes, not one per slot. Plans over 4 and 20 machines; D = 4 and memory-tight D = 4."""
    from hulk_env.evaluation import suite_instance

    inst = suite_instance(suite, index)
    net, env = _plan_net_and_env(inst)
    slots = inst.workload.data_parallel * inst.num_layers
    with torch.inference_mode():
        for policy in (net, _Follower(), _Follower(leave_every=3)):
            for first in (0, inst.num_machines - 1):
                batched = rollout(policy, env, inst, first=first)
                alone = _step_by_step(policy, env, inst, first)
                assert np.array_equal(batched.placement, alone.placement)
                assert batched.iteration_time_s == alone.iteration_time_s
        follower = _Follower()
        placed = rollout(follower, env, inst, first=0)
        assert np.array_equal(placed.placement, plan_from(inst, 0).placement)
        assert follower.passes <= 2 + int(np.log2(slots)) and follower.observations >= slots - 1


def test_the_plan_shown_is_never_refused_by_the_mask():
    """The plan becomes the env's witness (PlacementEnvV1.adopt_witness): following it slot by slot
    is always allowed and ends on the plan's placement. val-v0/9 (128 machines, 4 replicas,
    memory-tight) is where the witness's repairs refused the plan's machine on 61 of 164 slots."""
    from hulk_env.evaluation import load_suite

    inst = next(i for i in load_suite("val-v0") if i.instance_id == "val-v0/9")
    env = instance_env(inst, lookahead=False, plan=True)
    planned = plan_from(inst, 45)
    assert planned is not None
    flat = planned.placement.reshape(-1)
    obs, _ = env.reset(options={"instance": inst})
    for t, a in enumerate(flat):
        assert env.action_masks()[a], f"the plan's machine {a} refused at slot {t}"
        if t:
            assert obs[PLAN_KEY][a] == 1.0 and obs["action_mask"][a] == 1.0
        obs, _, terminated, _, info = env.step(int(a))
    assert terminated and (np.asarray(info["placement"]) == planned.placement).all()
