"""hulk_env: placement of model layers on regionally distributed GPU clusters.

The environment library needs only numpy, networkx and gymnasium; it never imports torch.
"""

from hulk_env.cluster import Cluster, Machine
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.workload import Workload

__all__ = ["Cluster", "Machine", "Workload", "Instance", "HulkInputError"]
__version__ = "0.1.0"
