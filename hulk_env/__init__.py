"""hulk_env: placement of model layers on regionally distributed GPU clusters.

The environment library needs only numpy, networkx and gymnasium; it never imports torch.
Importing it registers the Gymnasium environments ``hulk/Placement-v1`` and ``hulk/Placement-v0``.
"""

import gymnasium

from hulk_env.cluster import Cluster, Machine
from hulk_env.env import ENV_ID, ENV_ID_V1, PlacementEnv, PlacementEnvV1
from hulk_env.errors import HulkInputError
from hulk_env.generators import (
    FixedGenerator,
    InstanceListGenerator,
    RandomGeoGenerator,
    ToyGenerator,
    exhaustive_optimum,
    make_generator,
)
from hulk_env.instance import Instance
from hulk_env.workload import Workload

if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point="hulk_env.env:PlacementEnv")
if ENV_ID_V1 not in gymnasium.registry:
    gymnasium.register(ENV_ID_V1, entry_point="hulk_env.env:PlacementEnvV1")
# Re-placement after failures (hulk_env/env/replace_env.py); its module loads only on make.
if "hulk/Replace-v0" not in gymnasium.registry:
    gymnasium.register("hulk/Replace-v0", entry_point="hulk_env.env.replace_env:ReplaceEnv")

__all__ = [
    "Cluster",
    "Machine",
    "Workload",
    "Instance",
    "HulkInputError",
    "ENV_ID",
    "PlacementEnv",
    "ENV_ID_V1",
    "PlacementEnvV1",
    "FixedGenerator",
    "InstanceListGenerator",
    "RandomGeoGenerator",
    "ToyGenerator",
    "exhaustive_optimum",
    "make_generator",
]
__version__ = "0.1.0"
