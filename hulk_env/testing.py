"""Shipped checkers: random masked rollouts, replays, placement validity and an env fuzzer.

For users who extend the env (new generators, rewards) and for the test suite::

    from hulk_env.testing import fuzz_env
    report = fuzz_env(PlacementEnv(generator="toy"), episodes=500, seed=0)
    assert report.infeasible == 0 and not report.problems

Exceptions raised by the env propagate: a crash is a finding, not a statistic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from hulk_env import cost
from hulk_env.instance import Instance
from hulk_env.units import GB


class Rollout(NamedTuple):
    """One episode.

    Attributes:
        instance_id: the instance played.
        actions: the actions sent to ``step``.
        rewards: the rewards received.
        terminated: the last step's ``terminated``.
        truncated: the last step's ``truncated``.
        dead_end: the episode ended in a dead end.
        placement: ``[D, L]`` final placement (``-1`` unplaced).
        iteration_time_s: the completed placement's time (``None`` if not completed).
        info: the last step's info.
    """

    instance_id: str
    actions: list[int]
    rewards: list[float]
    terminated: bool
    truncated: bool
    dead_end: bool
    placement: np.ndarray
    iteration_time_s: float | None
    info: dict[str, Any]

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))

    @property
    def completed(self) -> bool:
        """All slots placed (not a dead end, not truncated)."""
        return self.iteration_time_s is not None


def _run(
    env: gym.Env,
    choose,
    seed: int | None,
    options: dict | None,
    check_spaces: bool,
    max_steps: int,
) -> Rollout:
    obs, info = env.reset(seed=seed, options=options)
    instance_id = info["instance_id"]
    actions: list[int] = []
    rewards: list[float] = []
    terminated = truncated = False
    for step in range(max_steps):
        if check_spaces:
            _check_observation(env, obs, info)
        action = choose(step, obs)
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        rewards.append(float(reward))
        if terminated or truncated:
            break
    if check_spaces:
        _check_observation(env, obs, info)
    return Rollout(
        instance_id=instance_id,
        actions=actions,
        rewards=rewards,
        terminated=bool(terminated),
        truncated=bool(truncated),
        dead_end=bool(info.get("dead_end", False)),
        placement=np.asarray(info.get("placement", env.unwrapped.placement)),
        iteration_time_s=info.get("iteration_time_s"),
        info=info,
    )


def _check_observation(env: gym.Env, obs: dict, info: dict) -> None:
    """The observation lies in the space and the three views of the mask agree."""
    if not env.observation_space.contains(obs):
        bad = [k for k, space in env.observation_space.spaces.items() if not space.contains(obs[k])]
        raise AssertionError(f"observation keys {bad} are outside the observation space")
    mask = env.unwrapped.action_masks()
    if not np.array_equal(obs["action_mask"] > 0, mask) or not np.array_equal(info["action_mask"], mask):
        raise AssertionError("obs['action_mask'], info['action_mask'] and action_masks() differ")


def random_masked_rollout(
    env: gym.Env,
    rng: np.random.Generator,
    seed: int | None = None,
    options: dict | None = None,
    check_spaces: bool = True,
) -> Rollout:
    """Play one episode choosing uniformly among the valid machines of ``obs["action_mask"]``.

    Args:
        env: a :class:`hulk_env.env.PlacementEnv` (wrapped or not).
        rng: chooses the actions.
        seed: passed to ``reset``.
        options: passed to ``reset`` (e.g. ``{"instance": inst}``).
        check_spaces: check every observation against the space and the mask views.
    """

    def choose(step: int, obs: dict) -> int:
        valid = np.flatnonzero(obs["action_mask"])
        return int(valid[rng.integers(len(valid))])

    limit = env.unwrapped.max_layers * 2 + 1  # bounded even in penalty mode
    return _run(env, choose, seed, options, check_spaces, limit)


def replay(
    env: gym.Env,
    actions: list[int],
    seed: int | None = None,
    options: dict | None = None,
    check_spaces: bool = True,
) -> Rollout:
    """Play ``actions`` in order after ``reset(seed, options)``; stops early if the episode ends."""
    return _run(env, lambda step, obs: int(actions[step]), seed, options, check_spaces, len(actions))


def placement_problems(instance: Instance, placement: np.ndarray) -> list[str]:
    """What is wrong with a complete placement ``[D, L]`` (empty list: valid).

    Checks shape, integer machine indices in range, and memory (``cost.memory_use_bytes``).
    """
    c, w = instance.cluster, instance.workload
    arr = np.asarray(placement)
    expected = (w.data_parallel, w.num_layers)
    if arr.shape != expected:
        return [f"placement has shape {arr.shape}, expected {expected}"]
    if arr.dtype.kind not in "iu":
        return [f"placement has dtype {arr.dtype}, expected integers"]
    if arr.min() < 0 or arr.max() >= c.num_machines:
        return [f"machine indices must lie in 0..{c.num_machines - 1}, got {arr.min()}..{arr.max()}"]
    used = cost.memory_use_bytes(c, w, arr[None].astype(np.int64))[0]
    return [
        f"machine '{c.machines[i].name}' uses {used[i] / GB:.3f} GB of {c.memory_bytes[i] / GB:.3f} GB"
        for i in np.flatnonzero(used > c.memory_bytes)
    ]


class FuzzReport(NamedTuple):
    """Outcome of :func:`fuzz_env`.

    Attributes:
        episodes: episodes played.
        steps: steps taken.
        completed: episodes that placed every slot.
        dead_ends: episodes that ended in a dead end.
        truncated: episodes truncated (penalty mode only).
        infeasible: completed placements that do not fit in memory (must be 0).
        problems: descriptions of what went wrong (infeasible placements, wrong info).
    """

    episodes: int
    steps: int
    completed: int
    dead_ends: int
    truncated: int
    infeasible: int
    problems: list[str]

    @property
    def dead_end_rate(self) -> float:
        return self.dead_ends / max(self.episodes, 1)


def fuzz_env(env: gym.Env, episodes: int, seed: int = 0, check_spaces: bool = True) -> FuzzReport:
    """Random masked episodes; every completed placement is checked for memory feasibility.

    The first reset is seeded with ``seed``; later ones continue the env's random stream.
    Each completed episode's ``info`` is checked too: its ``placement`` is the env's, its
    ``iteration_time_s`` is ``cost.evaluate`` of it and ``speedup = T_ref / T_iter``.
    """
    rng = np.random.default_rng(seed)
    steps = completed = dead_ends = truncated = infeasible = 0
    problems: list[str] = []
    for episode in range(episodes):
        roll = random_masked_rollout(env, rng, seed=seed if episode == 0 else None, check_spaces=check_spaces)
        steps += len(roll.actions)
        dead_ends += roll.dead_end
        truncated += roll.truncated
        if not roll.completed:
            continue
        completed += 1
        inst = env.unwrapped.instance
        found = placement_problems(inst, roll.placement)
        if found:
            infeasible += 1
            problems.append(f"{roll.instance_id}: " + "; ".join(found))
        expected = cost.evaluate(inst.cluster, inst.workload, roll.placement).iteration_time_s
        info = roll.info
        if not np.isclose(info["iteration_time_s"], expected, rtol=1e-12, atol=0.0) or not np.isclose(
            info["speedup"], info["reference_time_s"] / info["iteration_time_s"], rtol=1e-12
        ):
            problems.append(f"{roll.instance_id}: info times disagree with cost.evaluate")
    return FuzzReport(episodes, steps, completed, dead_ends, truncated, infeasible, problems)
