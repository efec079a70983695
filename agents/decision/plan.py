"""The stage DP's plan from the policy's own start machine, as an observation for the policy.

Once the policy has put the first slot (replica 0, layer 0) on a machine ``s``, :func:`plan_from`
builds ``latency-chain-dp``'s nearest-latency chain from ``s`` and its forward candidates
(:func:`hulk_env.baselines.chains.chain_candidates`: every prefix split by the stage DP from its
first machine, the replicas sharing the prefix, in blocks or interleaved), keeps those that
leave layer 0 on ``s``,
and lets the cost model pick the fastest memory-feasible one (at most :data:`PLAN_EVALS`, the
most promising first: :func:`hulk_env.baselines.chains.rank_candidates`). From then on the
observation key ``plan`` (``[max_machines]``) is 1 at the plan's machine for the current slot and
0 elsewhere; before the first slot, and where no candidate fits, it is all 0. ``plan_from(...,
reverse=True)`` gives the chain's other orientation (layer 0 at the far end of the prefix): the
greedy decision's fallback where no forward split fits, never shown to the policy.
The plan also becomes the env's witness completion where it fits
(:meth:`hulk_env.env.PlacementEnvV1.adopt_witness`), so the mask never refuses the plan's
machine: before, on memory-tight multi-replica plans, the witness's repairs refused it on up to
61 of 164 slots (``val-v0/9``) and the rollout had to leave the plan it was shown.

Why: the policy's worst errors are plan-level -- where a stage ends, whether a replica shares
the others' machines -- and a per-slot decision from local features rarely gets them right,
while the stage DP gets them right along a given chain. The policy chooses where the chain
starts (which city, which machines: the DP cannot) and, slot by slot, whether to follow the
plan; it reads the plan like any other machine feature and is trained to beat it where it can
(the demonstrations are the faster of the teacher's placement and the plan from the teacher's
start: :func:`better_of_plan`).

Cost: one chain's stage DPs per episode (~10-150 ms on 8-128 machines, the policy's own steps
cost about as much) and at most :data:`PLAN_EVALS` cost-model evaluations, counted like every
other (:func:`hulk_env.cost.count_evals`). Plans are cached per instance and start machine, so
sampled rollouts that start on the same machine share one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hulk_env.baselines.chains import chain_stop, chains_candidates, rank_candidates
from hulk_env.baselines.common import (
    Evaluator,
    NeighbourOrder,
    evaluate_candidates,
    nearest_neighbour_chain,
)
from hulk_env.instance import Instance

PLAN_KEY = "plan"
# observation keys that read the env's witness (refreshed when the plan becomes the witness)
WITNESS_KEYS = ("machine_features", "globals", "action_mask")
PLAN_EVALS = 256  # cost-model evaluations of one plan at most (a chain yields ~10-300 candidates)
_CACHE_INSTANCES = 16  # instances whose plans (and neighbour orders: up to M x M indices) are kept


def plan_space(max_machines: int) -> spaces.Box:
    """The ``plan`` observation's space: ``[M]`` in {0, 1}."""
    return spaces.Box(0.0, 1.0, (max_machines,), np.float32)


class Plan(NamedTuple):
    """The stage DP's plan from one start machine and its iteration time (the cost model's)."""

    placement: np.ndarray  # [D, L]
    iteration_time_s: float


def plan_from(
    instance: Instance,
    start: int,
    max_evals: int = PLAN_EVALS,
    order: NeighbourOrder | None = None,
    reverse: bool = False,
) -> Plan | None:
    """The fastest memory-feasible candidate of the nearest-latency chain from ``start`` (``None``
    if none fits); a forward one keeps layer 0 of replica 0 on ``start``. ``order``: a
    :class:`~hulk_env.baselines.common.NeighbourOrder` shared by the plans of one instance.

    ``reverse``: the chain's splits from the model's last layer instead (``latency-chain-dp``'s
    other orientation: the start holds the last layers, layer 0 sits at the far end of the
    prefix). Such a plan does not begin on ``start``, so it is a decision candidate only, never
    the observation; it can fit where no forward split does, when the embedding and the head
    need different memory."""
    return plans_from(instance, [start], max_evals, order, reverse)[0]


def plans_from(
    instance: Instance,
    starts: list[int],
    max_evals: int = PLAN_EVALS,
    order: NeighbourOrder | None = None,
    reverse: bool = False,
) -> list[Plan | None]:
    """:func:`plan_from` of every start, the same plans, with the stage DPs of all their chains
    solved together (:func:`~hulk_env.baselines.chains.chains_candidates`); each plan evaluates
    its own candidates (at most ``max_evals``)."""
    order = order or NeighbourOrder(instance)
    make_stop = chain_stop(instance)  # its memory filter, once for all the starts
    chains = [nearest_neighbour_chain(instance, int(s), order=order, stop=make_stop()) for s in starts]
    evaluated: list[list[np.ndarray]] = []  # per start, its most promising candidates
    for start, found in zip(starts, chains_candidates(instance, chains, orientations=(bool(reverse),), order=order), strict=True):
        ranked = rank_candidates(found)
        if not reverse:
            ranked = [p for p in ranked if p[0, 0] == start]
        evaluated.append(ranked[:max_evals])
    # one cost-model batch for all the starts' candidates (each row's time is its own)
    flat = [p for ranked in evaluated for p in ranked]
    times = evaluate_candidates(Evaluator(instance, None), flat) if flat else np.empty(0)
    out: list[Plan | None] = []
    at = 0
    for ranked in evaluated:
        own = times[at : at + len(ranked)]
        at += len(ranked)
        best = int(np.argmin(own)) if len(own) else 0
        out.append(Plan(np.asarray(ranked[best], dtype=np.int64), float(own[best])) if len(own) and np.isfinite(own[best]) else None)
    return out


def better_of_plan(instance: Instance, placement: np.ndarray, time_s: float) -> tuple[np.ndarray, float, bool]:
    """``(placement, time, planned)``: the plan from ``placement``'s start machine when it is
    faster than ``placement`` (what the policy sees after that first slot), else ``placement``."""
    planned = plan_from(instance, int(np.asarray(placement)[0, 0]))
    if planned is not None and planned.iteration_time_s < time_s:
        return planned.placement, planned.iteration_time_s, True
    return np.asarray(placement, dtype=np.int64), float(time_s), False


class PlanHint(gym.Wrapper):
    """Adds the ``plan`` observation (see the module docstring) to a Placement-v1 env.

    Args:
        env: a :class:`hulk_env.env.PlacementEnvV1` (possibly wrapped).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = dict(env.observation_space.spaces)
        space[PLAN_KEY] = plan_space(env.unwrapped.max_machines)
        self.observation_space = spaces.Dict(space)
        self.plan: np.ndarray | None = None
        # id(instance) -> (instance, its neighbour order, (start, reverse) -> plan); holding the
        # instance keeps its id from being reused by another one's while it is cached.
        self._cache: dict[int, tuple[Instance, NeighbourOrder, dict[tuple[int, bool], Plan | None]]] = {}

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        self.plan = None
        return self._observe(obs, ended=False), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ended = terminated or truncated
        s = self.env.unwrapped.state
        if not ended and s.t == 1:
            planned = self.plan_for(s.static.instance, int(s.placement[0, 0]))
            self.plan = None if planned is None else planned.placement
            if self.plan is not None and hasattr(self.env.unwrapped, "adopt_witness"):
                # the plan becomes the env's witness where it fits: its machines are then never
                # refused by the mask (a conservative witness refused them on memory-tight plans)
                fresh = self.env.unwrapped.adopt_witness(self.plan)
                if fresh is not None:
                    for key in WITNESS_KEYS:
                        obs[key] = fresh[key]
                    info["action_mask"] = fresh["action_mask"].copy()
        return self._observe(obs, ended), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()

    def plan_for(self, instance: Instance, start: int, reverse: bool = False) -> Plan | None:
        """:func:`plan_from` ``(instance, start, reverse=reverse)``, cached (with ``reverse``
        false: what the observation shows once the first slot is on ``start``)."""
        return self.plans_for(instance, [start], reverse)[0]

    def neighbour_order(self, instance: Instance) -> NeighbourOrder:
        """The instance's :class:`~hulk_env.baselines.common.NeighbourOrder` the plans use (cached
        with them: its sorted rows serve every chain of the instance)."""
        return self._entry(instance)[1]

    def _entry(self, instance: Instance) -> tuple[Instance, NeighbourOrder, dict[tuple[int, bool], Plan | None]]:
        entry = self._cache.get(id(instance))
        if entry is None or entry[0] is not instance:
            if len(self._cache) >= _CACHE_INSTANCES:
                self._cache.clear()
            entry = self._cache[id(instance)] = (instance, NeighbourOrder(instance), {})
        return entry

    def plans_for(self, instance: Instance, starts: list[int], reverse: bool = False) -> list[Plan | None]:
        """:meth:`plan_for` of every start, those not cached built together (:func:`plans_from`)."""
        _, order, plans = self._entry(instance)
        missing = list(dict.fromkeys(int(s) for s in starts if (int(s), bool(reverse)) not in plans))
        if missing:
            for s, planned in zip(missing, plans_from(instance, missing, order=order, reverse=bool(reverse)), strict=True):
                plans[(s, bool(reverse))] = planned
        return [plans[(int(s), bool(reverse))] for s in starts]

    def _observe(self, obs: dict[str, np.ndarray], ended: bool) -> dict[str, np.ndarray]:
        hint = np.zeros(self.env.unwrapped.max_machines, dtype=np.float32)
        if not ended and self.plan is not None:
            t = self.env.unwrapped.state.t
            if t < self.plan.size:
                hint[int(self.plan.reshape(-1)[t])] = 1.0
        obs[PLAN_KEY] = hint
        return obs
