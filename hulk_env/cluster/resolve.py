"""One entry point for every cluster source: :func:`load_cluster`."""

from __future__ import annotations

from pathlib import Path

from hulk_env.cluster.builtin import cluster_names, has_cluster, load_builtin_cluster
from hulk_env.cluster.files import CLUSTER_FILE_SUFFIXES, load_cluster_file
from hulk_env.cluster.model import Cluster
from hulk_env.cluster.paper import HULK_EDGE_FILE, HULK_NODE_FILE, CleaningReport, load_hulk_dir
from hulk_env.errors import HulkInputError


def load_cluster(
    name_or_path: str | Path, *, min_rtt_fraction: float = 1.0
) -> tuple[Cluster, CleaningReport | None]:
    """A cluster from a built-in name, a paper-format directory, or a YAML/JSON file.

    Built-in names win over paths of the same spelling. ``min_rtt_fraction`` is passed to
    :func:`~hulk_env.cluster.paper.load_hulk_dir` (the paper's format and ``hulk-paper`` only).

    Returns:
        The cluster, and the cleaning report for the paper's format (None otherwise).

    Raises:
        HulkInputError: unknown name or path (the message lists the built-in names), or any
            error of the loaders.
    """
    text = str(name_or_path).strip()
    if has_cluster(text):
        return load_builtin_cluster(text, min_rtt_fraction=min_rtt_fraction)
    path = Path(text).expanduser()
    if path.is_dir():
        return load_hulk_dir(path, min_rtt_fraction=min_rtt_fraction)
    if path.name == HULK_NODE_FILE and path.is_file():
        return load_hulk_dir(path.parent, min_rtt_fraction=min_rtt_fraction)
    if path.suffix.lower() in CLUSTER_FILE_SUFFIXES:
        return load_cluster_file(path), None
    if path.exists():
        raise HulkInputError(
            f"unsupported cluster file type '{path.suffix}': give a .yaml/.yml/.json file or a "
            f"directory holding {HULK_NODE_FILE} and {HULK_EDGE_FILE}",
            source=text,
        )
    raise HulkInputError(
        "unknown cluster: not a built-in name "
        f"({', '.join(cluster_names())}) nor an existing file or directory",
        source=text,
    )
