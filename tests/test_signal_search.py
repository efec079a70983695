"""experiments.signal_search: the cross-entropy method it fits the rollout's signal weights with,
and that the weights it searches leave the first slot's logits (the decision's start ranking) alone."""

from __future__ import annotations

import numpy as np
import torch

from agents.decision.inference import instance_env, masked_logits, single_thread
from agents.network.gnn import SIGNALS
from agents.network.saved_policy import build_policy_network
from experiments.signal_search import SEARCHED, cross_entropy_method
from hulk_env.feasibility import Padding
from hulk_env.generators import RandomGeoGenerator


def test_cross_entropy_method_finds_a_quadratics_minimum_and_keeps_the_best():
    target = np.array([-1.0, 2.0, 6.0])
    values = []

    def f(x: np.ndarray) -> float:
        values.append(float(((x - target) ** 2).sum()))
        return values[-1]

    seen = []
    best_x, best_f = cross_entropy_method(
        f, np.zeros(3), 2.0, iterations=12, population=16, elite=4, rng=np.random.default_rng(0),
        on_iteration=lambda *a: seen.append(a),
    )
    assert np.abs(best_x - target).max() < 0.3  # 3 sigma away: the std floor lets the mean get there
    assert best_f == min(values) and len(values) == 1 + 12 * (16 + 1) and len(seen) == 12


def test_searched_signals_are_zero_at_the_first_slot():
    """The first slot's logits do not depend on the searched weights: the start ranking, and so
    the shipped decision, stays the same whatever the search finds."""
    gen = RandomGeoGenerator(num_machines=(10, 10), num_regions=(2, 4), num_blocks=(4, 6), data_parallel=(2,))
    inst = gen(np.random.default_rng(3))
    torch.manual_seed(0)
    net = build_policy_network({"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2},
                               Padding(16, 64, 64), lookahead=False, plan=True)  # fmt: skip
    net.set_training_mode(False)
    env = instance_env(inst, lookahead=False, plan=True)
    obs, _ = env.reset(options={"instance": inst})
    with single_thread(), torch.no_grad():
        before, _ = masked_logits(net, obs, env.action_masks())
        for name in SEARCHED:
            net.mlp_extractor.priors[SIGNALS.index(name)] += 7.0
        after, _ = masked_logits(net, obs, env.action_masks())
    assert torch.equal(before, after)
