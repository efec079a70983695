"""Cost-model signals for the agent: stay-completion shaping and a one-step lookahead feature.

Both read a partial placement the way a pipeline is built: the open replica's remaining layers
*stay* on its last machine (a stage is a run of consecutive layers on one machine), replicas
not started yet take the reference (naive) placement. The potential of a state is the log
speed-up of that completion over the reference::

    Phi(s) = max(log(T_ref / T(stay_completion(s))), MIN_REWARD),   Phi(s_0) = 0

* :class:`StayLookahead` is a ``gymnasium.Wrapper`` around a ``reward="terminal"``
  :class:`hulk_env.env.PlacementEnv` that

  - shapes the reward (Ng et al. 1999): ``r' = r + Phi(s') - Phi(s)`` with ``Phi = 0`` at the
    end, so with ``gamma = 1`` the episode return is exactly the env's terminal return (the log
    speed-up over naive); only its timing changes;
  - with ``lookahead=True`` adds the observation key ``lookahead`` ``[max_machines]``: for every
    valid machine ``a``, ``Phi(s + (slot -> a)) - Phi(s)``, the shaped reward that action would
    get (clipped to ``[-LOOKAHEAD_CLIP, LOOKAHEAD_CLIP]``; 0 for masked and padded machines).
    One batched cost-model call per step (``M`` placements, ~0.4 ms for 47 machines x 26
    layers).

Why not the env's ``dense`` reward: it completes with the naive placement (every remaining
layer on the naive machines), which pays the agent for moving back to the naive machine; on the
default instance that steers PPO towards the naive placement, 7x slower than the best. The
stay completion values "start on a fast machine" and "switch machine here" by what they are
worth; the lookahead shows those values to the policy before it acts, so it learns *when* a
switch pays instead of first having to stumble on one.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hulk_env import cost
from hulk_env.rewards import MIN_REWARD, log_speedup_reward

LOOKAHEAD_KEY = "lookahead"
LOOKAHEAD_CLIP = 3.0  # log speed-ups: 3 = 20x; the first step's gain is often above 1.5


def stay_completion(placement: np.ndarray, reference: np.ndarray, t: int) -> np.ndarray:
    """``[D, L]``: a partial placement (``t`` slots placed, replica-major) completed by keeping
    the open replica's remaining layers on its last machine, later replicas on ``reference``."""
    full = np.where(placement < 0, reference, placement)
    n_layers = placement.shape[1]
    r, layer = divmod(t, n_layers)
    if r < placement.shape[0] and layer > 0:
        full[r, layer:] = placement[r, layer - 1]
    return full


def candidate_completions(placement: np.ndarray, reference: np.ndarray, t: int, machines: np.ndarray) -> np.ndarray:
    """``[K, D, L]``: for each machine in ``machines``, slot ``t`` placed there, then
    :func:`stay_completion` of the result."""
    d, n_layers = placement.shape
    r, layer = divmod(t, n_layers)
    base = np.where(placement < 0, reference, placement)
    out = np.repeat(base[None], len(machines), axis=0)
    out[:, r, layer:] = machines[:, None]  # the slot and the rest of its replica stay there
    return out


class StayLookahead(gym.Wrapper):
    """Stay-completion shaping and (optionally) the lookahead observation; see the module doc.

    Args:
        env: a :class:`hulk_env.env.PlacementEnv` (``reward="terminal"`` when ``shape``).
        shape: add the stay-completion shaping to the env's reward.
        lookahead: add the ``lookahead`` observation key.
    """

    def __init__(self, env: gym.Env, shape: bool = True, lookahead: bool = True) -> None:
        super().__init__(env)
        self.shape = shape
        self.lookahead = lookahead
        self.potential = 0.0
        self._gains = np.zeros(env.unwrapped.max_machines)
        if lookahead:
            m = env.unwrapped.max_machines
            space = dict(env.observation_space.spaces)
            space[LOOKAHEAD_KEY] = spaces.Box(-LOOKAHEAD_CLIP, LOOKAHEAD_CLIP, (m,), np.float32)
            self.observation_space = spaces.Dict(space)

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        self.potential = 0.0
        return self._observe(obs, ended=False), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ended = terminated or truncated
        new = 0.0 if ended else self._potential()
        shaped = float(reward) + (new - self.potential if self.shape else 0.0)
        self.potential = new
        return self._observe(obs, ended), shaped, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()

    # ---- internals -----------------------------------------------------------------------
    def _potential(self) -> float:
        base = self.env.unwrapped
        s = base.state
        static = s.static
        inst = static.instance
        full = stay_completion(s.placement, static.reference_placement, s.t)
        return log_speedup_reward(cost.iteration_time(inst.cluster, inst.workload, full), static.reference_time_s)

    def _observe(self, obs: dict[str, np.ndarray], ended: bool) -> dict[str, np.ndarray]:
        if not self.lookahead:
            return obs
        gains = np.zeros(self.env.unwrapped.max_machines, dtype=np.float32)
        if not ended:
            s = self.env.unwrapped.state
            static = s.static
            inst = static.instance
            valid = np.flatnonzero(s.mask[: static.num_machines])
            if len(valid):
                batch = candidate_completions(s.placement, static.reference_placement, s.t, valid)
                times = cost.iteration_times(inst.cluster, inst.workload, batch).iteration_time_s
                phi = np.maximum(np.log(static.reference_time_s / times), MIN_REWARD)
                gains[valid] = np.clip(phi - self.potential, -LOOKAHEAD_CLIP, LOOKAHEAD_CLIP)
        obs[LOOKAHEAD_KEY] = gains
        return obs
