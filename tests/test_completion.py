"""The witness completion behind Placement-v1's mask: sound, never a dead end, little hidden."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hulk_env.completion as completion
from hulk_env import cost
from hulk_env.cluster import Cluster, Machine
from hulk_env.completion import (
    EXCHANGE,
    RELABEL,
    STAY,
    SWAP,
    CompletionStatic,
    Conservativeness,
    Witness,
    mask_conservativeness,
    start_witness,
)
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite
from hulk_env.instance import Instance
from hulk_env.reference import naive_placement
from tests.strategies import make_chain


def tight_instance(memory_bytes, num_layers, data_parallel=1, schedule="gpipe", num_micro_batches=2, state=1e9, stash=1e8) -> Instance:
    """Equal layers on machines of the given memory (bytes), links 1 ms / 1 GB/s."""
    m = len(memory_bytes)
    machines = tuple(Machine(f"m{i}", f"r{i}", "custom", 1, 1e14, float(b)) for i, b in enumerate(memory_bytes))
    lat = np.full((m, m), 1e-3) - np.eye(m) * 1e-3
    bw = np.full((m, m), 1e9)
    np.fill_diagonal(bw, np.inf)
    cluster = Cluster(machines, lat, bw, name="tight")
    workload = make_chain(
        [1e12] * num_layers, [1e6] * num_layers, params=[state / 16] * num_layers, stash=[stash] * num_layers,
        data_parallel=data_parallel, schedule=schedule, num_micro_batches=num_micro_batches,
    )
    return Instance(cluster, workload, "tight")


def layer_need(instance: Instance) -> float:
    static = CompletionStatic.of(instance)
    k = static.stash_by_depth[1] if instance.workload.schedule == "1f1b" else instance.workload.num_micro_batches
    return float(static.state_bytes[0] + k * static.stash_bytes[0])


def assert_consistent(w: Witness) -> None:
    """The incremental bookkeeping equals a rebuild from scratch, and W fits."""
    s = w.static
    fresh = w.clone()
    fresh._rebuild()
    scale = float(s.capacity_bytes.max())
    np.testing.assert_allclose(w.slack, fresh.slack, rtol=0, atol=1e-9 * scale)
    assert float(w.slack.min()) >= 0
    used = cost.memory_use_bytes(s.instance.cluster, s.instance.workload, w.placement[None])[0]
    assert np.all(used <= s.instance.cluster.memory_bytes)
    if w.t == w.placement.size:
        return
    assert w.count == fresh.count and w.depth == fresh.depth and w.k == fresh.k
    assert w.partner == fresh.partner
    np.testing.assert_array_equal(w.outside, fresh.outside)
    np.testing.assert_allclose(w.replica_stash, fresh.replica_stash, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(w.partner_need, fresh.partner_need, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(w._open_state, fresh._open_state, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(w._open_stash, fresh._open_stash, rtol=0, atol=1e-9 * scale)
    assert w._max_partner_state >= fresh._max_partner_state
    assert w._max_partner_stash >= fresh._max_partner_stash
    assert w._headroom_lb <= float((w.slack - w.replica_stash).min()) + 1e-9 * scale


def random_walk(instance: Instance, seed: int, check_every_step: bool = True) -> Witness:
    """One episode of uniformly random allowed actions, checking the invariants."""
    rng = np.random.default_rng(seed)
    w = start_witness(instance)
    taken = []
    for t in range(instance.data_parallel * instance.num_layers):
        mask = w.allowed()
        own = int(w.placement.reshape(-1)[t])
        assert mask[own], "the witness's own move must always be allowed"
        a = int(rng.choice(np.flatnonzero(mask)))
        w.commit(a)
        taken.append(a)
        np.testing.assert_array_equal(w.placement.reshape(-1)[: t + 1], taken)  # W agrees with the prefix
        if check_every_step:
            assert_consistent(w)
    assert_consistent(w)
    return w


# ---- soundness and conservativeness, exhaustively ------------------------------------------------


def test_mask_is_sound_and_hides_little_on_tiny_v0():
    per_instance = [mask_conservativeness(inst) for inst in load_suite("tiny-v0")]
    total = sum(per_instance, Conservativeness(0, 0, 0, 0, 0))
    assert total.unsound == 0  # every allowed action has a memory-feasible completion
    assert total.states > 1000 and total.completable > total.states
    assert total.hidden_share < 0.01
    # The figures the module docstring states are the measured ones.
    doc = " ".join(completion.__doc__.split())
    shares = [c.hidden_share for c in per_instance]
    stated = (
        f"reach ({total.states:,}), it hides {total.hidden} of the {total.completable:,} truly completable "
        f"actions ({100 * total.hidden_share:.2f}%; per instance: mean {100 * np.mean(shares):.1f}%, "
        f"worst {100 * max(shares):.1f}%, {sum(1 for x in shares if x == 0)} instances with none hidden)"
    )
    assert stated in doc, f"update the docstring of hulk_env/completion.py: {stated}"
    from hulk_env.env import PlacementEnvV1

    env_doc = " ".join(PlacementEnvV1.__doc__.split())
    short = f"it hides {total.hidden} of {total.completable:,} truly completable actions ({100 * total.hidden_share:.2f}%"
    assert short in env_doc, f"update PlacementEnvV1's docstring: {short}"


# ---- never a dead end ------------------------------------------------------------------------------


@pytest.mark.parametrize("suite", ["hard-v0", "geo-v0"])
def test_random_walks_on_suites_never_dead_end(suite):
    for inst in load_suite(suite)[::3]:
        w = random_walk(inst, seed=1, check_every_step=False)
        assert w.t == inst.data_parallel * inst.num_layers


@st.composite
def tight_random_instances(draw):
    """Random chains on 2-4 machines with memory between 0.6x and 3x an even share."""
    m = draw(st.integers(2, 4))
    n = draw(st.integers(2, 6))
    d = draw(st.integers(1, 2))
    state = draw(st.lists(st.floats(1e8, 4e9), min_size=n, max_size=n))
    stash = draw(st.lists(st.floats(0.0, 1e9), min_size=n, max_size=n))
    mb = draw(st.sampled_from([1, 2, 4, 8]))
    schedule = draw(st.sampled_from(["gpipe", "1f1b"]))
    share = d * (sum(state) + (mb if schedule == "gpipe" else min(mb, m)) * sum(stash)) / m
    memory = draw(st.lists(st.floats(0.6, 3.0), min_size=m, max_size=m))
    machines = tuple(Machine(f"m{i}", f"r{i}", "custom", 1, 1e14, f * share) for i, f in enumerate(memory))
    lat = np.full((m, m), 1e-3) - np.eye(m) * 1e-3
    bw = np.full((m, m), 1e9)
    np.fill_diagonal(bw, np.inf)
    workload = make_chain(
        [1e12] * n, [1e6] * n, params=[x / 16 for x in state], stash=stash,
        data_parallel=d, schedule=schedule, num_micro_batches=mb,
    )
    return Instance(Cluster(machines, lat, bw, name="rand"), workload, "rand"), draw(st.integers(0, 2**31 - 1))


@settings(max_examples=60, deadline=None)
@given(tight_random_instances())
def test_bookkeeping_stays_exact_on_random_walks(case):
    instance, seed = case
    if naive_placement(instance) is None:
        return  # the env refuses such instances: no feasible start
    try:
        start_witness(instance)
    except HulkInputError:
        return  # the naive placement fills a machine to within the margin
    random_walk(instance, seed)


# ---- the repairs ------------------------------------------------------------------------------------


def test_exchange_lets_a_full_machine_take_the_layer():
    need = layer_need(tight_instance([1.0, 1.0], 4))
    inst = tight_instance([2.5 * need, 2.5 * need], 4)  # each machine holds two of the four layers
    w = start_witness(inst)
    assert w.placement.tolist() == [[0, 0, 1, 1]]
    assert w.allowed().tolist() == [True, True]
    assert w.repair(1) == EXCHANGE
    w.commit(1)
    assert w.placement.tolist() == [[1, 0, 1, 0]]  # layer 0 and machine 1's last layer traded places
    assert_consistent(w)


def test_relabel_lets_a_replica_take_a_later_replicas_machine():
    need = layer_need(tight_instance([1.0, 1.0], 2, data_parallel=2))
    inst = tight_instance([2.5 * need, 2.5 * need], 2, data_parallel=2)  # one replica per machine
    w = start_witness(inst)
    assert w.placement.tolist() == [[0, 0], [1, 1]]
    assert w.repair(1) == RELABEL
    w.commit(1)
    assert w.placement.tolist() == [[1, 1], [0, 0]]
    assert_consistent(w)


def test_swap_accounts_for_1f1b_stash_growth():
    # Three machines; a new machine raises the stash count of every machine of the replica.
    probe = tight_instance([1.0] * 3, 4, schedule="1f1b", num_micro_batches=4, stash=1e9)
    static = CompletionStatic.of(probe)
    state, stash = float(static.state_bytes[0]), float(static.stash_bytes[0])
    # machine 0 takes all four layers at depth 1 (4 state + 4 stash) with room for one more
    # micro-batch of stash on each layer only if it gives one layer away
    cap0 = 4 * state + 4 * stash + 3 * stash
    inst = tight_instance([cap0 / (1 - completion.MEMORY_RTOL), 1e15, 1e15], 4, schedule="1f1b", num_micro_batches=4, stash=1e9)
    w = start_witness(inst)
    assert w.placement.tolist() == [[0, 0, 0, 0]] and w.depth == 1
    assert w.repair(1) == SWAP  # layer 0 leaves machine 0: three layers at stash 2 fit
    w.commit(1)
    assert (w.depth, w.k) == (2, 2)
    assert_consistent(w)
    # A second new machine would need stash 3 on machine 0's three layers: 3 x 3 > 3 + 3 spare
    assert w.repair(0) == STAY or w.repair(0) == SWAP
    allowed = w.allowed()
    assert allowed[0] and allowed[1]
    assert_consistent(w)


def test_gpipe_swap_needs_room_for_all_micro_batches():
    need = layer_need(tight_instance([1.0, 1.0], 3, num_micro_batches=8))
    inst = tight_instance([3.5 * need, 0.9 * need], 3, num_micro_batches=8)
    w = start_witness(inst)
    assert w.allowed().tolist() == [True, False]  # machine 1 cannot hold even one layer


# ---- bad input --------------------------------------------------------------------------------------


def test_a_witness_that_does_not_fit_is_a_clear_error():
    need = layer_need(tight_instance([1.0, 1.0], 4))
    inst = tight_instance([2.5 * need, 2.5 * need], 4)
    with pytest.raises(HulkInputError, match="starting witness does not fit: machine 0"):
        Witness(CompletionStatic.of(inst), np.zeros((1, 4), dtype=int))
    with pytest.raises(ValueError, match="witness shape"):
        Witness(CompletionStatic.of(inst), np.zeros((2, 4), dtype=int))


def test_committing_a_masked_machine_is_refused():
    need = layer_need(tight_instance([1.0, 1.0], 3, num_micro_batches=8))
    inst = tight_instance([3.5 * need, 0.9 * need], 3, num_micro_batches=8)
    w = start_witness(inst)
    with pytest.raises(ValueError, match="machine 1 is not allowed for slot 0"):
        w.commit(1)
    w.commit(0)  # still usable
    assert w.t == 1


def test_start_witness_explains_an_instance_that_cannot_fit():
    inst = tight_instance([1e6, 1e6], 3)
    with pytest.raises(HulkInputError, match=re.escape("needs at least")):
        start_witness(inst)


# ---- plan settings (tensor parallel, ZeRO): every machine holds a slot at its own rates --------


SETTINGS_V0 = 8  # instances of the settings-v0 suite


def settings_instances():
    from hulk_env.evaluation import suite_instance

    return [suite_instance("settings-v0", i) for i in range(SETTINGS_V0)]


def test_plan_slot_rates_sum_to_the_cost_models_memory():
    """Summed over a placement's slots, the per-machine rates give cost.memory_use_bytes exactly
    (dense models), on settings-v0/2 whose 8-GPU machines hold d_m = 2 tensor-parallel groups."""
    from hulk_env.evaluation import suite_instance
    from hulk_env.feasibility import plan_slot_memory, stash_count

    inst = suite_instance("settings-v0", 2)
    c, w = inst.cluster, inst.workload
    rates = plan_slot_memory(c, w, experts="lower")
    assert rates is not None and plan_slot_memory(c, w.with_training(tensor_parallel=0, zero=0, sync="every-step"), experts="lower") is None
    assert len(set(rates.state_bytes[:, 1].tolist())) > 1  # machines differ: d_m copies
    rng = np.random.default_rng(0)
    p = rng.integers(0, c.num_machines, size=(w.data_parallel, w.num_layers))
    expect = np.zeros(c.num_machines)
    for row in p:
        k = stash_count(inst, len(set(row.tolist())))
        np.add.at(expect, row, rates.state_bytes[row, np.arange(w.num_layers)] + k * rates.stash_bytes[row, np.arange(w.num_layers)])
    np.testing.assert_allclose(cost.memory_use_bytes(c, w, p[None])[0], expect, rtol=1e-12)


def test_default_settings_keep_the_per_layer_witness():
    inst = load_suite("tiny-v0")[0]
    static = CompletionStatic.of(inst)
    assert static.state_ml is None and not static.per_machine
    assert type(start_witness(inst)) is Witness


@pytest.mark.parametrize("index", range(SETTINGS_V0))
def test_plan_witness_bookkeeping_stays_exact_on_settings_v0(index):
    inst = settings_instances()[index]
    w = random_walk(inst, seed=index, check_every_step=index % 2 == 0)
    assert isinstance(w, completion.PlanWitness)
    assert cost.evaluate(inst.cluster, inst.workload, w.placement).memory_feasible


def masked_episodes(env_cls, instances, seeds) -> list[tuple[str, int, bool, bool]]:
    """(instance, seed, dead end, memory-feasible by the cost model) of random masked episodes."""
    from hulk_env.generators import InstanceListGenerator

    env = env_cls(generator=InstanceListGenerator(tuple(instances)))
    out = []
    for inst in instances:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            obs, _ = env.reset(options={"instance": inst})
            done = False
            while not done:
                valid = np.flatnonzero(obs["action_mask"])
                # seed 0: always the highest-index allowed machine (the walk that once overflowed), else random
                obs, _, done, _, info = env.step(int(valid[-1]) if seed == 0 else int(rng.choice(valid)))
            p = np.array(info["placement"])
            feasible = not info["dead_end"] and bool(cost.evaluate(inst.cluster, inst.workload, p).memory_feasible)
            out.append((inst.instance_id, seed, bool(info["dead_end"]), feasible))
    return out


def test_v1_episodes_on_settings_v0_never_dead_end_and_fit():
    from hulk_env.env import PlacementEnvV1

    runs = masked_episodes(PlacementEnvV1, settings_instances(), range(3))
    assert [r for r in runs if r[2] or not r[3]] == []


def test_v0_episodes_on_settings_v0_fit_when_they_end():
    from hulk_env.env import PlacementEnv

    runs = masked_episodes(PlacementEnv, settings_instances(), range(3))
    assert [r for r in runs if not r[2] and not r[3]] == []  # v0 may dead-end, never overfill


@pytest.mark.slow
def test_plan_masks_fit_on_many_seeds_and_drawn_tight_plan_instances():
    from hulk_env.env import PlacementEnv, PlacementEnvV1
    from hulk_env.generators import make_generator
    from hulk_env.parallelism import plan_active

    gen = make_generator(
        "random", plan_settings=True, hidden=(2048, 4096, 5120), num_blocks=(8, 24), data_parallel=(2, 4),
        num_micro_batches=(8, 16), micro_batch_size=(1, 2, 4, 8), num_machines=(4, 10),
    )
    rng = np.random.default_rng(7)
    drawn = [inst for inst in (gen(rng) for _ in range(40)) if plan_active(inst.workload)]
    assert len(drawn) > 20
    for inst in drawn[:15]:
        random_walk(inst, seed=1)
    instances = settings_instances() + drawn
    v1 = masked_episodes(PlacementEnvV1, instances, range(6))
    assert [r for r in v1 if r[2] or not r[3]] == []
    v0 = masked_episodes(PlacementEnv, instances, range(6))
    assert [r for r in v0 if not r[2] and not r[3]] == []


def small_plan_instances(trials: int) -> list[Instance]:
    """Random 3-machine, 2 x 4-slot instances with 1/2/4-GPU machines and drawn tensor parallel,
    ZeRO and micro-batch size, kept when the naive placement fits (as the generators keep them)."""
    from hulk_env.generators import naive_fits_memory

    rng = np.random.default_rng(0)
    out = []
    for trial in range(trials):
        m, n_layers = 3, 4
        gpus, mem = rng.choice([1, 2, 4], size=m), rng.uniform(4e9, 12e9, size=m)
        machines = tuple(Machine(f"m{i}", f"r{i}", "custom", int(g), 1e14, float(b)) for i, (g, b) in enumerate(zip(gpus, mem, strict=True)))
        lat = np.full((m, m), 1e-3) - np.eye(m) * 1e-3
        bw = np.full((m, m), 1e9)
        np.fill_diagonal(bw, np.inf)
        workload = make_chain(
            [1e12] * n_layers, [1e6] * n_layers, params=list(rng.uniform(0.5e9, 1.5e9, n_layers) / 16),
            stash=list(rng.uniform(0.5e8, 3e8, n_layers)), data_parallel=2,
            schedule=str(rng.choice(["1f1b", "gpipe"])), num_micro_batches=int(rng.choice([2, 4])),
        ).with_training(
            tensor_parallel=int(rng.choice([1, 2])), zero=int(rng.choice([0, 1, 2, 3])), micro_batch_size=int(rng.choice([1, 2, 3])),
        )  # fmt: skip
        inst = Instance(Cluster(machines, lat, bw, name="plan"), workload, f"plan-{trial}")
        if naive_fits_memory(inst):
            out.append(inst)
    return out


def plan_conservativeness(trials: int) -> Conservativeness:
    instances = small_plan_instances(trials)
    assert all(type(start_witness(inst)) is completion.PlanWitness for inst in instances)
    per_instance = [mask_conservativeness(inst) for inst in instances]
    return sum(per_instance, Conservativeness(0, 0, 0, 0, 0))


def test_plan_mask_is_sound_exhaustively_on_small_plan_instances():
    total = plan_conservativeness(10)
    assert total.states > 1000 and total.unsound == 0
    assert total.hidden_share < 0.01


@pytest.mark.slow
def test_plan_mask_is_sound_and_hides_little_on_more_small_plan_instances():
    # 40 draws keep 29 instances: 83,559 states, 136 of 234,794 completable actions hidden (0.06%)
    total = plan_conservativeness(40)
    assert total.unsound == 0 and total.states > 50_000
    assert total.hidden_share < 0.005


def test_adopt_takes_a_fitting_completion_and_refuses_others():
    """adopt(): a completion that keeps the placed slots and fits becomes W (its machines allowed,
    the bookkeeping exact); one that disagrees or overflows leaves W as it was."""
    need = layer_need(tight_instance([1.0, 1.0, 1.0], 4))
    inst = tight_instance([2.5 * need, 2.5 * need, 4.5 * need], 4)
    w = start_witness(inst)
    w.commit(int(w.own_machine()))
    placed = int(w.placement[0, 0])
    before = (w.placement.copy(), w.allowed().copy())
    other = 1 - placed if placed < 2 else 0
    assert not w.adopt(np.array([[other, 2, 2, 2]]))  # changes the placed slot
    assert not w.adopt(np.array([[placed, placed, placed, placed]]))  # four layers on a machine for two
    assert (w.placement == before[0]).all() and (w.allowed() == before[1]).all()
    plan = np.array([[placed, 2, 2, 2]])
    assert w.adopt(plan)
    assert (w.placement == plan).all() and w.own_machine() == 2
    assert_consistent(w)
    for layer in (1, 2, 3):  # the adopted completion can be followed to the end
        assert w.allowed()[plan[0, layer]]
        w.commit(int(plan[0, layer]))
        assert_consistent(w) if layer < 3 else None


@settings(max_examples=60, deadline=None)
@given(tight_random_instances(), st.data())
def test_nearest_first_replan_keeps_the_prefix_and_fits(case, data):
    """The re-plan with a walk order (``near``) keeps the placed slots, puts slot t on the chosen
    machine and, whenever it returns a placement, that placement fits by the cost model."""
    instance, _ = case
    start = naive_placement(instance)
    if start is None:
        return
    static = completion.CompletionStatic.of(instance)
    m, n_layers = static.num_machines, static.num_layers
    t = data.draw(st.integers(0, static.data_parallel * n_layers - 1))
    a = data.draw(st.integers(0, m - 1))
    placement = np.asarray(start, dtype=np.int64).copy()
    placement.reshape(-1)[t:] = -1
    placed_before = static.replicas_bytes(start, t // n_layers)
    out = completion.replan(static, placement, t, a, placed_before, near=lambda here: np.roll(np.arange(m), -here))
    if out is None:
        return
    assert np.array_equal(out.reshape(-1)[:t], np.asarray(start).reshape(-1)[:t])
    assert out.reshape(-1)[t] == a
    assert bool(cost.iteration_times(instance.cluster, instance.workload, out[None]).memory_feasible[0])
