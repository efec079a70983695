"""Warm start by imitation (agents.training.imitation): demonstrations, replay, behaviour cloning."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.decision.inference import instance_env, sampled_rollouts, single_thread
from agents.network.saved_policy import build_policy_network
from agents.training.imitation import (
    _HOLDS_PREDECESSOR,
    STATIC_KEYS,
    BCSettings,
    aggregate,
    behaviour_cloning,
    demonstrate,
    episode_losses,
    expert_action,
    replay,
)
from hulk_env import cost
from hulk_env.feasibility import Padding
from hulk_env.generators import ToyGenerator
from hulk_env.reference import naive_placement

POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2}


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


def _policy(seed: int = 0):
    torch.manual_seed(seed)
    return build_policy_network(POLICY, Padding(4, 4, 4), lookahead=False)


def _env(instance):
    return instance_env(instance, lookahead=False, shape=True)


@pytest.fixture(scope="module")
def toy_episodes():
    """Optimal placements (``exact``) of a handful of toy instances, replayed completely."""
    gen = ToyGenerator(num_machines=(3, 4), num_layers=(3, 5), data_parallel=(1,))
    rng = np.random.default_rng(5)
    demos, episodes = [], []
    while len(demos) < 4:
        demo = demonstrate(gen(rng), ("exact",))
        episode = replay(demo, _env)
        if episode.complete:
            demos.append(demo)
            episodes.append(episode)
    return demos, episodes


def test_demonstration_is_the_fastest_method():
    inst = ToyGenerator()(np.random.default_rng(2))
    demo = demonstrate(inst, ("naive", "compute-greedy"))
    times = {}
    for name in ("naive", "compute-greedy"):
        other = demonstrate(inst, (name,))
        times[name] = other.iteration_time_s
    assert demo.iteration_time_s == min(times.values())
    assert demo.method == min(times, key=times.get)
    assert demo.cost_evals > 0
    assert math.isclose(demo.iteration_time_s, cost.iteration_time(inst.cluster, inst.workload, demo.placement))


def test_replay_records_what_the_policy_sees(toy_episodes):
    demos, episodes = toy_episodes
    for demo, ep in zip(demos, episodes, strict=True):
        assert ep.steps == demo.placement.size and ep.actions.tolist() == demo.placement.reshape(-1).tolist()
        assert ep.masks[np.arange(ep.steps), ep.actions].all()  # every demonstrated machine was allowed
        assert set(ep.static) <= set(STATIC_KEYS) and all(v.shape[0] == 1 for v in ep.static.values())
        assert all(v.shape[0] == ep.steps for v in ep.dynamic.values())
        # the return-to-go of the first step is the episode's return: the log speed-up over naive
        naive_s = cost.iteration_time(demo.instance.cluster, demo.instance.workload, naive_placement(demo.instance))
        assert ep.returns[0] == pytest.approx(math.log(naive_s / demo.iteration_time_s), rel=1e-4, abs=1e-5)


class _Refuse(gym.Wrapper):
    """Forbids the machine the demonstration takes at slot ``at``."""

    def __init__(self, env, at: int, machine: int) -> None:
        super().__init__(env)
        self.at, self.machine, self.t = at, machine, 0

    def reset(self, **kwargs):
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self.t += 1
        return self.env.step(action)

    def action_masks(self):
        mask = self.env.action_masks().copy()
        if self.t == self.at:
            mask[self.machine] = False
        return mask


def test_a_refused_machine_is_relabelled_by_the_expert(toy_episodes):
    demos, _ = toy_episodes
    demo = demos[0]
    flat = demo.placement.reshape(-1)
    ep = replay(demo, lambda inst: _Refuse(_env(inst), 2, int(flat[2])))
    assert ep.complete and ep.steps == flat.size and ep.relabelled >= 1
    assert ep.actions[:2].tolist() == flat[:2].tolist() and ep.actions[2] != flat[2]
    assert ep.masks[np.arange(ep.steps), ep.actions].all()


def test_expert_keeps_an_optimal_demonstration(toy_episodes):
    """On the path of an optimal placement (``exact``), the expert's machine completes it at
    the optimal time (the demonstrated machine, or one as good)."""
    demos, _ = toy_episodes
    for demo in demos:
        flat = demo.placement.reshape(-1)
        for t in range(flat.size):
            a = expert_action(demo, flat, t, np.ones(demo.instance.num_machines, dtype=bool))
            completed = flat.copy()
            completed[t] = a
            inst = demo.instance
            got = cost.iteration_time(inst.cluster, inst.workload, completed.reshape(demo.placement.shape))
            assert got == pytest.approx(demo.iteration_time_s, rel=1e-12)


def test_aggregate_labels_the_policys_own_states(toy_episodes):
    demos, _ = toy_episodes
    policy = _policy(seed=4)
    for demo in demos:
        ep = aggregate(policy, demo, _env)
        assert ep.complete and ep.steps == demo.placement.size
        assert ep.masks[np.arange(ep.steps), ep.actions].all()


def test_aggregate_from_a_given_start_and_sampled(toy_episodes):
    """``first`` puts the first slot there (the label stays the expert's); sampled episodes
    are reproducible from their generator and label every visited state with an allowed machine."""
    demos, _ = toy_episodes
    policy = _policy(seed=4)
    for demo in demos:
        ep = aggregate(policy, demo, _env)
        first = next(int(m) for m in np.flatnonzero(ep.masks[0]) if m != int(demo.placement[0, 0]))
        ep = aggregate(policy, demo, _env, first=first)
        assert ep.complete
        taken = np.flatnonzero(ep.dynamic["machine_features"][1, :, _HOLDS_PREDECESSOR] > 0.5)
        assert taken.tolist() == [first]  # slot 1 sees the forced first slot as its predecessor
        expected = expert_action(demo, np.full(demo.placement.size, -1), 0, ep.masks[0])
        assert ep.actions[0] == expected
        a, b = (aggregate(policy, demo, _env, temperature=1.0, generator=torch.Generator().manual_seed(7)) for _ in range(2))
        assert np.array_equal(a.actions, b.actions) and np.array_equal(a.dynamic["machine_features"], b.dynamic["machine_features"])
        assert a.masks[np.arange(a.steps), a.actions].all()


def test_decision_demonstration_is_the_decisions_placement():
    """The teacher of expert iteration is the policy's own decision (plan, or naive), its time
    the cost model's and its evaluations counted; polishing never makes it slower."""
    from agents.decision.inference import policy_placement
    from agents.network.saved_policy import LoadedPolicy
    from agents.training.imitation import decision_demonstration
    from hulk_env.generators import ToyGenerator

    torch.manual_seed(0)
    net = build_policy_network(POLICY, Padding(8, 8, 8), lookahead=False, plan=True)
    loaded = LoadedPolicy(net, Padding(8, 8, 8), {"observation": {"lookahead": False, "plan": True}}, None, None)
    inst = ToyGenerator(num_machines=(5, 6), num_layers=(4, 6), data_parallel=(2,), max_placements=10**12)(np.random.default_rng(3))
    demo = decision_demonstration(loaded, inst)
    decided = policy_placement(loaded, inst)
    assert np.array_equal(demo.placement, decided.placement) and demo.method == "decision"
    assert demo.iteration_time_s == pytest.approx(cost.iteration_time(inst.cluster, inst.workload, demo.placement), rel=1e-12)
    assert demo.cost_evals >= decided.cost_evals > 0
    polished = decision_demonstration(loaded, inst, polish_budget=200)
    assert polished.iteration_time_s <= demo.iteration_time_s * (1 + 1e-12)


def test_cross_entropy_is_that_of_the_masked_distribution(toy_episodes):
    _, episodes = toy_episodes
    policy = _policy()
    ep = episodes[1]
    ce, value_err, correct = episode_losses(policy, ep)
    obs, actions, masks, _ = ep.tensors()
    with torch.no_grad():
        logits = policy.action_logits(obs).masked_fill(~masks, -torch.inf)
        expected = -torch.log_softmax(logits, -1)[torch.arange(ep.steps), actions]
    torch.testing.assert_close(ce.detach(), expected, atol=1e-5, rtol=1e-5)
    assert value_err.shape == (ep.steps,) and correct.shape == (ep.steps,)


def _reproduced(policy, demos) -> list[bool]:
    out = []
    for demo in demos:
        (greedy,) = sampled_rollouts(policy, demo.instance, lookahead=False)
        out.append(math.isclose(greedy.iteration_time_s, demo.iteration_time_s, rel_tol=1e-9))
    return out


def test_cloning_makes_the_greedy_policy_reproduce_the_demonstrations(toy_episodes):
    demos, episodes = toy_episodes
    policy = _policy(seed=3)
    before = _reproduced(policy, demos)
    result = behaviour_cloning(policy, episodes, BCSettings(epochs=300, learning_rate=3e-3, batch_steps=64))
    assert result.epochs[-1].cross_entropy < 0.2 * result.epochs[0].cross_entropy
    assert result.epochs[-1].accuracy == 1.0
    assert all(_reproduced(policy, demos)), f"greedy policy before cloning reproduced {before}"


def test_cloning_needs_episodes():
    with pytest.raises(ValueError, match="at least one episode"):
        behaviour_cloning(_policy(), [], BCSettings(epochs=1))


def test_training_starts_from_imitation_and_selects_on_validation(tmp_path):
    """``imitation.demonstrations > 0``: behaviour cloning (with a DAgger round) before PPO, its
    curve and summary written, the cloned policy evaluated as step 0; a resume skips it."""
    import json

    from agents.network.saved_policy import load_policy
    from agents.training.config import load_config
    from agents.training.train import train

    overrides = ["env.generator=generalist", "env.machines=[4,6]", "env.heldout_suite=tiny-v0", "env.lookahead=false",
                 "imitation.demonstrations=4", "imitation.epochs=2", "imitation.dagger_rounds=1",
                 f"train.out={tmp_path}", "train.name=bc", "eval.n_eval_episodes=2"]  # fmt: skip
    run = train(load_config("smoke", overrides))
    curve = (run / "eval" / "imitation.csv").read_text().splitlines()
    assert curve[0].startswith("round,epoch") and len(curve) == 1 + 2 * 2
    summary = json.loads((run / "eval" / "imitation.json").read_text())
    assert summary["demonstrations"] == 4 and summary["episodes"] == 8 and summary["slots"] > 0
    rows = (run / "eval" / "evaluations.csv").read_text().splitlines()
    assert rows[1].startswith("0,")  # the cloned policy, before any PPO step
    assert load_policy(run / "bc_policy").meta["num_timesteps"] == 0
    assert load_policy(run).meta["env_id"] == "hulk/Placement-v1"
    again = train(resume=run)
    assert (again / "eval" / "imitation.csv").read_text().splitlines() == curve  # not cloned again


def test_decision_weights_mark_replica_starts_and_new_stages(toy_episodes):
    from agents.training.imitation import decision_weights

    demos, episodes = toy_episodes
    for demo, ep in zip(demos, episodes, strict=True):
        weights = decision_weights(ep, 5.0).numpy()
        flat = demo.placement.reshape(-1)
        n_layers = demo.instance.num_layers
        for t in range(ep.steps):
            # the first layer has no predecessor; on a chain of layers, staying = the previous layer's machine
            moves = t % n_layers == 0 or flat[t] != flat[t - 1]
            assert weights[t] == (5.0 if moves else 1.0), (t, flat)
        assert np.all(decision_weights(ep, 1.0).numpy() == 1.0)


def test_cloning_the_signals_moves_only_the_signal_weights(toy_episodes):
    """trainable="signals": the priors and the gain's scale learn, every other weight is as it was
    (and trainable again afterwards)."""
    _, episodes = toy_episodes
    policy = _policy(seed=4)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    behaviour_cloning(policy, episodes, BCSettings(epochs=3, learning_rate=0.05, batch_steps=64, trainable="signals"))
    after = policy.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == {"mlp_extractor.priors"} or moved == {"mlp_extractor.priors", "mlp_extractor.gain_log_scale"}
    assert all(p.requires_grad for p in policy.parameters())
    with pytest.raises(ValueError, match="unknown trainable"):
        behaviour_cloning(policy, episodes, BCSettings(epochs=1, trainable="head"))
