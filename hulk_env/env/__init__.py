"""The placement environments ``hulk/Placement-v1`` (:class:`PlacementEnvV1`) and ``v0`` (:class:`PlacementEnv`).

* :mod:`.placement_env`: v0's Gymnasium env (its spec docstring), info values, construction arguments;
* :mod:`.observation`: feature tables, the observation space and the per-instance static parts;
* :mod:`.state`: v0's episode state, its per-layer memory mask, placing a slot, the fallback machine;
* :mod:`.placement_env_v1`, :mod:`.observation_v1`, :mod:`.state_v1`: v1 -- the witness
  completion's mask (:mod:`hulk_env.completion`: no dead ends) and the sparse observation.
"""

from hulk_env.env.observation import (
    GLOBAL_FEATURES,
    LAYER_FEATURES,
    LINK_FEATURES,
    MACHINE_FEATURES,
    MEMORY_RTOL,
    StaticParts,
    build_static,
    observation_space,
)
from hulk_env.env.observation_v1 import MACHINE_FEATURES_V1, observation_floats
from hulk_env.env.placement_env import (
    ENV_ID,
    INVALID_ACTION_MODES,
    PlacementEnv,
    cost_info,
    placement_info,
    render_state,
)
from hulk_env.env.placement_env_v1 import ENV_ID_V1, PlacementEnvV1
from hulk_env.env.state import EpisodeState, fallback_machine

__all__ = [
    "ENV_ID",
    "ENV_ID_V1",
    "EpisodeState",
    "GLOBAL_FEATURES",
    "INVALID_ACTION_MODES",
    "LAYER_FEATURES",
    "LINK_FEATURES",
    "MACHINE_FEATURES",
    "MACHINE_FEATURES_V1",
    "MEMORY_RTOL",
    "PlacementEnv",
    "PlacementEnvV1",
    "StaticParts",
    "build_static",
    "cost_info",
    "fallback_machine",
    "observation_floats",
    "observation_space",
    "placement_info",
    "render_state",
]
