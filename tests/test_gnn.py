"""The GNN extractor and pointer-head policy over Placement-v1: shapes, padding, equivariance."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.decision.inference import single_thread
from agents.network.gnn import SIGNALS, assignment, edge_list, neighbour_sums, split_features
from agents.network.saved_policy import build_policy_network, load_policy
from agents.training.shaping import StayLookahead
from hulk_env.env import MACHINE_FEATURES_V1, PlacementEnvV1
from hulk_env.feasibility import Padding
from hulk_env.generators import InstanceListGenerator, RandomGeoGenerator, ToyGenerator
from hulk_env.instance import Instance

POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 2, "layer_rounds": 2, "heads": 2}


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


def _instance(d: int = 2) -> Instance:
    gen = RandomGeoGenerator(num_machines=(6, 6), num_regions=(2, 3), num_blocks=(3, 3), data_parallel=(d,))
    return gen(np.random.default_rng(3))


def _network(lookahead: bool = True, seed: int = 0):
    """A network built for a small padding: it runs on observations of any size."""
    torch.manual_seed(seed)
    net = build_policy_network(POLICY, Padding(4, 4, 4), lookahead=lookahead)
    net.set_training_mode(False)
    return net


def _env(instance: Instance, padding: Padding | None = None, lookahead: bool = True):
    kwargs = {} if padding is None else {"max_machines": padding.max_machines, "max_layers": padding.max_layers,
                                         "max_edges": padding.max_edges}  # fmt: skip
    env = PlacementEnvV1(generator=InstanceListGenerator((instance,)), **kwargs)
    return StayLookahead(env, shape=False, lookahead=True) if lookahead else env


def _logits(net, obs: dict) -> torch.Tensor:
    tensors = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
    with torch.no_grad():
        return net.action_logits(tensors)[0]


def _observations(instance: Instance, actions: list[int], padding: Padding | None = None) -> list[dict]:
    """Observations along a fixed action sequence (each action must be allowed)."""
    env = _env(instance, padding)
    obs, _ = env.reset(options={"instance": instance})
    out = [obs]
    for a in actions:
        assert env.action_masks()[a], "test actions must be allowed"
        obs, _, terminated, _, _ = env.step(a)
        if terminated:
            break
        out.append(obs)
    return out


def _valid_actions(instance: Instance, seed: int = 0) -> list[int]:
    """A random masked episode's actions."""
    env = _env(instance)
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
    net = _network()
    obs = _observations(inst, [], pad)[0]
    tensors = {k: torch.as_tensor(np.stack([v, v, v])) for k, v in obs.items()}
    features = net.extract_features(tensors)
    m, hidden = pad.max_machines, POLICY["hidden_dim"]
    extractor = net.features_extractor
    assert features.shape == (3, m * (hidden + 1 + len(SIGNALS)) + extractor.summary_dim)
    emb = split_features(features, hidden, extractor.summary_dim)
    assert emb.z.shape == (3, m, hidden) and emb.signals.shape == (3, len(SIGNALS), m)
    assert emb.mask[:, : inst.num_machines].all() and not emb.mask[:, inst.num_machines :].any()
    assert torch.all(emb.z[:, inst.num_machines :] == 0) and torch.all(emb.signals[..., inst.num_machines :] == 0)
    logits = net.action_logits(tensors)
    assert logits.shape == (3, m) and torch.all(logits[:, inst.num_machines :] < -1e7)
    actions, values, log_prob = net(tensors, deterministic=True, action_masks=np.stack([obs["action_mask"]] * 3) > 0)
    assert actions.shape == (3,) and values.shape == (3, 1) and log_prob.shape == (3,)
    assert torch.all(actions < inst.num_machines)


def test_edge_list_and_assignment_batch_by_offsets():
    edges = torch.tensor([[[0, 1], [1, 2], [0, 0]], [[0, 2], [0, 0], [0, 0]]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    dag = edge_list(edges, mask, 3)
    assert dag.src.tolist() == [0, 1, 3] and dag.dst.tolist() == [1, 2, 5]
    assert dag.inv_in.reshape(-1).tolist() == [1, 1, 1, 1, 1, 1]  # no slot has two predecessors
    held = assignment(torch.tensor([[2, -1, 0], [1, 1, -1]]), 3)
    assert held.slots.tolist() == [0, 2, 3, 4] and held.machines.tolist() == [2, 0, 4, 4]


@pytest.mark.parametrize("d", [1, 2])
def test_more_padding_same_logits(d):
    inst = _instance(d)
    own = Padding.of([inst])
    large = Padding(own.max_machines + 5, own.max_layers + 7, own.max_edges + 3)
    net = _network()
    actions = _valid_actions(inst)
    m = inst.num_machines
    for o_own, o_large in zip(_observations(inst, actions), _observations(inst, actions, large), strict=True):
        a, b = _logits(net, o_own), _logits(net, o_large)
        assert a.shape == (m,) and b.shape == (large.max_machines,)
        torch.testing.assert_close(a, b[:m], atol=1e-5, rtol=1e-5)
        assert torch.all(b[m:] < -1e7)


def _permuted(obs: dict, perm: np.ndarray) -> dict:
    """The observation with new machine ``i`` = old machine ``perm[i]`` (indices mapped too).

    The env's own observation of a relabelled cluster differs by more than this (its witness
    starts from the naive placement, which follows the listed order), so the network's
    equivariance is tested on the permuted observation itself."""
    inverse = np.argsort(perm)
    out = dict(obs)
    for key in ("machine_mask", "machine_features", "neighbour_links", "neighbour_mask", "action_mask", "lookahead"):
        out[key] = obs[key][perm]
    nb = obs["neighbours"][perm].astype(np.int64)
    out["neighbours"] = np.where(nb >= 0, inverse[np.clip(nb, 0, None)], -1).astype(np.float32)
    lm = obs["layer_machine"].astype(np.int64)
    out["layer_machine"] = np.where(lm >= 0, inverse[np.clip(lm, 0, None)], -1).astype(np.float32)
    return out


@pytest.mark.parametrize("d", [1, 2])
def test_relabelled_machines_permute_the_logits(d):
    inst = _instance(d)
    perm = np.random.default_rng(7).permutation(inst.num_machines)
    net = _network()
    for obs in _observations(inst, _valid_actions(inst, seed=1)):
        old, new = _logits(net, obs), _logits(net, _permuted(obs, perm))
        torch.testing.assert_close(new, old[torch.as_tensor(perm)], atol=1e-4, rtol=1e-4)


def test_toy_instances_of_any_size_run_with_one_network():
    gen = ToyGenerator()
    rng = np.random.default_rng(0)
    net = _network()
    for inst in [gen(rng) for _ in range(6)]:
        logits = _logits(net, _observations(inst, [])[0])
        assert logits.shape == (inst.num_machines,) and torch.isfinite(logits).all()


@pytest.mark.parametrize("d", [1, 2, 4])
def test_instance_features_read_replicas_and_memory_need_off_the_observation(d):
    from agents.network.gnn import instance_features, read_observation
    from hulk_env.feasibility import layer_memory_bytes

    inst = _instance(d)
    obs, _ = _env(inst, Padding(12, 64, 128), lookahead=False).reset(options={"instance": inst})
    tensors = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
    log_d, tightness = instance_features(read_observation(tensors))[0].tolist()
    assert log_d == pytest.approx(np.log2(d) / 3)
    # all D replicas' state + one stashed micro-batch per layer, over the cluster's memory
    need = d * layer_memory_bytes(inst, 1).sum() / inst.cluster.memory_bytes.sum()
    assert tightness == pytest.approx(min(need, 2.0), rel=1e-3)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_share_room_is_the_memory_left_if_later_replicas_copy_the_current_one(d):
    from agents.network.gnn import read_observation, share_room
    from hulk_env.feasibility import layer_memory_bytes

    inst = _instance(d)
    env = _env(inst, lookahead=False)
    obs, _ = env.reset(options={"instance": inst})
    per_layer = layer_memory_bytes(inst, 1)  # state + one stashed micro-batch, as memory_rel
    # the env's free memory (its own tests) with the current replica's copies taken off
    memory = inst.cluster.memory_bytes
    n, placed = inst.num_layers, []
    for step in range(d * n):
        r, layer = divmod(step, n)
        held = np.zeros(inst.num_machines)
        for (pr, pl), m in placed:
            held[m] += per_layer[pl] if pr == r else 0.0
        need = per_layer[layer]
        free = obs["machine_features"][: inst.num_machines, MACHINE_FEATURES_V1.index("free_memory")]
        expected = free - (need + (d - 1 - r) * (held + need)) / memory
        tensors = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
        got = share_room(read_observation(tensors))[0, : inst.num_machines].numpy()
        np.testing.assert_allclose(got, np.clip(expected, -1, 1), atol=1e-4)
        if step:  # the stay_shared signal: the predecessor's machine, where the copies fit
            with torch.no_grad():
                signals = _network(lookahead=False).features_extractor.embed(read_observation(tensors)).signals[0]
            stay = signals[SIGNALS.index("stay_shared"), : inst.num_machines].numpy()
            prev_machine = placed[-1][1]
            want = np.zeros(inst.num_machines)
            want[prev_machine] = float(got[prev_machine] >= 0) if layer else 0.0
            np.testing.assert_array_equal(stay, want)
        allowed = np.flatnonzero(env.action_masks())
        prev = placed[-1][1] if placed else int(allowed[0])
        a = prev if prev in allowed else int(allowed[0])  # stay where allowed: stages of several layers
        placed.append(((r, layer), a))
        obs, _, terminated, _, _ = env.step(a)
        if terminated:
            break


def _listed_sums(values: torch.Tensor, weights: torch.Tensor, neighbours: torch.Tensor, heads: int) -> torch.Tensor:
    """:func:`agents.network.gnn.neighbour_sums` by its definition, one listed neighbour at a time."""
    b, m, hidden = values.shape
    k, t, width = neighbours.shape[-1], weights.shape[-1] // heads, hidden // heads
    out = torch.zeros(b, m, t, heads, width, dtype=torch.float64)
    for s in range(b):
        for i in range(m):
            for j in range(k):
                v = values[s, int(neighbours[s, i, j])].double().view(heads, width)
                out[s, i] += weights[s, i, j].double().view(t, heads, 1) * v
    return out.reshape(b, m, t * hidden).float()


@pytest.mark.parametrize("dense", [True, False])
def test_neighbour_sums_are_the_weighted_sums_over_the_listed_neighbours(dense):
    gen = torch.Generator().manual_seed(0)
    b, m, k, heads, t = 3, 7, 5, 2, 2
    values = torch.randn(b, m, heads * 3, generator=gen)
    weights = torch.rand(b, m, k, t * heads, generator=gen)
    neighbours = torch.randint(0, m, (b, m, k), generator=gen)
    neighbours[0, 0] = 2  # one machine listed k times counts k times
    got = neighbour_sums(values, weights, neighbours, heads, dense=dense)
    torch.testing.assert_close(got, _listed_sums(values, weights, neighbours, heads), atol=1e-5, rtol=1e-5)


def test_neighbour_sums_dense_and_gathered_agree_with_gradients():
    gen = torch.Generator().manual_seed(1)
    b, m, k, heads = 4, 9, 6, 2
    values = torch.randn(b, m, 8, generator=gen, requires_grad=True)
    weights = torch.rand(b, m, k, 2 * heads, generator=gen, requires_grad=True)
    neighbours = torch.randint(0, m, (b, m, k), generator=gen)
    grads = []
    for dense in (True, False):
        out = neighbour_sums(values, weights, neighbours, heads, dense=dense)
        grads.append((out, *torch.autograd.grad((out * torch.arange(out.numel()).view_as(out).sin()).sum(), (values, weights))))
    for a, b_ in zip(*grads, strict=True):
        torch.testing.assert_close(a, b_, atol=1e-5, rtol=1e-5)


def test_shipped_policy_same_outputs_on_either_neighbour_sum_and_without_gradients(monkeypatch):
    """The fast paths change no number of the shipped policy: its logits and values on
    observations of clusters at both sides of the dense/gathered switch are the same either
    way, and its SB3 forward without gradients (PPO's rollouts, under inference_mode) gives the
    actions, values and log-probabilities it gives with them."""
    import agents.network.gnn as gnn
    from agents.decision.inference import instance_env
    from agents.network.saved_policy import lookahead_of, plan_of

    loaded = load_policy(Path(__file__).resolve().parents[1] / "agents" / "pretrained" / "gnn-ppo")
    policy, rng = loaded.policy, np.random.default_rng(0)
    for machines in (12, 47, 160):
        inst = RandomGeoGenerator(num_machines=(machines, machines), num_regions=(3, 6), num_blocks=(4, 4), data_parallel=(2,))(rng)
        env = instance_env(inst, lookahead_of(loaded.meta), plan=plan_of(loaded.meta))
        obs, _ = env.reset()
        batch, masks = [], []
        for _ in range(6):
            batch.append(obs)
            masks.append(env.action_masks())
            obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(masks[-1]))))
            if terminated or truncated:
                break
        tensors = {key: torch.as_tensor(np.stack([o[key] for o in batch])).float() for key in batch[0]}
        action_masks = np.stack(masks)
        with torch.no_grad():
            auto = policy.action_logits(tensors), policy.predict_values(tensors)
            fast = policy(tensors, deterministic=True, action_masks=action_masks)
        slow = policy(tensors, deterministic=True, action_masks=action_masks)  # with gradients
        assert torch.equal(fast[0], slow[0])
        for a, b in zip(fast[1:], slow[1:], strict=True):
            torch.testing.assert_close(a, b.detach(), atol=1e-5, rtol=1e-5)
        for dense in (True, False):
            with monkeypatch.context() as patch:
                patch.setattr(gnn, "neighbour_sums", partial(neighbour_sums, dense=dense))
                with torch.no_grad():
                    forced = policy.action_logits(tensors), policy.predict_values(tensors)
            for a, b in zip(auto, forced, strict=True):
                torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-5)
