"""Env actions that are not integer-valued numbers in range are invalid actions, never rounded."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env.env import PlacementEnv, PlacementEnvV1
from hulk_env.env.state import as_index
from hulk_env.rewards import INVALID_ACTION_REWARD

INVALID = [float("inf"), float("-inf"), float("nan"), 1.9, -0.5, 0.5, "1", "0", b"1", True, None, [0, 1],
           np.array([0, 1]), 10**400, -1, 10**6, np.float64(1.5), 1 + 0j, {}]
VALID = [(1, 1), (np.int64(1), 1), (1.0, 1), (np.float32(2.0), 2), (np.array(1), 1), (np.array([2]), 2),
         (np.array([[0]]), 0)]


@pytest.mark.parametrize("action", INVALID, ids=repr)
def test_as_index_refuses(action):
    assert as_index(action, 4) == -1


@pytest.mark.parametrize(("action", "index"), VALID, ids=lambda a: repr(a))
def test_as_index_accepts_integer_values(action, index):
    assert as_index(action, 4) == index


@pytest.mark.parametrize("env_cls", [PlacementEnv, PlacementEnvV1])
@pytest.mark.parametrize("action", [float("inf"), 1.9, -0.5, "1"], ids=repr)
def test_invalid_actions_follow_the_documented_rule(env_cls, action):
    env = env_cls(generator="toy")
    env.reset(seed=0)
    _, _, _, _, info = env.step(action)
    assert info["invalid_action"] is True and info["applied_action"] >= 0  # fallback: placed
    penalty = env_cls(generator="toy", invalid_action="penalty")
    penalty.reset(seed=0)
    cursor = penalty.state.t if hasattr(penalty, "state") else None
    _, reward, terminated, truncated, info = penalty.step(action)
    assert info["invalid_action"] is True and info["applied_action"] == -1
    assert reward == pytest.approx(INVALID_ACTION_REWARD) and not terminated
    if cursor is not None:
        assert penalty.state.t == cursor  # the same slot again


def test_integer_valued_float_is_the_same_action():
    a, b = PlacementEnv(generator="toy"), PlacementEnv(generator="toy")
    obs_a, _ = a.reset(seed=1)
    b.reset(seed=1)
    machine = int(np.flatnonzero(obs_a["action_mask"])[0])
    _, _, _, _, ia = a.step(machine)
    _, _, _, _, ib = b.step(float(machine))
    assert ia["applied_action"] == ib["applied_action"] == machine and not ib["invalid_action"]
