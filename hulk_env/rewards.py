"""Rewards of :class:`hulk_env.env.PlacementEnv`: small objects over pure functions.

The episode's value is the **log speed-up** over the reference placement of the same instance
(the naive placement, :func:`hulk_env.reference.naive_placement`)::

    R = max(log(T_ref / T_iter), MIN_REWARD)

``R = 0`` matches the reference, ``log 2 = 0.69`` is twice as fast, ``-0.69`` twice as slow.
We use the log ratio rather than ``-T_iter / T_ref`` because it scores every halving of the
iteration time the same (``-T/T_ref`` pays 0.5 for going from 1x to 2x and only 0.25 for 2x to
4x), it is 0 for the reference, and it is symmetric in "faster" and "slower". The floor
``MIN_REWARD`` (a placement ``e^5 ~ 148`` times slower than the reference) keeps returns bounded
for value learning; :data:`DEAD_END_REWARD` lies below it, so a dead end (no machine can hold
the next layer) is worse than any completed placement.

Two reward schedules give the same undiscounted episode return:

* :class:`TerminalReward` pays ``R`` on the last step and 0 before;
* :class:`DenseReward` is potential-based shaping (Ng et al. 1999) with the potential
  ``Phi(s) = max(log(T_ref / T(complete(s))), MIN_REWARD)``, where ``complete(s)`` fills the
  unplaced (replica, layer) slots with the reference placement's machines. ``complete`` of the
  empty placement is the reference itself, so ``Phi(s_0) = 0``; at the end ``Phi = R``. The
  step reward is ``Phi(s_{t+1}) - Phi(s_t)``, which telescopes to ``R`` (a dead end sets the last
  potential to ``DEAD_END_REWARD``). Each step costs one cost-model call.

Dollars: :class:`CostReward` (``reward="cost"``) pays at the end, instead of ``R``,
``C = max(log(USD_ref / USD_iter), MIN_REWARD)``, the log saving in dollars per iteration over
the reference placement (:func:`hulk_env.money.usd_per_iteration`: rental of the machines used
plus egress; a machine without a list price gets the catalog's median price per FLOP/s);
:class:`MixedReward` (``reward="mixed"``) pays ``(R + C) / 2``. Both are terminal (0 before the
end; a dead end still scores :data:`DEAD_END_REWARD`).

Invalid actions in the env's ``"penalty"`` mode add :data:`INVALID_ACTION_REWARD` per invalid
action on top of either schedule (the placement does not change, so the potential does not).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

import numpy as np

from hulk_env import cost
from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.workload import Workload

MIN_REWARD = -5.0  # floor of the log speed-up: a placement e^5 ~ 148x slower than the reference
DEAD_END_REWARD = -6.0  # below MIN_REWARD: a dead end is worse than any completed placement
INVALID_ACTION_REWARD = -0.1  # per invalid action, in the env's "penalty" mode

UNPLACED = -1  # placement entry of a (replica, layer) slot not placed yet


def log_speedup_reward(iteration_time_s: float, reference_time_s: float) -> float:
    """``max(log(T_ref / T_iter), MIN_REWARD)``: the value of a completed placement.

    Args:
        iteration_time_s: the placement's iteration time ``T_iter`` (s), > 0.
        reference_time_s: the reference placement's time ``T_ref`` (s), > 0.
    """
    return max(math.log(reference_time_s / iteration_time_s), MIN_REWARD)


def complete_placement(placement: np.ndarray, reference_placement: np.ndarray) -> np.ndarray:
    """``[D, L]`` placement with the unplaced (``-1``) slots taken from the reference."""
    return np.where(placement == UNPLACED, reference_placement, placement)


def completion_potential(
    cluster: Cluster,
    workload: Workload,
    placement: np.ndarray,
    reference_placement: np.ndarray,
    reference_time_s: float,
) -> float:
    """``Phi(s)``: the log speed-up of the partial placement completed by the reference.

    Memory is not considered: the potential estimates time, and the env's mask keeps the
    agent's own choices feasible.
    """
    full = complete_placement(placement, reference_placement)
    return log_speedup_reward(cost.iteration_time(cluster, workload, full), reference_time_s)


class Transition(NamedTuple):
    """What a reward sees after one step.

    Attributes:
        cluster: the instance's machines.
        workload: the instance's model.
        placement: ``[D, L]`` after the step, ``-1`` where unplaced.
        reference_placement: ``[D, L]`` the reference (naive) placement.
        reference_time_s: its iteration time ``T_ref``.
        outcome: the episode's value when it ended on this step (the log speed-up of the
            completed placement, or :data:`DEAD_END_REWARD`), else ``None``.
    """

    cluster: Cluster
    workload: Workload
    placement: np.ndarray
    reference_placement: np.ndarray
    reference_time_s: float
    outcome: float | None


class Reward(Protocol):
    """A reward schedule: ``reset()`` at each episode start, then one call per step."""

    name: str
    needs_transition: bool

    def reset(self) -> None: ...

    def __call__(self, transition: Transition) -> float: ...


class TerminalReward:
    """``R`` on the last step, 0 before (no cost-model call until the episode ends)."""

    name = "terminal"
    # The env may skip building a Transition on non-final steps: this reward ignores them.
    needs_transition = False

    def reset(self) -> None:
        """Nothing to reset: the reward is memoryless."""

    def __call__(self, transition: Transition) -> float:
        return 0.0 if transition.outcome is None else float(transition.outcome)


class DenseReward:
    """Potential-based: ``Phi(s_{t+1}) - Phi(s_t)`` with ``Phi(s_0) = 0``; sums to ``R``."""

    name = "dense"
    needs_transition = True

    def __init__(self) -> None:
        self.potential = 0.0

    def reset(self) -> None:
        """Start an episode: the empty placement completes to the reference, ``Phi = 0``."""
        self.potential = 0.0

    def __call__(self, transition: Transition) -> float:
        if transition.outcome is not None:
            new = float(transition.outcome)
        else:
            new = completion_potential(
                transition.cluster,
                transition.workload,
                transition.placement,
                transition.reference_placement,
                transition.reference_time_s,
            )
        reward = new - self.potential
        self.potential = new
        return reward


def log_saving_reward(usd: float, reference_usd: float) -> float:
    """``max(log(USD_ref / USD_iter), MIN_REWARD)``: a completed placement's value in dollars."""
    return max(math.log(reference_usd / usd), MIN_REWARD)


class CostReward:
    """Terminal: ``(1 - w) R + w C`` with ``w = 1`` (the module docstring's ``C``)."""

    name = "cost"
    needs_transition = True
    weight = 1.0

    def __init__(self) -> None:
        self._reference: tuple[int, int, float] | None = None  # (id cluster, id workload, USD)

    def reset(self) -> None:
        """Nothing per episode: the reference's dollars are kept per instance."""

    def _reference_usd(self, t: Transition) -> float:
        from hulk_env.money import dollars

        key = (id(t.cluster), id(t.workload))
        if self._reference is None or self._reference[:2] != key:
            usd = dollars(t.cluster, t.workload, t.reference_placement, t.reference_time_s, impute=True).usd_per_iteration
            self._reference = (*key, usd)
        return self._reference[2]

    def __call__(self, t: Transition) -> float:
        from hulk_env.money import dollars

        if t.outcome is None:
            return 0.0
        if np.any(t.placement == UNPLACED):  # a dead end
            return float(t.outcome)
        usd = dollars(t.cluster, t.workload, t.placement, impute=True).usd_per_iteration
        saving = log_saving_reward(usd, self._reference_usd(t))
        return (1.0 - self.weight) * float(t.outcome) + self.weight * saving


class MixedReward(CostReward):
    """Terminal: the mean of the log speed-up and the log dollar saving, ``(R + C) / 2``."""

    name = "mixed"
    weight = 0.5


REWARDS: dict[str, type] = {"terminal": TerminalReward, "dense": DenseReward, "cost": CostReward, "mixed": MixedReward}


def make_reward(name: str) -> Reward:
    """A fresh reward object by name (``"terminal"``, ``"dense"``, ``"cost"`` or ``"mixed"``)."""
    try:
        return REWARDS[name]()
    except KeyError:
        raise HulkInputError(
            f"unknown reward '{name}'; choose one of {', '.join(REWARDS)}", field="reward"
        ) from None
