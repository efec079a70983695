"""What a change of placement costs: the bytes that move, the seconds they take, the horizon total.

Pure functions beside the cost model (:mod:`hulk_env.cost`). Every (replica ``r``, layer ``l``)
slot holds the layer's model and optimizer state, ``s_l = state_bytes_per_param x params_l``
bytes (16 bytes per parameter for mixed-precision Adam). Data-parallel replicas hold identical
state, so any machine that held layer ``l`` (for any replica) can serve it.

Bytes that move, for an old placement, a set of failed machines and a new placement:

- a machine ``b`` of the new placement needs layer ``l``'s state once, however many replicas'
  copies of ``l`` it now holds; it needs nothing if it already held ``l`` and survived (so
  swapping replicas, or keeping a slot where it was, is free);
- otherwise the state comes from a *surviving holder* of ``l``: the machine of the old placement
  that held ``l``, did not fail, and gives the fastest single transfer
  ``alpha_sb + s_l / beta_sb``;
- state that lived only on failed machines comes from the last checkpoint, kept in a
  :class:`CheckpointStore` (by default one copy in every region), and training rolls back to
  that checkpoint (the trace replay, :mod:`hulk_env.replacement.traces`, counts the iterations
  redone; the one-shot totals here do not, as every method pays the same).

Seconds: transfers over one directed link ``a -> b`` are serialised (``alpha_ab + bytes_ab /
beta_ab``, the latency paid once since the copies stream back to back); different links run in
parallel, as in the cost model where each direction of each machine pair is its own resource.
A checkpoint store's egress is one shared link: all reads from one store take at least
``min alpha + bytes_store / egress_bps``. The migration time is the slowest of all of these:
``migration_s = max(max_links, max_stores)``. Over a horizon of ``H`` iterations the total is
``total_s = migration_s + H x iteration_time_s`` (:func:`horizon_totals`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.units import GBPS, MS
from hulk_env.workload import Workload

CHECKPOINT = -1  # the source of a transfer read from the checkpoint store
DEFAULT_EGRESS_BPS = 10 * GBPS  # a checkpoint store's total read bandwidth (10 Gbps)
DEFAULT_LOCAL_LATENCY_S = 0.5 * MS  # store to the machine it sits next to
_CHUNK = 256  # candidates per batch chunk: [chunk, links] stays a few MB


@dataclass(frozen=True)
class CheckpointStore:
    """Where the last checkpoint lives and how fast it can be read.

    A store sits next to the first machine of its region (the region's gateway) and reaches
    every other machine over that machine's links (latency and bandwidth from the cluster),
    capped by its egress bandwidth; all reads from one store share that egress.

    Attributes:
        region: the store's region, or ``None`` for a copy in every region (each machine reads
            from its own region's copy).
        egress_bps: bytes/s the store can send in all, shared by its reads.
        local_latency_s: latency to the gateway machine itself.
    """

    region: str | None = None
    egress_bps: float = DEFAULT_EGRESS_BPS
    local_latency_s: float = DEFAULT_LOCAL_LATENCY_S

    def __post_init__(self) -> None:
        if not (np.isfinite(self.egress_bps) and self.egress_bps > 0):
            raise HulkInputError(f"must be positive and finite, got {self.egress_bps}", field="egress_bps")
        if not (np.isfinite(self.local_latency_s) and self.local_latency_s >= 0):
            raise HulkInputError(f"must be >= 0 and finite, got {self.local_latency_s}", field="local_latency_s")

    def label(self) -> str:
        return "every region" if self.region is None else f"region:{self.region}"


class StoreLinks(NamedTuple):
    """The checkpoint stores of a cluster and their links to every machine.

    Attributes:
        names: one label per store.
        serving: ``[M]`` the store each machine reads from.
        latency_s: ``[M]`` latency from its store to each machine.
        bandwidth_bps: ``[M]`` bandwidth from its store to each machine (egress-capped).
    """

    names: tuple[str, ...]
    serving: np.ndarray
    latency_s: np.ndarray
    bandwidth_bps: np.ndarray


def store_links(cluster: Cluster, store: CheckpointStore) -> StoreLinks:
    """Each machine's checkpoint store and the link to it (see :class:`CheckpointStore`)."""
    regions = cluster.regions
    gateways = np.array([int(np.argmax(cluster.region_index == k)) for k in range(len(regions))])
    if store.region is None:
        serving = cluster.region_index.copy()
        names = tuple(f"checkpoint@{r}" for r in regions)
        gate = gateways[serving]
    else:
        matches = [k for k, r in enumerate(regions) if r.lower() == store.region.strip().lower()]
        if not matches:
            raise HulkInputError(
                f"unknown checkpoint region '{store.region}'; regions of cluster '{cluster.name}': "
                f"{', '.join(regions)}",
                field="checkpoint",
            )
        serving = np.zeros(cluster.num_machines, dtype=np.int64)
        names = (f"checkpoint@{regions[matches[0]]}",)
        gate = np.full(cluster.num_machines, gateways[matches[0]])
    dest = np.arange(cluster.num_machines)
    latency = np.where(gate == dest, store.local_latency_s, cluster.latency_s[gate, dest])
    bandwidth = np.minimum(store.egress_bps, cluster.bandwidth_bps[gate, dest])
    return StoreLinks(names, serving, latency, bandwidth)


@dataclass(frozen=True, eq=False)
class Sources:
    """Where each layer's state would come from, for every possible destination machine.

    Fixed by the old placement and the failures, so it is computed once and serves any number
    of candidate new placements.

    Attributes:
        num_machines: ``M``.
        state_bytes: ``[L]`` state bytes of one copy of each layer.
        held: ``[L, M]`` machine survived and held the layer in the old placement.
        lost: ``[L]`` no surviving machine held the layer: it comes from the checkpoint.
        source: ``[L, M]`` machine a copy to ``b`` comes from (``CHECKPOINT`` for lost layers,
            ``b`` itself where ``held``).
        link: ``[L, M]`` id of the link a copy to ``b`` uses (``-1`` where ``held``): ``a * M +
            b`` for machine links, ``M * M + k * M + b`` for store ``k``.
        link_latency_s, link_bandwidth_bps: per link id.
        link_store: per link id, its store (``-1`` for machine links).
        stores: the checkpoint stores.
        store_egress_bps: their shared egress.
    """

    num_machines: int
    state_bytes: np.ndarray
    held: np.ndarray
    lost: np.ndarray
    source: np.ndarray
    link: np.ndarray
    link_latency_s: np.ndarray
    link_bandwidth_bps: np.ndarray
    link_store: np.ndarray
    stores: StoreLinks
    store_egress_bps: float


def failed_mask(cluster: Cluster, failed: np.ndarray | list[int] | tuple[int, ...]) -> np.ndarray:
    """``[M]`` bool from failed machine indices (or a mask); out-of-range indices are an error."""
    arr = np.asarray(failed)
    if arr.dtype == bool:
        if arr.shape != (cluster.num_machines,):
            raise HulkInputError(f"failed mask has shape {arr.shape}, expected ({cluster.num_machines},)")
        return arr.copy()
    idx = arr.astype(np.int64).ravel()
    if idx.size and (idx.min() < 0 or idx.max() >= cluster.num_machines):
        raise HulkInputError(f"failed machine indices must lie in 0..{cluster.num_machines - 1}")
    mask = np.zeros(cluster.num_machines, dtype=bool)
    mask[idx] = True
    return mask


def sources(
    cluster: Cluster,
    workload: Workload,
    old: np.ndarray,
    failed: np.ndarray,
    store: CheckpointStore | None = None,
    stale: np.ndarray | None = None,
) -> Sources:
    """The :class:`Sources` of an old placement ``[D, L]`` with ``failed`` (``[M]`` bool) machines.

    ``stale`` (``[M]`` bool) marks machines that are up but lost their state (they failed and
    came back since the old placement started): they serve nothing.
    """
    store = store or CheckpointStore()
    old = cost.validate_placement(old, cluster, workload)[0]
    m, n_layers = cluster.num_machines, workload.num_layers
    state = workload.state_bytes_per_param * workload.params
    held = np.zeros((n_layers, m), dtype=bool)
    held[np.broadcast_to(np.arange(n_layers), old.shape), old] = True
    held &= ~failed[None, :]
    if stale is not None:
        held &= ~stale[None, :]
    lost = ~held.any(axis=1)
    links = store_links(cluster, store)
    # Fastest single transfer from each surviving holder to each destination.
    with np.errstate(divide="ignore"):
        transfer = cluster.latency_s[None] + state[:, None, None] / cluster.bandwidth_bps[None]  # [L, s, b]
    transfer = np.where(held[:, :, None], transfer, np.inf)
    best = np.argmin(transfer, axis=1)  # [L, M]
    dest = np.broadcast_to(np.arange(m), (n_layers, m))
    source = np.where(lost[:, None], CHECKPOINT, np.where(held, dest, best))
    num_stores = len(links.names)
    link = np.where(
        held, -1, np.where(lost[:, None], m * m + links.serving[dest] * m + dest, best * m + dest)
    )
    store_lat = np.zeros(num_stores * m)
    store_bw = np.ones(num_stores * m)
    store_slot = links.serving * m + np.arange(m)
    store_lat[store_slot] = links.latency_s
    store_bw[store_slot] = links.bandwidth_bps
    return Sources(
        num_machines=m,
        state_bytes=state,
        held=held,
        lost=lost,
        source=source,
        link=link,
        link_latency_s=np.concatenate([cluster.latency_s.ravel(), store_lat]),
        link_bandwidth_bps=np.concatenate([cluster.bandwidth_bps.ravel(), store_bw]),
        link_store=np.concatenate([np.full(m * m, -1), np.repeat(np.arange(num_stores), m)]),
        stores=links,
        store_egress_bps=store.egress_bps,
    )


def needed_copies(src: Sources, new: np.ndarray) -> np.ndarray:
    """``[N, L, M]`` bool: machine ``b`` of each new placement needs a copy of layer ``l``."""
    n, d, n_layers = new.shape
    need = np.zeros((n, n_layers, src.num_machines), dtype=bool)
    need[np.arange(n)[:, None, None], np.arange(n_layers)[None, None, :], new] = True
    need &= ~src.held[None]
    return need


class BatchMigration(NamedTuple):
    """Migration of a batch of new placements.

    Attributes:
        migration_s: ``[N]`` seconds until every copy has arrived.
        moved_bytes: ``[N]`` bytes sent (over machine links and from the checkpoint).
        checkpoint_bytes: ``[N]`` of them, read from the checkpoint.
    """

    migration_s: np.ndarray
    moved_bytes: np.ndarray
    checkpoint_bytes: np.ndarray


def link_bytes(src: Sources, new: np.ndarray) -> np.ndarray:
    """``[N, links]`` bytes each link carries for each new placement ``[N, D, L]``."""
    need = needed_copies(src, new)
    n = len(new)
    rows, layers, dests = np.nonzero(need)
    ids = src.link[layers, dests]
    num_links = len(src.link_latency_s)
    return np.bincount(
        rows * num_links + ids, weights=src.state_bytes[layers], minlength=n * num_links
    ).reshape(n, num_links)


def link_seconds(src: Sources, bytes_per_link: np.ndarray) -> np.ndarray:
    """``[N, links]`` ``alpha + bytes / beta`` for links that carry bytes, 0 for the others."""
    busy = bytes_per_link > 0
    return np.where(busy, src.link_latency_s + bytes_per_link / src.link_bandwidth_bps, 0.0)


def store_seconds(src: Sources, bytes_per_link: np.ndarray) -> np.ndarray:
    """``[N, stores]`` time of each store's shared egress: ``min alpha + bytes / egress``."""
    m = src.num_machines
    num_stores = len(src.stores.names)
    per_dest = bytes_per_link[:, m * m :].reshape(len(bytes_per_link), num_stores, m)
    total = per_dest.sum(axis=2)
    lat = np.where(per_dest > 0, src.link_latency_s[m * m :].reshape(num_stores, m), np.inf).min(axis=2)
    return np.where(total > 0, lat + total / src.store_egress_bps, 0.0)


def migrations(src: Sources, new: np.ndarray) -> BatchMigration:
    """Migration time and bytes of a batch ``[N, D, L]`` of new placements (full indices)."""
    new = np.asarray(new, dtype=np.int64)
    out_s, out_b, out_c = (np.empty(len(new)) for _ in range(3))
    m2 = src.num_machines**2
    for start in range(0, len(new), _CHUNK):
        chunk = link_bytes(src, new[start : start + _CHUNK])
        stop = start + len(chunk)
        out_s[start:stop] = np.maximum(
            link_seconds(src, chunk).max(axis=1, initial=0.0),
            store_seconds(src, chunk).max(axis=1, initial=0.0),
        )
        out_b[start:stop] = chunk.sum(axis=1)
        out_c[start:stop] = chunk[:, m2:].sum(axis=1)
    return BatchMigration(out_s, out_b, out_c)


class Transfer(NamedTuple):
    """One copy of one layer's state.

    Attributes:
        layer: the layer.
        source: the machine it comes from, or ``CHECKPOINT``.
        dest: the machine it goes to.
        bytes: bytes sent.
    """

    layer: int
    source: int
    dest: int
    bytes: float


class LinkLoad(NamedTuple):
    """What one link (or a store's egress) carries and how long it is busy.

    Attributes:
        source: a machine name or a checkpoint store's label.
        dest: a machine name, or ``"*"`` for a store's shared egress.
        bytes: bytes carried.
        seconds: ``alpha + bytes / beta``.
    """

    source: str
    dest: str
    bytes: float
    seconds: float


@dataclass(frozen=True)
class Migration:
    """The migration from an old placement to a new one after failures.

    Attributes:
        migration_s: seconds until every copy has arrived (the slowest link or store).
        moved_bytes: bytes sent in all.
        checkpoint_bytes: of them, read from the checkpoint (state that lived only on failed
            machines).
        lost_layers: layers whose state survived nowhere (training rolls back to the checkpoint).
        transfers: every copy.
        links: every busy link and store egress, slowest first.
    """

    migration_s: float
    moved_bytes: float
    checkpoint_bytes: float
    lost_layers: tuple[int, ...]
    transfers: tuple[Transfer, ...]
    links: tuple[LinkLoad, ...]

    @property
    def bottleneck(self) -> LinkLoad | None:
        """The link that finishes last (``None`` when nothing moves)."""
        return self.links[0] if self.links else None


def migration(cluster: Cluster, src: Sources, new: np.ndarray) -> Migration:
    """The full :class:`Migration` of one new placement ``[D, L]`` (full machine indices)."""
    new = np.asarray(new, dtype=np.int64)[None]
    need = needed_copies(src, new)[0]
    layers, dests = np.nonzero(need)
    transfers = tuple(
        Transfer(int(layer), int(src.source[layer, b]), int(b), float(src.state_bytes[layer]))
        for layer, b in zip(layers, dests, strict=True)
    )
    per_link = link_bytes(src, new)
    link_s = link_seconds(src, per_link)[0]
    store_s = store_seconds(src, per_link)[0]
    m = src.num_machines
    names = [mc.name for mc in cluster.machines]
    loads = []
    for i in np.flatnonzero(per_link[0] > 0):
        source = names[i // m] if i < m * m else src.stores.names[(i - m * m) // m]
        loads.append(LinkLoad(source, names[i % m], float(per_link[0, i]), float(link_s[i])))
    for k in np.flatnonzero(store_s > 0):
        store_total = float(per_link[0, m * m + k * m : m * m + (k + 1) * m].sum())
        loads.append(LinkLoad(src.stores.names[k], "*", store_total, float(store_s[k])))
    loads.sort(key=lambda x: -x.seconds)
    batch = migrations(src, new)
    return Migration(
        migration_s=float(batch.migration_s[0]),
        moved_bytes=float(batch.moved_bytes[0]),
        checkpoint_bytes=float(batch.checkpoint_bytes[0]),
        lost_layers=tuple(int(x) for x in np.flatnonzero(src.lost & need.any(axis=1))),
        transfers=transfers,
        links=tuple(loads),
    )


class HorizonTotals(NamedTuple):
    """The objective of a re-placement over a batch: ``[N]`` arrays.

    Attributes:
        total_s: ``migration_s + horizon x iteration_time_s``; ``inf`` where memory does not fit.
        migration_s: seconds of migration.
        iteration_time_s: iteration times (memory not considered).
        memory_feasible: whether each placement fits in memory.
    """

    total_s: np.ndarray
    migration_s: np.ndarray
    iteration_time_s: np.ndarray
    memory_feasible: np.ndarray


def horizon_totals(
    cluster: Cluster, workload: Workload, src: Sources, new: np.ndarray, horizon_iterations: int
) -> HorizonTotals:
    """``migration_s + horizon x iteration_time_s`` of a batch ``[N, D, L]`` (full indices).

    One cost-model evaluation per placement (``cost.iteration_times``, the search fast path).
    """
    new = np.asarray(new, dtype=np.int64)
    times = cost.iteration_times(cluster, workload, new)
    mig = migrations(src, new).migration_s
    total = np.where(times.memory_feasible, mig + horizon_iterations * times.iteration_time_s, np.inf)
    return HorizonTotals(total, mig, times.iteration_time_s, times.memory_feasible)
