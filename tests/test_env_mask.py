"""The action mask is exact: a placement is reachable through valid actions iff it fits in memory."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.env import MEMORY_RTOL, PlacementEnv
from hulk_env.generators import RandomGeoGenerator, ToyGenerator, enumerate_placements
from hulk_env.testing import replay


def reachable(env: PlacementEnv, instance, placement: np.ndarray) -> bool:
    """Whether every step of ``placement`` is a valid action (penalty mode: nothing remapped)."""
    _, info = env.reset(options={"instance": instance})
    for t, machine in enumerate(placement.reshape(-1)):
        if not info["action_mask"][machine]:
            return False
        _, _, terminated, _, info = env.step(int(machine))
        if terminated and t + 1 < placement.size:
            return False  # a dead end before the last slot
    return True


def test_mask_accepts_exactly_the_memory_feasible_placements():
    gen = ToyGenerator(max_placements=512)
    env = PlacementEnv(generator=gen, invalid_action="penalty")
    rng = np.random.default_rng(11)
    feasible_seen = infeasible_seen = grown = 0
    for _ in range(30):
        inst = gen(rng)
        c, w = inst.cluster, inst.workload
        m, d, n = inst.num_machines, inst.data_parallel, inst.num_layers
        every = enumerate_placements(np.arange(m ** (d * n)), m, d, n)
        use = cost.memory_use_bytes(c, w, every)
        feasible = np.all(use <= c.memory_bytes, axis=1)
        margin = np.min(np.abs(use - c.memory_bytes) / c.memory_bytes, axis=1)
        for placement, fits, gap in zip(every, feasible, margin, strict=True):
            if gap <= 10 * MEMORY_RTOL:
                continue  # on the rounding boundary the mask is conservative by design
            assert reachable(env, inst, placement) == fits, (inst.instance_id, placement.tolist())
        feasible_seen += int(feasible.sum())
        infeasible_seen += int((~feasible).sum())
        if w.schedule == "1f1b":
            # placements that fit with one stashed micro-batch but not at their real depth
            one = cost.memory_use_bytes(c, w.with_training(num_micro_batches=1), every)
            grown += int(np.sum(np.all(one <= c.memory_bytes, axis=1) & ~feasible))
    assert feasible_seen > 0 and infeasible_seen > 0
    assert grown > 0  # the 1F1B stash-growth rule was exercised


def test_the_toy_optimum_is_reachable_and_beats_random_play():
    gen = ToyGenerator()
    env = PlacementEnv(generator=gen)
    rng = np.random.default_rng(5)
    for _ in range(5):
        inst = gen(rng)
        best, best_s = gen.optimum(inst)
        assert reachable(PlacementEnv(generator=gen, invalid_action="penalty"), inst, best)
        roll = replay(env, best.reshape(-1).tolist(), options={"instance": inst})
        assert roll.completed
        assert roll.iteration_time_s == pytest.approx(best_s, rel=1e-12)
        for _ in range(20):
            _, info = env.reset(options={"instance": inst})
            done = False
            while not done:
                valid = np.flatnonzero(env.action_masks())
                _, _, done, _, info = env.step(int(rng.choice(valid)))
            if not info.get("dead_end"):
                assert info["iteration_time_s"] >= best_s * (1 - 1e-12)


def test_single_placement_fast_path_of_the_cost_model_is_bit_identical():
    # The env evaluates one placement per episode through cost.first_micro_batch_s' scalar path.
    gen = ToyGenerator(num_layers=(3, 5), data_parallel=(2,), max_placements=10**9)
    rng = np.random.default_rng(8)
    for _ in range(30):
        inst = gen(rng)
        batch = rng.integers(0, inst.num_machines, (3, inst.data_parallel, inst.num_layers))
        together = cost.first_micro_batch_s(inst.cluster, inst.workload, batch)
        alone = np.concatenate([cost.first_micro_batch_s(inst.cluster, inst.workload, p[None]) for p in batch])
        np.testing.assert_array_equal(alone, together)


def test_one_placement_breakdown_is_bit_identical_to_the_batch_one():
    """The env's episode end uses cost.evaluate_one: every field as evaluate_batch gives it, to
    the last bit, on both schedules, 1-4 replicas, branching layer graphs, machines left empty,
    everything on one machine (a zero link bottleneck) and dp rings."""
    rng = np.random.default_rng(11)
    instances = [ToyGenerator(max_placements=10**12)(rng) for _ in range(20)]
    instances += [RandomGeoGenerator(num_machines=(4, 24), data_parallel=(1, 4))(rng) for _ in range(20)]
    schedules = set()
    for inst in instances:
        c, w = inst.cluster, inst.workload
        schedules.add(w.schedule)
        for spread in (1, 2, c.num_machines):
            placement = rng.integers(0, spread, (w.data_parallel, w.num_layers))
            with cost.count_evals() as counter:
                one = cost.evaluate_one(c, w, placement)
            assert counter.evals == 1  # honest cost_evals
            batch = cost.evaluate_batch(c, w, placement[None], dense_links=True)
            for name, value in one._asdict().items():
                if name == "link_s_per_mb":
                    continue  # left out by design
                np.testing.assert_array_equal(np.asarray(value), getattr(batch, name)[0], err_msg=name)
            assert one.to_dict() == cost.evaluate(c, w, placement).to_dict()
    assert schedules == {"1f1b", "gpipe"}


def test_env_memory_bookkeeping_matches_the_cost_model_at_every_step():
    """The env's incremental ``used_bytes`` (what the mask reads) and the cost model's memory of
    the partial placement (:func:`cost.placed_memory_bytes`) are two implementations of one rule."""
    env = PlacementEnv(generator=ToyGenerator(data_parallel=(2,)))
    rng = np.random.default_rng(3)
    steps = 0
    for episode in range(20):
        obs, _ = env.reset(seed=episode)
        inst = env.instance
        done = False
        while not done:
            s = env.state
            expected = cost.placed_memory_bytes(inst.cluster, inst.workload, s.placement)
            np.testing.assert_allclose(s.used_bytes, expected, rtol=1e-12, atol=1.0)
            obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            done, steps = terminated or truncated, steps + 1
        if not env.state.dead_end:
            complete = cost.memory_use_bytes(inst.cluster, inst.workload, env.placement[None])[0]
            np.testing.assert_allclose(cost.placed_memory_bytes(inst.cluster, inst.workload, env.placement), complete)
    assert steps > 100
