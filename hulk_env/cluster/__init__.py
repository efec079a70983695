"""Clusters: machines and the links between them, and the loaders that build them.

Modules, in import order (each imports only those above it):

* :mod:`.model`: :class:`Machine`, :class:`Cluster` (validated on construction) and
  :func:`geo_cluster` (a synthetic cluster over real cities);
* :mod:`.paper`: the Hulk paper's directory format (``node_feature.csv`` + ``edge.txt``),
  :func:`load_hulk_dir` and its :class:`CleaningReport`;
* :mod:`.files`: YAML/JSON cluster files, :func:`load_cluster_file` (the format is in its
  docstring);
* :mod:`.builtin`: the named clusters (:func:`cluster_names`, :func:`get_cluster`), among them
  ``hulk-paper``, the paper's measured data shipped in ``data/hulk-paper``;
* :mod:`.resolve`: :func:`load_cluster`, a built-in name, a directory or a file.

Every public name is importable from ``hulk_env.cluster`` directly.
"""

from hulk_env.cluster.builtin import (
    CLOUD_GPU_MIX,
    CLUSTER_SEED,
    DEFAULT_CLUSTER,
    LINK_NOISE,
    PAPER_CLUSTER,
    PAPER_GPU_MIX,
    PAPER_MACHINES_PER_CITY,
    cluster_names,
    get_cluster,
    has_cluster,
    load_builtin_cluster,
    paper_data_dir,
)
from hulk_env.cluster.files import CLUSTER_FILE_SUFFIXES, load_cluster_file
from hulk_env.cluster.model import Cluster, Machine, geo_cluster
from hulk_env.cluster.paper import (
    HULK_EDGE_COLUMNS,
    HULK_EDGE_FILE,
    HULK_NODE_COLUMNS,
    HULK_NODE_FILE,
    CleaningReport,
    load_hulk_dir,
)
from hulk_env.cluster.resolve import load_cluster

__all__ = [
    "CLOUD_GPU_MIX",
    "CLUSTER_FILE_SUFFIXES",
    "CLUSTER_SEED",
    "DEFAULT_CLUSTER",
    "HULK_EDGE_COLUMNS",
    "HULK_EDGE_FILE",
    "HULK_NODE_COLUMNS",
    "HULK_NODE_FILE",
    "LINK_NOISE",
    "PAPER_CLUSTER",
    "PAPER_GPU_MIX",
    "PAPER_MACHINES_PER_CITY",
    "CleaningReport",
    "Cluster",
    "Machine",
    "cluster_names",
    "geo_cluster",
    "get_cluster",
    "has_cluster",
    "load_builtin_cluster",
    "load_cluster",
    "load_cluster_file",
    "load_hulk_dir",
    "paper_data_dir",
]
