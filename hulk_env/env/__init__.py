"""The placement environment ``hulk/Placement-v0`` (:class:`PlacementEnv`, its spec docstring).

* :mod:`.placement_env`: the Gymnasium env, its info values and construction arguments;
* :mod:`.observation`: feature tables, the observation space and the per-instance static parts;
* :mod:`.state`: the episode state, the exact memory mask, placing a slot, the fallback machine.
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
    "MACHINE_FEATURES_V1",
    "PlacementEnvV1",
    "observation_floats",
    "GLOBAL_FEATURES",
    "INVALID_ACTION_MODES",
    "LAYER_FEATURES",
    "LINK_FEATURES",
    "MACHINE_FEATURES",
    "MEMORY_RTOL",
    "EpisodeState",
    "PlacementEnv",
    "StaticParts",
    "build_static",
    "cost_info",
    "fallback_machine",
    "observation_space",
    "placement_info",
    "render_state",
]
