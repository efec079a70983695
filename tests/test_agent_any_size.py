"""A saved policy places any instance: 4 to 512 machines, 2 to 200 (replica x layer) slots.

The policy is saved once with a small training padding; every instance is placed through the
user's path (a run directory as a method), the network reading the instance at its own size.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.decision.methods import load_policy_method
from agents.network.saved_policy import build_policy_network, load_policy, save_policy
from agents.training.runs import FINAL_POLICY_DIR
from hulk_env import cost
from hulk_env.cluster import geo_cluster
from hulk_env.feasibility import Padding
from hulk_env.generators import ToyGenerator
from hulk_env.instance import Instance
from hulk_env.workload import TransformerConfig, build_transformer, catalog

POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2}
MIX = (("A100-40GB", 8, 2.0), ("V100-32GB", 4, 1.0), ("T4", 4, 1.0))
CITIES = ("Paris", "Tokyo", "Chicago", "Mumbai", "Sydney", "Cairo", "Bogota", "Seoul")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    torch.manual_seed(0)
    run = tmp_path_factory.mktemp("run")
    padding = Padding(4, 4, 3)  # far below every instance here
    net = build_policy_network(POLICY, padding, lookahead=False)
    save_policy(net, run / FINAL_POLICY_DIR, policy_config=POLICY, padding=padding, lookahead=False)
    return run


def _cluster(machines: int, name: str):
    counts = np.full(len(CITIES), machines // len(CITIES))
    counts[: machines % len(CITIES)] += 1
    return geo_cluster(CITIES, [int(c) for c in counts], MIX, seed=1, name=name, link_noise=0.1)


def _instances() -> list[Instance]:
    toy = ToyGenerator(num_machines=(4, 4), num_layers=(2, 2), data_parallel=(1,))(np.random.default_rng(0))
    deep = TransformerConfig(name="deep-48", num_layers=48, hidden=512, heads=8, vocab=32000, seq_len=1024,
                             num_micro_batches=8, data_parallel=4)  # fmt: skip
    return [
        toy,  # 4 machines, 2 slots
        Instance(_cluster(16, "c16"), build_transformer(deep), "16-machines-200-slots"),
        Instance(_cluster(64, "c64"), catalog.get_model("gpt3-6.7b", data_parallel=2), "64-machines"),
        Instance(_cluster(512, "c512"), catalog.get_model("gpt3-1.3b"), "512-machines"),
    ]


def test_sizes_cover_the_range():
    sizes = [(i.num_machines, i.data_parallel * i.num_layers) for i in _instances()]
    assert min(m for m, _ in sizes) == 4 and max(m for m, _ in sizes) == 512
    assert min(s for _, s in sizes) == 2 and max(s for _, s in sizes) == 200


@pytest.mark.parametrize("index", range(4))
def test_saved_policy_places_any_size(run_dir, index):
    inst = _instances()[index]
    result = load_policy_method(run_dir)(inst, 0, None)
    assert result.feasible, result.reason
    assert result.placement.shape == (inst.data_parallel, inst.num_layers)
    assert result.placement.min() >= 0 and result.placement.max() < inst.num_machines
    assert cost.evaluate(inst.cluster, inst.workload, result.placement).memory_feasible
    assert result.cost_evals >= 1  # the env's reference and final evaluation, counted


def test_training_padding_does_not_change_the_placement(run_dir):
    """The same weights in a network built for another padding place the same way."""
    from agents.decision.inference import policy_placement
    from agents.network.saved_policy import LoadedPolicy

    loaded = load_policy(run_dir)
    wide = build_policy_network(POLICY, Padding(96, 256, 300), lookahead=False)
    wide.load_state_dict(loaded.policy.state_dict())
    wide.set_training_mode(False)
    other = LoadedPolicy(wide, Padding(96, 256, 300), loaded.meta, loaded.directory)
    inst = _instances()[2]
    a = policy_placement(loaded, inst, seed=1, samples=1).placement
    b = policy_placement(other, inst, seed=1, samples=1).placement
    assert np.array_equal(a, b)
