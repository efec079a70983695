"""The GNN extractor and pointer-head policy: shapes, padding invariance, equivariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.gnn import layer_adjacency, placement_matrix, split_features
from agents.inference import make_eval_env, single_thread
from agents.saved_policy import build_policy_network
from hulk_env.cluster import Cluster
from hulk_env.feasibility import Padding
from hulk_env.generators import RandomGeoGenerator, ToyGenerator
from hulk_env.instance import Instance

POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 2, "layer_rounds": 2, "heads": 2}


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


def _instance(d: int = 2) -> Instance:
    gen = RandomGeoGenerator(num_machines=(6, 6), num_regions=(2, 3), num_blocks=(3, 3), data_parallel=(d,))
    return gen(np.random.default_rng(3))


def _networks(paddings: list[Padding], seed: int = 0) -> list:
    """One network per padding, all with the same weights (the weights do not depend on it)."""
    torch.manual_seed(seed)
    nets = [build_policy_network(POLICY, p, lookahead=True) for p in paddings]
    for net in nets[1:]:
        net.load_state_dict(nets[0].state_dict())
    for net in nets:
        net.set_training_mode(False)
    return nets


def _logits(net, obs: dict) -> torch.Tensor:
    tensors = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
    with torch.no_grad():
        return net.action_logits(tensors)[0]


def _observations(instance: Instance, padding: Padding, actions: list[int]) -> list[dict]:
    """Observations along a fixed action sequence (each action must be valid)."""
    env = make_eval_env(instance, padding, lookahead=True)
    obs, _ = env.reset(options={"instance": instance})
    out = [obs]
    for a in actions:
        assert env.action_masks()[a], "test actions must be valid"
        obs, _, terminated, _, _ = env.step(a)
        if terminated:
            break
        out.append(obs)
    return out


def _valid_actions(instance: Instance, padding: Padding, seed: int = 0) -> list[int]:
    """A random masked episode's actions."""
    env = make_eval_env(instance, padding, lookahead=True)
    env.reset(options={"instance": instance})
    rng = np.random.default_rng(seed)
    actions = []
    while True:
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        actions.append(a)
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            return actions


def test_shapes_and_padded_machines_masked():
    inst = _instance()
    pad = Padding.of([inst]).at_least(Padding(9, 10, 8))
    (net,) = _networks([pad])
    obs = _observations(inst, pad, [])[0]
    tensors = {k: torch.as_tensor(np.stack([v, v, v])) for k, v in obs.items()}
    features = net.extract_features(tensors)
    assert features.shape == (3, net.features_extractor.features_dim)
    emb = split_features(features, pad.max_machines, POLICY["hidden_dim"])
    assert emb.z.shape == (3, pad.max_machines, POLICY["hidden_dim"])
    assert emb.mask[:, : inst.num_machines].all() and not emb.mask[:, inst.num_machines :].any()
    assert torch.all(emb.z[:, inst.num_machines :] == 0)
    logits = net.action_logits(tensors)
    assert logits.shape == (3, pad.max_machines)
    assert torch.all(logits[:, inst.num_machines :] < -1e7)
    actions, values, log_prob = net(tensors, deterministic=True, action_masks=np.stack([obs["action_mask"]] * 3) > 0)
    assert actions.shape == (3,) and values.shape == (3, 1) and log_prob.shape == (3,)
    assert torch.all(actions < inst.num_machines)


def test_layer_adjacency_batches_by_offsets():
    edges = torch.tensor([[[0, 1], [1, 2], [0, 0]], [[0, 2], [0, 0], [0, 0]]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adj = layer_adjacency(edges, mask, 3)
    expected = torch.zeros(2, 3, 3)
    expected[0, 0, 1] = expected[0, 1, 2] = expected[1, 0, 2] = 1
    assert torch.equal(adj, expected)
    assign = placement_matrix(torch.tensor([[2, -1, 0]]), 3)
    assert torch.equal(assign[0], torch.tensor([[0.0, 0, 1], [0, 0, 0], [1, 0, 0]]))


@pytest.mark.parametrize("d", [1, 2])
def test_more_padding_same_logits(d):
    inst = _instance(d)
    small = Padding.of([inst])
    large = Padding(small.max_machines + 5, small.max_layers + 7, small.max_edges + 3)
    net_small, net_large = _networks([small, large])
    actions = _valid_actions(inst, small)
    for o_small, o_large in zip(_observations(inst, small, actions), _observations(inst, large, actions), strict=True):
        a, b = _logits(net_small, o_small), _logits(net_large, o_large)
        m = inst.num_machines
        torch.testing.assert_close(a[:m], b[:m], atol=1e-5, rtol=1e-5)
        assert torch.all(b[m:] < -1e7)


def _relabelled(inst: Instance, perm: np.ndarray) -> Instance:
    """The same instance with machine ``i`` of the new cluster = machine ``perm[i]`` of the old."""
    c = inst.cluster
    cluster = Cluster(
        tuple(c.machines[i] for i in perm),
        c.latency_s[np.ix_(perm, perm)],
        c.bandwidth_bps[np.ix_(perm, perm)],
        c.imputed[np.ix_(perm, perm)],
        name=c.name,
    )
    return Instance(cluster, inst.workload, inst.instance_id)


@pytest.mark.parametrize("d", [1, 2])
def test_relabelled_machines_permute_the_logits(d):
    inst = _instance(d)
    perm = np.random.default_rng(7).permutation(inst.num_machines)
    inverse = np.argsort(perm)
    other = _relabelled(inst, perm)
    pad = Padding.of([inst])
    (net,) = _networks([pad])
    actions = _valid_actions(inst, pad, seed=1)
    mapped = [int(inverse[a]) for a in actions]
    for o_old, o_new in zip(_observations(inst, pad, actions), _observations(other, pad, mapped), strict=True):
        old, new = _logits(net, o_old), _logits(net, o_new)
        torch.testing.assert_close(new, old[torch.as_tensor(perm)], atol=1e-4, rtol=1e-4)


def test_toy_instances_of_any_size_run_with_one_network():
    gen = ToyGenerator()
    rng = np.random.default_rng(0)
    instances = [gen(rng) for _ in range(6)]
    pad = Padding.of(instances)
    (net,) = _networks([pad])
    for inst in instances:
        obs = _observations(inst, pad, [])[0]
        logits = _logits(net, obs)
        assert torch.isfinite(logits[: inst.num_machines]).all()
