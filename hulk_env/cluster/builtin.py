"""Named built-in clusters: no file needed, same name, same cluster.

* ``hulk-paper``: the paper's 47 measured machines, read from the data that ships with the
  package (:func:`paper_data_dir`) through :func:`hulk_env.cluster.paper.load_hulk_dir`;
* ``paper-12city-47``, ``cloud-3region``, ``cloud-8region``: generated from the city table
  (:mod:`hulk_env.hardware.geo`) by :func:`hulk_env.cluster.model.geo_cluster` with a fixed
  seed. Links carry a 10% log-normal jitter on the distance model so that equally distant pairs
  are not all equal.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

from hulk_env.cluster.model import Cluster, geo_cluster
from hulk_env.cluster.paper import HULK_EDGE_FILE, HULK_NODE_FILE, CleaningReport, load_hulk_dir
from hulk_env.errors import HulkInputError

PAPER_CLUSTER = "hulk-paper"  # the paper's measured machines; also its data directory's name
# The paper's machines per city (node_feature.csv) and its GPU mix as load_hulk_dir infers it
# from capability + memory on the 47 rows: (GPU, GPUs per machine, machines). Tested against
# the real files in tests/test_cluster_loaders.py.
PAPER_MACHINES_PER_CITY = {
    "Beijing": 5, "Neimeng": 5, "Nanjing": 5, "Quanzhou": 5, "California": 5, "Tokyo": 5,
    "Berlin": 3, "London": 1, "New Delhi": 3, "Paris": 4, "Rome": 5, "Brasilia": 1,
}  # fmt: skip
PAPER_GPU_MIX = (
    ("GTX-1080", 8, 4),
    ("GTX-1080", 16, 4),
    ("V100-32GB", 12, 10),
    ("T4", 9, 2),
    ("A100-40GB", 8, 4),
    ("A100-80GB", 8, 2),
    ("A10", 3, 1),
    ("A10", 4, 11),
    ("A10", 6, 8),
    ("A10", 13, 1),
)
# Cloud GPU instances (8 x A100-40/80GB, 8 x H100, 8 x V100-32GB, 4 x A10), weighted by how
# common they are.
CLOUD_GPU_MIX = (
    ("A100-40GB", 8, 3),
    ("A100-80GB", 8, 2),
    ("H100", 8, 1),
    ("V100-32GB", 8, 2),
    ("A10", 4, 2),
)
CLUSTER_SEED = 0
LINK_NOISE = 0.1
# The main job's cluster: the paper's setting (12 cities, 47 machines), so results compare
# with its claim; the agent's policy is size-agnostic, so 47 machines need nothing special.
DEFAULT_CLUSTER = "paper-12city-47"

_GENERATED: dict[str, Callable[[], Cluster]] = {
    "paper-12city-47": lambda: geo_cluster(
        list(PAPER_MACHINES_PER_CITY),
        list(PAPER_MACHINES_PER_CITY.values()),
        PAPER_GPU_MIX,
        seed=CLUSTER_SEED,
        name="paper-12city-47",
        link_noise=LINK_NOISE,
    ),
    "cloud-3region": lambda: geo_cluster(
        ["Ashburn", "Dublin", "Frankfurt"],
        4,
        CLOUD_GPU_MIX,
        seed=CLUSTER_SEED,
        name="cloud-3region",
        link_noise=LINK_NOISE,
    ),
    "cloud-8region": lambda: geo_cluster(
        ["Ashburn", "Sao Paulo", "Frankfurt", "Cape Town", "Mumbai", "Singapore", "Tokyo",
         "Sydney"],
        4,
        CLOUD_GPU_MIX,
        seed=CLUSTER_SEED,
        name="cloud-8region",
        link_noise=LINK_NOISE,
    ),
}  # fmt: skip


def paper_data_dir() -> Path:
    """The directory of the paper's ``node_feature.csv`` and ``edge.txt`` inside the package.

    Raises:
        HulkInputError: the package was installed without its data files.
    """
    root = Path(str(resources.files("hulk_env.cluster") / "data" / PAPER_CLUSTER))
    if not (root / HULK_NODE_FILE).is_file() or not (root / HULK_EDGE_FILE).is_file():
        raise HulkInputError(
            f"the paper's data is missing from the installed package (expected {HULK_NODE_FILE} "
            f"and {HULK_EDGE_FILE} here); reinstall hulk-env",
            source=str(root),
        )
    return root


def cluster_names() -> list[str]:
    """Names :func:`get_cluster` accepts: ``"default"`` and the built-in clusters."""
    return ["default", *_GENERATED, PAPER_CLUSTER]


def _cluster_key(name: str) -> str:
    key = str(name).strip().lower()
    return DEFAULT_CLUSTER if key == "default" else key


def has_cluster(name: str) -> bool:
    """True if ``name`` is a built-in cluster (or ``"default"``)."""
    key = _cluster_key(name)
    return key in _GENERATED or key == PAPER_CLUSTER


def load_builtin_cluster(
    name: str, *, min_rtt_fraction: float = 1.0
) -> tuple[Cluster, CleaningReport | None]:
    """Build a built-in cluster, with the cleaning report for ``hulk-paper`` (None otherwise).

    ``min_rtt_fraction`` is passed to :func:`~hulk_env.cluster.paper.load_hulk_dir`
    (``hulk-paper`` only; the generated clusters have no measurements to clean).

    Raises:
        HulkInputError: unknown name; the message lists the valid ones.
    """
    key = _cluster_key(name)
    if key == PAPER_CLUSTER:
        return load_hulk_dir(paper_data_dir(), min_rtt_fraction=min_rtt_fraction)
    if key not in _GENERATED:
        raise HulkInputError(
            f"unknown cluster '{name}'; built-in clusters: {', '.join(cluster_names())} "
            "(or give a paper-format directory or a .yaml/.yml/.json cluster file)",
            field="cluster",
        )
    return _GENERATED[key](), None


def get_cluster(name: str) -> Cluster:
    """Build a built-in cluster (deterministic: a fixed seed, or the paper's fixed files).

    Raises:
        HulkInputError: unknown name; the message lists the valid ones.
    """
    return load_builtin_cluster(name)[0]
