"""Stay-completion shaping and the lookahead observation (agents.training.shaping)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agents.training.shaping import (
    LOOKAHEAD_KEY,
    StayLookahead,
    candidate_completions,
    pipeline_options,
    stay_completion,
)
from hulk_env import cost
from hulk_env.env import PlacementEnv, PlacementEnvV1
from hulk_env.errors import HulkInputError
from hulk_env.generators import ToyGenerator


def test_stay_completion_and_candidates():
    placement = np.array([[3, 1, -1, -1], [-1, -1, -1, -1]])
    assert stay_completion(placement, 2).tolist() == [[3, 1, 1, 1]]
    assert stay_completion(np.full((2, 4), -1), 0).shape == (0, 4)
    full = np.array([[3, 1, 1, 2], [-1, -1, -1, -1]])
    assert stay_completion(full, 4).tolist() == [[3, 1, 1, 2]]  # replica 1 not opened yet
    cands = candidate_completions(placement, 2, np.array([0, 5]))
    assert cands.tolist() == [[[3, 1, 0, 0]], [[3, 1, 5, 5]]]
    cands = candidate_completions(full, 4, np.array([7]))
    assert cands.tolist() == [[[3, 1, 1, 2], [7, 7, 7, 7]]]


def test_pipeline_options():
    """Replica 0: stay, later replicas copy it; replica r > 0: stay or follow replica r - 1."""
    placement = np.array([[3, 1, -1, -1], [-1, -1, -1, -1], [-1, -1, -1, -1]])
    out = pipeline_options(placement, 2, np.array([0, 5]))
    assert out.shape == (2, 1, 3, 4)
    assert out[1, 0].tolist() == [[3, 1, 5, 5]] * 3
    placement = np.array([[3, 1, 1, 2], [4, -1, -1, -1], [-1, -1, -1, -1]])
    out = pipeline_options(placement, 5, np.array([7]))
    assert out.shape == (1, 2, 3, 4)
    assert out[0, 0].tolist() == [[3, 1, 1, 2], [4, 7, 7, 7], [4, 7, 7, 7]]  # stay
    assert out[0, 1].tolist() == [[3, 1, 1, 2], [4, 7, 1, 2], [4, 7, 1, 2]]  # ring
    assert pipeline_options(placement, 7, np.array([7])).shape == (1, 1, 3, 4)  # last layer: no ring
    with pytest.raises(HulkInputError, match="completion"):
        StayLookahead(PlacementEnv(generator=ToyGenerator(), reward="terminal"), completion="nope")


@pytest.mark.parametrize(
    ("shape", "completion"),
    [(True, "stay"), (False, "stay"), pytest.param(True, "pipeline", marks=pytest.mark.slow), pytest.param(True, "split", marks=pytest.mark.slow)],
)
def test_returns_equal_the_terminal_reward(shape, completion):
    """Over many fresh toy instances (D in {1, 2}): the shaped return is the env's terminal
    return; the lookahead gain is 0 for the best valid machine and masked ones, <= 0 elsewhere;
    a machine whose stay completion fits is never one whose completion breaks memory."""
    base = PlacementEnvV1 if completion != "stay" else PlacementEnv  # v1 keeps the witness the re-plan reads
    env = StayLookahead(base(generator=ToyGenerator(), reward="terminal"), shape=shape, completion=completion)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    for _ in range(300):
        total, done = 0.0, False
        while not done:
            mask = env.action_masks()
            look, fits = obs[LOOKAHEAD_KEY][:, 0], obs[LOOKAHEAD_KEY][:, 1]
            assert obs in env.observation_space
            assert np.all(look[~mask] == 0) and np.all(look <= 0) and look[mask].max() == 0
            assert np.all(fits[~mask] == 0) and set(np.unique(fits)) <= {0.0, 1.0}
            a = int(rng.choice(np.flatnonzero(mask)))
            obs, reward, terminated, truncated, info = env.step(a)
            total += reward
            done = terminated or truncated
        inst = env.unwrapped.instance
        if info.get("dead_end"):
            expected = -6.0
        else:
            t = cost.iteration_time(inst.cluster, inst.workload, np.array(info["placement"]))
            expected = max(math.log(info["reference_time_s"] / t), -5.0)
        assert total == pytest.approx(expected, abs=1e-9)
        obs, _ = env.reset()


@pytest.mark.parametrize("completion", ["stay", *(pytest.param(c, marks=pytest.mark.slow) for c in ("pipeline", "split"))])
def test_lookahead_is_the_shaped_reward_up_to_a_constant(completion):
    base = PlacementEnvV1 if completion != "stay" else PlacementEnv
    env = StayLookahead(base(generator=ToyGenerator(), reward="terminal"), completion=completion)
    obs, _ = env.reset(seed=4)
    rng = np.random.default_rng(1)
    for _ in range(40):
        mask = env.action_masks()
        valid = np.flatnonzero(mask)
        if len(valid) < 2:
            obs, _, terminated, truncated, _ = env.step(int(valid[0]))
            if terminated or truncated:
                obs, _ = env.reset()
            continue
        rewards = []
        for a in valid[:2]:  # the shaped reward of two actions from the same state
            probe = StayLookahead(base(generator=ToyGenerator(), reward="terminal"), completion=completion)
            probe.reset(options={"instance": env.unwrapped.instance})
            for past in env.unwrapped.placement.reshape(-1)[: env.unwrapped.state.t]:
                probe.step(int(past))
            _, r, terminated, _, _ = probe.step(int(a))
            rewards.append(None if terminated else r)
        if None not in rewards and min(obs[LOOKAHEAD_KEY][valid[:2], 0]) > -3.0:  # not clipped
            look = obs[LOOKAHEAD_KEY][:, 0]
            assert rewards[0] - rewards[1] == pytest.approx(look[valid[0]] - look[valid[1]], abs=1e-5)
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(valid)))
        if terminated or truncated:
            obs, _ = env.reset()


def test_pipeline_completion_sees_memory_on_a_memory_tight_instance():
    """LLaMA-65B on 12 machines: no machine holds a whole replica, so every stay completion
    overflows (the stay lookahead ranks machines by times that ignore memory); the pipeline
    completion re-plans from each machine and finds completions that fit."""
    from agents.benchmarks.bench_learn import bench_instance
    from agents.decision.inference import instance_env

    inst = bench_instance("memory-tight")
    stay, _ = instance_env(inst, True).reset(options={"instance": inst})
    pipe, _ = instance_env(inst, "pipeline").reset(options={"instance": inst})
    assert stay[LOOKAHEAD_KEY][:, 1].sum() == 0
    assert pipe[LOOKAHEAD_KEY][:, 1].sum() >= 6


def test_nearest_first_replan_keeps_the_pipeline_in_one_city():
    """From latency-chain-dp's first machine on the memory-tight instance, the roomiest-first
    re-plan sends the middle stage to another continent (3.7x chain-dp's time); the nearest-first
    one stays in the city (chain-dp's machines, within 5% of its time), so the lookahead that
    takes the faster of the two rates that start as what it is worth."""
    from agents.benchmarks.bench_learn import bench_instance
    from agents.training.shaping import NearestWalks
    from hulk_env.baselines import latency_chain_dp
    from hulk_env.completion import CompletionStatic, replan

    inst = bench_instance("memory-tight")
    chain = np.asarray(latency_chain_dp(inst).placement)
    start = int(chain[0, 0])
    static = CompletionStatic.of(inst)
    empty = np.full((1, static.num_layers), -1)
    plans = [replan(static, empty, 0, start, np.zeros(static.num_machines), near=near) for near in (None, NearestWalks(inst))]
    times = cost.iteration_times(inst.cluster, inst.workload, np.stack(plans))
    assert bool(np.all(times.memory_feasible))
    chain_s = cost.iteration_time(inst.cluster, inst.workload, chain)
    roomiest_s, nearest_s = times.iteration_time_s
    assert set(plans[1].ravel().tolist()) == set(chain.ravel().tolist())
    assert nearest_s <= 1.05 * chain_s < roomiest_s / 2


def test_lookahead_on_the_memory_tight_instance_rates_chain_dps_start_best():
    """The pipeline lookahead's first step: latency-chain-dp's first machine gets gain 0 or
    within 5% of the best (it was rated 1.70x slower than the best, gain -0.53, when the
    re-plan filled the roomiest machines)."""
    from agents.benchmarks.bench_learn import bench_instance
    from agents.decision.inference import instance_env
    from hulk_env.baselines import latency_chain_dp

    inst = bench_instance("memory-tight")
    start = int(np.asarray(latency_chain_dp(inst).placement)[0, 0])
    obs, _ = instance_env(inst, "pipeline").reset(options={"instance": inst})
    assert obs[LOOKAHEAD_KEY][start, 1] == 1.0
    assert obs[LOOKAHEAD_KEY][start, 0] >= math.log(1 / 1.05)


def test_split_options_are_balanced_contiguous_pipelines():
    """Every valid split option keeps the placed slots, puts slot t on its candidate, cuts the
    rest of the replica into s contiguous stages on distinct machines the replica did not use
    (the candidate's stage first, continuing the predecessor's run when it is that machine),
    and the later replica copies it."""
    from agents.benchmarks.bench_learn import bench_instance
    from agents.training.shaping import NearestWalks, split_options

    inst = bench_instance("multi-replica")
    w = inst.workload
    n_layers = w.num_layers
    placement = np.full((2, n_layers), -1)
    placement[0, :5] = [3, 3, 7, 7, 7]
    machines = np.arange(inst.cluster.num_machines)
    out, valid = split_options(placement, 5, machines, NearestWalks(inst), inst.cluster.flops, cost.train_flops(w))
    assert out.shape == (len(machines), 3, 2, n_layers) and valid[:, 0].sum() >= len(machines) - 2
    for k, s in zip(*np.nonzero(valid), strict=True):
        row = out[k, s, 0]
        assert np.array_equal(row[:5], [3, 3, 7, 7, 7]) and row[5] == machines[k]
        assert np.array_equal(out[k, s, 1], row)
        first = 2 if machines[k] == 7 else 5
        stages = [int(m) for i, m in enumerate(row[first:]) if i == 0 or m != row[first + i - 1]]
        assert 2 <= len(stages) <= s + 2 and len(set(stages)) == len(stages)  # contiguous, distinct
        assert not set(stages[1:]) & {3, 7}
        # balanced: no stage runs longer than the perfect balance plus one layer on the slowest machine
        work = cost.train_flops(w)[first:]
        rate = inst.cluster.flops[stages]
        stage_s = np.array([work[row[first:] == m].sum() for m in stages]) / rate
        assert stage_s.max() <= work.sum() / rate.sum() + work.max() / rate.min() + 1e-12


@pytest.mark.parametrize("seed", range(40))
def test_split_cut_has_the_smallest_bottleneck_of_any_contiguous_cut(seed):
    """On random layer work and machine speeds, each valid split option's slowest stage (work /
    FLOP/s) is within 0.1% of the best over every contiguous cut of its machines in walk order
    (enumerated; a middle machine may hold nothing, the first holds at least ``min_first``):
    the cut that rounding each machine's FLOP/s share into whole layers misses."""
    import itertools

    from agents.training.shaping import _balanced_rows

    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(4, 12)), 3
    work = rng.uniform(0.1, 5.0, n) * (rng.random(n) < 0.9)  # some layers without work
    flops = rng.choice([1.0, 2.0, 8.0, 9.5], size=6)
    firsts = rng.choice(6, k, replace=False)
    nexts = np.stack([rng.choice(np.setdiff1d(np.arange(6), [f]), 3, replace=False) for f in firsts])
    min_first = int(rng.integers(1, 3))
    rows, valid = _balanced_rows(firsts, nexts, np.ones_like(nexts, dtype=bool), flops, np.cumsum(work), min_first)
    # a row whose last machine would hold nothing is the shorter row again: not valid
    assert all(rows[i, s, -1] != nexts[i, s] for i, s in zip(*np.nonzero(~valid), strict=True))
    for i, s in zip(*np.nonzero(valid), strict=True):
        machines = [firsts[i], *nexts[i, : s + 1]]
        got = rows[i, s]
        assert got[0] == machines[0] and got[-1] == machines[-1] and (got == machines[0]).sum() >= min_first
        assert np.all(np.diff([machines.index(m) for m in got]) >= 0)  # contiguous, in walk order
        bottleneck = max(work[got == m].sum() / flops[m] for m in machines)
        best = min(
            max(work[a:b].sum() / flops[m] for m, a, b in zip(machines, (0, *cuts), (*cuts, n), strict=True))
            for cuts in itertools.combinations_with_replacement(range(min_first, n), s + 1)
        )
        assert bottleneck <= best * 1.001 + 1e-12


def test_split_options_on_fewer_machines_than_stages():
    """Two machines: at most two stages (one split option per candidate); one machine: none."""
    from agents.training.shaping import split_options

    class Walks:
        def __init__(self, m: int) -> None:
            self.m = m

        def matrix(self) -> np.ndarray:
            return np.array([np.roll(np.arange(self.m), -a) for a in range(self.m)])

    placement = np.full((1, 6), -1)
    out, valid = split_options(placement, 0, np.arange(2), Walks(2), np.array([1e14, 2e14]), np.ones(6))
    assert out.shape == (2, 1, 1, 6) and valid.all()
    assert out[0, 0, 0].tolist() == [0, 0, 1, 1, 1, 1]  # a third of the work on the machine with a third of the FLOP/s
    out, valid = split_options(placement, 0, np.arange(1), Walks(1), np.array([1e14]), np.ones(6))
    assert out.shape == (1, 0, 1, 6) and valid.shape == (1, 0)


def test_witness_shaping_pays_nothing_for_following_the_plan_and_keeps_the_return():
    """env.completion=witness (shaping only): with the plan shown, an episode that follows the
    plan is paid 0 on every step after the plan is adopted (the witness is the plan), the shaped
    return is the terminal reward, and leaving the plan once is paid on that step what the
    leaving changed in the witness's time; no lookahead with it."""
    from agents.decision.plan import PLAN_KEY, PlanHint
    from hulk_env.evaluation.suites import suite_instance
    from hulk_env.generators import InstanceListGenerator

    inst = suite_instance("val-x-v0", 1)  # 8 machines, 4 replicas: a plan that fits
    env = PlanHint(StayLookahead(PlacementEnvV1(generator=InstanceListGenerator((inst,)), reward="terminal"),
                                 shape=True, lookahead=False, completion="witness"))  # fmt: skip
    for leave_at in (None, 5):
        obs, _ = env.reset(seed=0)
        obs, reward, *_ = env.step(int(np.argmax(env.action_masks())))  # first slot: any allowed start
        rewards, done, t = [reward], False, 1
        while not done:
            mask = env.action_masks()
            follow = int(np.argmax(obs[PLAN_KEY][: len(mask)] * mask)) if obs[PLAN_KEY].any() else int(np.argmax(mask))
            other = [m for m in np.flatnonzero(mask) if m != follow]
            a = other[0] if t == leave_at and other else follow
            obs, reward, terminated, truncated, info = env.step(a)
            rewards.append(reward)
            done, t = terminated or truncated, t + 1
        final = cost.iteration_time(inst.cluster, inst.workload, np.array(info["placement"]))
        assert sum(rewards) == pytest.approx(math.log(info["reference_time_s"] / final), abs=1e-9)
        later = [r for i, r in enumerate(rewards[2:-1], start=2) if i != leave_at]
        assert later and np.allclose(later, 0.0, atol=1e-12)  # following the adopted plan: no pay
        if leave_at is not None:
            assert abs(rewards[leave_at]) > 1e-6  # leaving it is paid for
    with pytest.raises(HulkInputError, match="shapes the reward only"):
        StayLookahead(PlacementEnvV1(generator=InstanceListGenerator((inst,)), reward="terminal"), lookahead=True, completion="witness")
