"""Memory needs, the reference placement's fit and the padding check (hulk_env/feasibility.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import (
    Padding,
    capacity_reason,
    instance_edges,
    layer_memory_bytes,
    memory_tightness,
    min_memory_bytes,
    model_memory_bytes,
    stash_count,
)
from hulk_env.instance import Instance
from hulk_env.reference import even_split, naive_placement, reference_fits
from tests.strategies import make_chain, make_cluster


def chain(schedule: str, memory_bytes: float = 1e15, machines: int = 3, data_parallel: int = 1) -> Instance:
    cluster = make_cluster([1e14] * machines, np.zeros((machines, machines)), np.full((machines, machines), 1e9),
                           memory_bytes=memory_bytes)
    workload = make_chain([1e12] * 4, [1e6] * 4, params=[1e8] * 4, stash=[2e8] * 4, num_micro_batches=8,
                          schedule=schedule, data_parallel=data_parallel)
    return Instance(cluster, workload, f"chain-{schedule}")


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_memory_needs_agree_with_the_cost_model(schedule):
    inst = chain(schedule, data_parallel=2)
    w = inst.workload
    placement = np.array([[0, 0, 1, 2], [1, 1, 1, 1]])  # depths 3 and 1
    used = cost.memory_use_bytes(inst.cluster, w, placement[None])[0].sum()
    expected = sum(float(layer_memory_bytes(inst, stash_count(inst, depth)).sum()) for depth in (3, 1))
    assert used == pytest.approx(expected)
    assert stash_count(inst, 3) == (8 if schedule == "gpipe" else 3)
    assert model_memory_bytes(w, 3) == pytest.approx(2 * float(layer_memory_bytes(w, stash_count(w, 3)).sum()))
    # the lower bound: one stashed micro-batch per layer, every replica
    assert min_memory_bytes(inst) == pytest.approx(2 * 4 * (w.state_bytes_per_param * 1e8 + 2e8))
    assert memory_tightness(inst) == pytest.approx(model_memory_bytes(inst, 3) / (3 * 1e15))


def test_the_reference_placement_and_why_it_cannot_fit():
    roomy = chain("1f1b")
    placement = naive_placement(roomy)
    assert placement.tolist() == [[0, 0, 0, 0]]  # one machine holds it all: the fewest stages
    assert even_split(5, 2).tolist() == [0, 0, 0, 1, 1]
    need_one = float(layer_memory_bytes(roomy, 1).sum())  # one machine, one stashed micro-batch
    tight = chain("1f1b", memory_bytes=0.6 * need_one)
    tight_placement = naive_placement(tight)
    assert tight_placement is not None and len(set(tight_placement[0].tolist())) >= 2
    assert cost.evaluate(tight.cluster, tight.workload, tight_placement).memory_feasible
    hopeless = chain("gpipe", memory_bytes=0.1 * need_one)
    assert naive_placement(hopeless) is None and not reference_fits(hopeless)
    reason = capacity_reason(hopeless)
    # the binding bound is named with its figures (here a layer larger than any machine)
    assert "layer 'l0' needs at least 1.8 GB" in reason and "use more or larger machines" in reason


def test_padding_of_and_check_fits():
    small, big = chain("1f1b"), chain("1f1b", machines=5, data_parallel=2)
    padding = Padding.of([small])
    assert padding == Padding(max_machines=3, max_layers=4, max_edges=3)
    assert Padding.of([small, big]) == padding.at_least(Padding.of([big])) == Padding(5, 8, 6)
    assert instance_edges(big) == 2 * 3
    padding.check_fits(small)
    with pytest.raises(HulkInputError, match=r"instance has 5 machines, above the env's padding max_machines=3; "
                                             r"make the env with max_machines>=5"):
        padding.check_fits(big)
    with pytest.raises(HulkInputError, match=r"above the policy's padding max_layers=4; retrain with 8"):
        Padding(5, 4, 6).check_fits(big, holder="the policy's padding", fix="retrain with {have}")
