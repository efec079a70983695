"""Placement-v1's observation: v0's features, the witness's, and sparse machine neighbourhoods.

No ``[M, M]`` array is observed: every machine lists ``K`` neighbours (:func:`neighbour_lists`)
with the features of the link to each, and two per-step columns give the link from the machine
holding the current layer's predecessor and the one holding the same layer in the previous
replica to every machine (the links the next decision pays for). A network that reads this is
size-agnostic: nothing in it grows with ``M^2``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gymnasium import spaces

from hulk_env.cluster import Cluster
from hulk_env.completion import CompletionStatic, Witness
from hulk_env.env.observation import (
    CLIP,
    GLOBAL_FEATURES,
    LAYER_FEATURES,
    LINK_FEATURES,
    MACHINE_FEATURES,
    MACHINE_HIGH,
    StaticParts,
    bandwidth_feature,
    box,
    build_static,
    latency_feature,
    slot_spaces,
)
from hulk_env.instance import Instance
from hulk_env.validation import limits

MACHINE_FEATURES_V1 = MACHINE_FEATURES + (
    "slack",  # memory the witness completion leaves free / memory
    "witness",  # 1 on the witness's machine for the current slot (always allowed)
    "pred_latency",  # LINK_FEATURES of the link from the current layer's first predecessor's
    "pred_bandwidth",  # machine (same replica) to this one; 0, 0 without a predecessor
    "ring_latency",  # ... from the machine of the same layer in the previous replica (the
    "ring_bandwidth",  # data-parallel ring); 0, 0 in replica 0
)
MACHINE_INDEX_V1 = {name: i for i, name in enumerate(MACHINE_FEATURES_V1)}
MACHINE_HIGH_V1 = np.concatenate([MACHINE_HIGH, np.array([1, 1, CLIP, CLIP, CLIP, CLIP], dtype=np.float32)])
DEFAULT_NEIGHBOURS = 16
# Placement-v1's padding limits are the project's input limits (hulk_env/validation/limits.py,
# each with its reason): any instance a loader accepts fits an env that can be built.
MAX_MACHINES = limits.MAX_MACHINES
MAX_SLOTS = limits.MAX_SLOTS
_ROW_CACHE = 256  # link-feature rows kept per instance (predecessor / ring machines repeat)
_SORT_CHUNK = 256  # rows sorted at a time when building the neighbour lists


def neighbour_lists(cluster: Cluster, k: int) -> np.ndarray:
    """``[M, k]`` neighbour machine indices, ``-1`` padding (fewer than ``k`` other machines).

    Each machine lists its ``k // 2`` nearest machines by latency (ties: higher bandwidth, then
    lower index), then *gateways* -- the nearest machine of each other region, nearest region
    first -- then more of its nearest machines, never one twice. The nearest alone would all lie
    in the machine's own city on large clusters; the gateways keep every region in view.
    """
    m = cluster.num_machines
    out = np.full((m, k), -1, dtype=np.int64)
    size = min(k, m - 1)
    if size <= 0:
        return out
    lat, bw = cluster.latency_s, cluster.bandwidth_bps
    idx = np.arange(m)
    nearest = np.empty((m, size), dtype=np.int64)
    for start in range(0, m, _SORT_CHUNK):
        rows = slice(start, min(m, start + _SORT_CHUNK))
        key_lat = lat[rows].copy()
        key_lat[np.arange(key_lat.shape[0]), idx[rows]] = np.inf  # never itself
        order = np.lexsort((np.broadcast_to(idx, key_lat.shape), -bw[rows], key_lat), axis=-1)
        nearest[rows] = order[:, :size]
    region = cluster.region_index
    regions = len(cluster.regions)
    gateway = np.empty((m, regions), dtype=np.int64)
    gateway_lat = np.empty((m, regions))
    for g in range(regions):
        members = np.flatnonzero(region == g)
        sub = lat[:, members]
        j = np.argmin(sub, axis=1)
        gateway[:, g] = members[j]
        gateway_lat[:, g] = sub[idx, j]
    gateway_lat[idx, region] = np.inf  # its own region is covered by the nearest machines
    region_order = np.argsort(gateway_lat, axis=1, kind="stable")
    n_near = max(1, size // 2)
    for i in range(m):
        chosen = list(nearest[i, :n_near])
        taken = set(chosen)
        for g in region_order[i]:
            if len(chosen) == size or not np.isfinite(gateway_lat[i, g]):
                break
            c = int(gateway[i, g])
            if c not in taken:
                chosen.append(c)
                taken.add(c)
        for c in nearest[i, n_near:]:
            if len(chosen) == size:
                break
            if int(c) not in taken:
                chosen.append(int(c))
                taken.add(int(c))
        out[i, : len(chosen)] = chosen
    return out


def observation_space_v1(max_machines: int, max_layers: int, max_edges: int, neighbours: int) -> spaces.Dict:
    """Placement-v1's observation space for the given padding (see ``PlacementEnvV1``)."""
    m, k = max_machines, neighbours
    return spaces.Dict(
        {
            "machine_mask": box(0, 1, (m,)),
            "machine_features": box(0, MACHINE_HIGH_V1, (m, len(MACHINE_FEATURES_V1))),
            "neighbours": box(-1, m - 1, (m, k)),
            "neighbour_links": box(0, CLIP, (m, k, len(LINK_FEATURES))),
            "neighbour_mask": box(0, 1, (m, k)),
            **slot_spaces(max_machines, max_layers, max_edges),
        }
    )


def observation_floats(max_machines: int, max_layers: int, max_edges: int, neighbours: int) -> int:
    """Floats in one Placement-v1 observation: ``M (F + 4 K + 2) + N (10 + 2) + 3 E + 1 + G``
    (``G = len(GLOBAL_FEATURES)``, 13)."""
    m, n, e, k = max_machines, max_layers, max_edges, neighbours
    return (
        m * (len(MACHINE_FEATURES_V1) + 4 * k + 2)
        + n * (len(LAYER_FEATURES) + 2)
        + 3 * e
        + 1
        + len(GLOBAL_FEATURES)
    )


@dataclass(frozen=True, eq=False)
class StaticPartsV1:
    """Placement-v1's per-instance parts: v0's (without the dense links) and its own.

    Attributes:
        base: v0's :class:`hulk_env.env.observation.StaticParts` (``links`` left empty).
        completion: the witness's per-instance data.
        start: the witness at the episode start (the naive placement); episodes clone it.
        inverse_memory: ``[M]`` 1 / memory bytes (the ``slack`` column's scale); ``inverse_list``
            the same as a list, and ``train_rows`` v0's ``train_s`` as lists (per-step scalar reads).
        machine_features: ``[M, F1]`` columns ``MACHINE_FEATURES_V1`` at the episode start.
        neighbours, neighbour_links, neighbour_mask: the padded neighbour arrays (read-only).
    """

    base: StaticParts
    completion: CompletionStatic
    start: Witness
    inverse_memory: np.ndarray
    inverse_list: list[float]
    train_rows: list[list[float]]
    machine_features: np.ndarray
    neighbours: np.ndarray
    neighbour_links: np.ndarray
    neighbour_mask: np.ndarray
    _rows: dict = field(default_factory=dict, repr=False)

    @property
    def instance(self) -> Instance:
        return self.base.instance

    @property
    def reference_time_s(self) -> float:
        return self.base.reference_time_s

    def link_rows(self, source: int) -> np.ndarray:
        """``[M, 2]`` float32 ``LINK_FEATURES`` of the links from ``source`` to every machine."""
        rows = self._rows.get(source)
        if rows is None:
            if len(self._rows) >= _ROW_CACHE:
                self._rows.clear()
            c = self.base.instance.cluster
            rows = np.stack([latency_feature(c.latency_s[source]), bandwidth_feature(c.bandwidth_bps[source])], axis=1)
            rows = self._rows[source] = rows.astype(np.float32)
            rows.setflags(write=False)
        return rows


def build_static_v1(instance: Instance, max_machines: int, max_layers: int, max_edges: int, neighbours: int) -> StaticPartsV1:
    """Placement-v1's static parts of one instance (see :func:`hulk_env.env.observation.build_static`)."""
    base = build_static(instance, max_machines, max_layers, max_edges, dense_links=False)
    c = instance.cluster
    m = c.num_machines
    mf = np.zeros((max_machines, len(MACHINE_FEATURES_V1)), dtype=np.float32)
    mf[:, : len(MACHINE_FEATURES)] = base.machine_features
    nb = neighbour_lists(c, neighbours)
    valid = nb >= 0
    src = np.repeat(np.arange(m)[:, None], neighbours, axis=1)
    dst = np.where(valid, nb, 0)
    links = np.zeros((max_machines, neighbours, len(LINK_FEATURES)), dtype=np.float32)
    links[:m, :, 0] = np.where(valid, latency_feature(c.latency_s[src, dst]), 0.0)
    links[:m, :, 1] = np.where(valid, bandwidth_feature(c.bandwidth_bps[src, dst]), 0.0)
    index = np.full((max_machines, neighbours), -1.0, dtype=np.float32)
    index[:m] = nb
    mask = np.zeros((max_machines, neighbours), dtype=np.float32)
    mask[:m] = valid
    completion = CompletionStatic.of(instance)
    start = Witness(completion, base.reference_placement)
    mf[:m, MACHINE_INDEX_V1["slack"]] = start.slack / c.memory_bytes
    mf[start.own_machine(), MACHINE_INDEX_V1["witness"]] = 1.0
    for arr in (mf, index, links, mask):
        arr.setflags(write=False)
    inverse = 1.0 / c.memory_bytes
    return StaticPartsV1(base, completion, start, inverse, inverse.tolist(), base.train_s.tolist(), mf, index, links, mask)
