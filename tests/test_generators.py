"""Instance generators: determinism, feasibility, bounds, the toy optimum, construction by name."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines.naive import naive
from hulk_env.errors import HulkInputError
from hulk_env.generators import (
    FixedGenerator,
    InstanceListGenerator,
    RandomGeoGenerator,
    ToyGenerator,
    enumerate_placements,
    exhaustive_optimum,
    instance_edges,
    is_feasible,
    make_generator,
)
from hulk_env.hardware import geo
from hulk_env.instance import Instance
from hulk_env.testing import placement_problems


def same_instance(a: Instance, b: Instance) -> bool:
    ca, cb, wa, wb = a.cluster, b.cluster, a.workload, b.workload
    return (
        a.instance_id == b.instance_id
        and ca.machines == cb.machines
        and np.array_equal(ca.latency_s, cb.latency_s)
        and np.array_equal(ca.bandwidth_bps, cb.bandwidth_bps)
        and all(np.array_equal(getattr(wa, k), getattr(wb, k)) for k in ("flops", "params", "activation_bytes", "stash_bytes", "edges"))
        and (wa.data_parallel, wa.num_micro_batches, wa.schedule) == (wb.data_parallel, wb.num_micro_batches, wb.schedule)
    )


@pytest.mark.parametrize("generator", [RandomGeoGenerator(), ToyGenerator()], ids=["random", "toy"])
def test_same_seed_same_instance(generator):
    a = [generator(np.random.default_rng(5)) for _ in range(3)]
    b = [generator(np.random.default_rng(5)) for _ in range(3)]
    assert all(same_instance(x, y) for x, y in zip(a, b, strict=True))
    c = generator(np.random.default_rng(6))
    assert not same_instance(a[0], c)
    key = int(a[0].instance_id.rsplit("/", 1)[1])
    assert same_instance(generator.instance(key), a[0])  # the id names the instance


def test_random_geo_instances_are_feasible_and_within_bounds():
    gen = RandomGeoGenerator(num_machines=(3, 9), num_regions=(2, 3), num_blocks=(2, 5), data_parallel=(1, 2, 3))
    rng = np.random.default_rng(0)
    for _ in range(30):
        inst = gen(rng)
        c, w = inst.cluster, inst.workload
        assert is_feasible(inst)
        assert 3 <= c.num_machines <= gen.max_machines
        assert 2 <= len(c.regions) <= 3
        assert all(r in geo.CITIES for r in c.regions)
        assert all(mc.lat is not None for mc in c.machines)
        assert w.data_parallel in (1, 2, 3)
        assert w.data_parallel * w.num_layers <= gen.max_slots
        assert instance_edges(inst) <= gen.max_edges
        assert w.is_chain and 4 <= w.num_layers <= 7


def test_random_geo_city_pool_and_gpu_mix_are_respected():
    gen = make_generator(
        "random", cities=["Paris", "Tokyo", "Ashburn"], num_regions=[2, 2], gpu_mix=[["H100", 8, 1.0]]
    )
    rng = np.random.default_rng(1)
    for _ in range(5):
        inst = gen(rng)
        assert set(inst.cluster.regions) <= {"Paris", "Tokyo", "Ashburn"}
        assert {mc.gpu for mc in inst.cluster.machines} == {"H100"}


def test_generator_gives_up_with_a_clear_message_when_nothing_fits():
    gen = RandomGeoGenerator(
        num_machines=(1, 1), num_regions=(1, 1), gpu_mix=(("GTX-1080", 1, 1.0),), hidden=(2048,),
        num_blocks=(12, 12), seq_len=(2048,), max_tries=3,
    )
    with pytest.raises(HulkInputError, match="no feasible instance in 3 draws"):
        gen(np.random.default_rng(0))


def test_toy_instances_are_small_feasible_and_enumerable():
    gen = ToyGenerator()
    rng = np.random.default_rng(2)
    for _ in range(40):
        inst = gen(rng)
        m, d, n = inst.num_machines, inst.data_parallel, inst.num_layers
        assert 2 <= m <= 4 and 2 <= n <= 5 and d in (1, 2)
        assert m ** (d * n) <= gen.max_placements
        assert is_feasible(inst)
        assert instance_edges(inst) <= gen.max_edges and d * n <= gen.max_slots


def test_enumeration_is_lexicographic():
    p = enumerate_placements(np.arange(8), 2, 1, 3)
    assert p[:, 0].tolist() == [list(x) for x in itertools.product(range(2), repeat=3)]
    assert enumerate_placements(np.array([5]), 3, 2, 1).tolist() == [[[1], [2]]]


def test_exhaustive_optimum_matches_an_independent_brute_force():
    gen = ToyGenerator(max_placements=256)
    rng = np.random.default_rng(3)
    for _ in range(4):
        inst = gen(rng)
        c, w = inst.cluster, inst.workload
        best = (np.inf, None)
        for flat in itertools.product(range(c.num_machines), repeat=w.data_parallel * w.num_layers):
            placement = np.array(flat).reshape(w.data_parallel, w.num_layers)
            result = cost.evaluate(c, w, placement)
            if result.memory_feasible and result.iteration_time_s < best[0]:
                best = (result.iteration_time_s, placement)
        placement, time_s = exhaustive_optimum(inst)
        assert time_s == pytest.approx(best[0], rel=1e-12)
        assert placement_problems(inst, placement) == []
        assert time_s <= cost.iteration_time(c, w, naive(inst).placement)
        assert gen.optimum(inst)[1] == time_s


def test_exhaustive_refuses_large_instances():
    inst = RandomGeoGenerator(num_machines=(8, 8), num_blocks=(6, 6))(np.random.default_rng(0))
    with pytest.raises(HulkInputError, match="above the exhaustive limit"):
        exhaustive_optimum(inst, max_placements=1000)


def test_fixed_generator_by_name_and_by_objects():
    gen = make_generator("fixed", cluster="cloud-3region", model="gpt3-125m", data_parallel=2)
    inst = gen(np.random.default_rng(0))
    assert inst is gen(np.random.default_rng(1))  # always the same object
    assert inst.instance_id == "cloud-3regionxgpt3-125m"
    assert inst.data_parallel == 2 and gen.max_slots == 2 * inst.num_layers
    assert gen.max_edges == 2 * len(inst.workload.edges) and gen.max_machines == 12
    again = FixedGenerator(inst.cluster, inst.workload.with_training(data_parallel=1), num_micro_batches=4)
    assert again.fixed.workload.num_micro_batches == 4 and again.fixed.data_parallel == 1
    rebuilt = FixedGenerator(inst.cluster, inst.workload, micro_batch_size=4).fixed.workload
    assert rebuilt.total_flops == pytest.approx(2 * inst.workload.total_flops)  # gpt3-125m: 2 -> 4
    explicit = dataclasses.replace(inst.workload, config=None)  # layers without their architecture
    with pytest.raises(HulkInputError, match="would rebuild the model"):
        FixedGenerator(inst.cluster, explicit, micro_batch_size=4)
    with pytest.raises(HulkInputError, match="naive placement does not fit"):
        make_generator("fixed", cluster="cloud-3region", model="gpt3-175b")
    with pytest.raises(HulkInputError, match="unknown cluster"):
        make_generator("fixed", cluster="nowhere", model="gpt3-125m")


def test_instance_list_generator_draws_uniformly_from_its_list():
    toy = ToyGenerator()
    rng = np.random.default_rng(4)
    instances = [toy(rng) for _ in range(3)]
    gen = InstanceListGenerator(tuple(instances))
    drawn = [gen(np.random.default_rng(9)) for _ in range(1)] + [gen(rng) for _ in range(60)]
    assert {id(x) for x in drawn} == {id(x) for x in instances}
    assert gen.max_machines == max(i.num_machines for i in instances)
    with pytest.raises(HulkInputError, match="at least one instance"):
        InstanceListGenerator(())


def test_make_generator_rejects_unknown_names_and_arguments():
    with pytest.raises(HulkInputError, match="did you mean 'toy'"):
        make_generator("toi")
    with pytest.raises(HulkInputError, match="did you mean 'num_machines'"):
        make_generator("random", num_machine=[2, 4])
    with pytest.raises(HulkInputError, match="integer range"):
        make_generator("toy", num_machines=[4, 2])
    with pytest.raises(HulkInputError, match="unknown city"):
        make_generator("random", cities=["Atlantis"])
    gen = make_generator("toy", num_machines=[2, 2], data_parallel=[1])
    assert gen.num_machines == (2, 2) and gen.data_parallel == (1,)
