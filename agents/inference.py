"""Placing instances with a saved policy: masked rollouts and sampling.

A loaded policy (:func:`agents.saved_policy.load_policy`) places an instance by running the
placement env to the end, one masked action per (replica, layer) slot: greedily, or sampled
from the policy's softmax at a temperature, the cost model keeping the best of several
rollouts (:func:`policy_placement`; as a leaderboard method: :mod:`agents.methods`). torch is
imported inside the functions, so importing this module needs no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from agents.saved_policy import LoadedPolicy, lookahead_of
from hulk_env import cost
from hulk_env.baselines import PlacementResult
from hulk_env.feasibility import Padding
from hulk_env.generators import InstanceListGenerator
from hulk_env.instance import Instance


def make_eval_env(instance: Instance, padding: Padding, lookahead: bool) -> Any:
    """A terminal-reward env on one instance with the policy's padding and observation."""
    from agents.shaping import StayLookahead
    from hulk_env.env import PlacementEnv

    env = PlacementEnv(
        generator=InstanceListGenerator((instance,)),
        max_machines=padding.max_machines,
        max_layers=padding.max_layers,
        max_edges=padding.max_edges,
        reward="terminal",
    )
    return StayLookahead(env, shape=False, lookahead=True) if lookahead else env


def sample_action(policy: Any, obs: dict[str, np.ndarray], mask: np.ndarray, temperature: float) -> int:
    """A masked action drawn from ``softmax(logits / temperature)`` (torch's global RNG)."""
    import torch

    obs_tensor, _ = policy.obs_to_tensor(obs)
    dist = policy.get_distribution(obs_tensor, action_masks=mask[None])
    logits = dist.distribution.logits[0] / temperature  # masked logits stay at about -1e8 / T
    return int(torch.multinomial(torch.softmax(logits, -1), 1))


def rollout(policy: Any, env: Any, instance: Instance, temperature: float | None = None) -> np.ndarray | None:
    """One masked episode of ``policy`` on ``instance``: greedy (``temperature=None``) or
    sampled at ``temperature``; the ``[D, L]`` placement, or ``None`` at a dead end."""
    obs, _ = env.reset(options={"instance": instance})
    while True:
        mask = env.action_masks()
        if temperature is None:
            action = int(policy.predict(obs, deterministic=True, action_masks=mask)[0])
        else:
            action = sample_action(policy, obs, mask, temperature)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            if info.get("dead_end") or truncated:
                return None
            return np.asarray(info["placement"], dtype=np.int64)


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (restored after).

    One observation at a time is a chain of tiny kernels: extra threads only add
    synchronisation, and on a loaded 2-core machine their spin-waits made inference 6x slower.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def policy_placement(
    loaded: LoadedPolicy,
    instance: Instance,
    seed: int = 0,
    samples: int = 0,
    name: str = "policy",
    temperature: float = 1.0,
) -> PlacementResult:
    """Place ``instance`` with a loaded policy: the deterministic (greedy) rollout, plus the
    best of ``samples`` rollouts sampled at ``temperature`` when ``samples > 0`` (seeded by
    ``seed``), the cost model choosing.

    ``cost_evals`` counts the completed rollouts (each costs one cost-model evaluation; a
    policy with the lookahead observation also makes one batched call per step, not counted).
    """
    import torch

    loaded.padding.check_fits(
        instance,
        holder=f"the padding of the policy at {loaded.directory},",
        fix="train a policy with env.{key}>={have} (e.g. `hulk train --set env.{key}={have}`)",
    )
    env = make_eval_env(instance, loaded.padding, lookahead_of(loaded.meta))
    best, best_time, evals = None, np.inf, 0
    with torch.random.fork_rng(), torch.no_grad(), single_thread():
        torch.manual_seed(seed)
        for i in range(1 + max(0, samples)):
            placement = rollout(loaded.policy, env, instance, None if i == 0 else temperature)
            if placement is None:
                continue
            evals += 1
            breakdown = cost.evaluate(instance.cluster, instance.workload, placement)
            if breakdown.memory_feasible and float(breakdown.iteration_time_s) < best_time:
                best, best_time = placement, float(breakdown.iteration_time_s)
    if best is None:
        return PlacementResult(name, None, evals, "every rollout ended in a dead end (no machine could take a layer)")
    return PlacementResult(name, best, evals)
