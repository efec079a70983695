"""Machines and clusters: the validated record every other module trusts.

A :class:`Cluster` is validated on construction, so every other module may trust it: matrices
are ``[M, M]``, finite off the diagonal, non-negative, latency symmetric, diagonal latency 0 and
diagonal bandwidth ``inf`` (a layer never waits for a link inside its own machine).
:func:`geo_cluster` builds a synthetic cluster over real cities (the built-in clusters of
:mod:`hulk_env.cluster.builtin` and the random generators use it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.hardware import geo
from hulk_env.hardware.gpus import DEFAULT_MFU, gpu_by_name
from hulk_env.units import GB, TFLOPS, bytes_per_s_to_gbps, s_to_ms
from hulk_env.validation.reading import check_unique_names
from hulk_env.validation.sizes import check_machine_count

# How every output states latency: the model and the files' ``latency_ms`` are one-way.
LATENCY_CONVENTION = "latency is one-way (half the round-trip time, RTT / 2)"


@dataclass(frozen=True)
class Machine:
    """One machine (server) of a cluster.

    Attributes:
        name: unique name.
        region: the city or cloud region it sits in.
        gpu: GPU model name (a key of :mod:`hulk_env.hardware.gpus`), or ``"custom"``.
        num_gpus: GPUs in the machine.
        flops: effective FLOP/s of the whole machine (num_gpus x peak x utilisation).
        memory_bytes: total GPU memory of the machine, bytes.
        lat: latitude in degrees, if known.
        lon: longitude in degrees, if known.
        intra_node_bandwidth_bps: one GPU's bandwidth to the others of this machine, bytes/s
            per direction; None: the GPU catalog's (:mod:`hulk_env.hardware.gpus`), PCIe 3
            for a custom machine. Used only by tensor-parallel plans (:mod:`hulk_env.parallelism`).
        usd_per_hour: rental price; None: the price list's (:mod:`hulk_env.money`).
    """

    name: str
    region: str
    gpu: str
    num_gpus: int
    flops: float
    memory_bytes: float
    lat: float | None = None
    lon: float | None = None
    intra_node_bandwidth_bps: float | None = None
    usd_per_hour: float | None = None

    def __post_init__(self) -> None:
        for name in ("intra_node_bandwidth_bps", "usd_per_hour"):
            value = getattr(self, name)
            if value is not None and (not np.isfinite(float(value)) or float(value) < 0
                                      or (name == "intra_node_bandwidth_bps" and float(value) == 0)):
                raise HulkInputError(
                    f"must be a finite number > 0 (>= 0 for a price), got {value!r}",
                    source=f"machine '{self.name}'",
                    field=name,
                )
        for name in ("flops", "memory_bytes"):
            value = float(getattr(self, name))
            if not np.isfinite(value) or value <= 0:
                raise HulkInputError(
                    f"must be a positive finite number, got {value!r}",
                    source=f"machine '{self.name}'",
                    field=name,
                )
        if int(self.num_gpus) < 1:
            raise HulkInputError(
                f"must be at least 1, got {self.num_gpus!r}",
                source=f"machine '{self.name}'",
                field="num_gpus",
            )


@dataclass(frozen=True, eq=False)
class Cluster:
    """Machines plus link matrices, all in SI units.

    Attributes:
        machines: the M machines, in index order.
        latency_s: ``[M, M]`` one-way latency in seconds (RTT / 2 for ping data), symmetric.
        bandwidth_bps: ``[M, M]`` link bandwidth in bytes per second; ``inf`` on the diagonal.
        imputed: ``[M, M]`` bool, True where the pair was not measured but estimated.
        name: a label for summaries.
        link_notes: what the loader knows about a pair's numbers, by unordered pair ``(i, j)``
            with ``i < j`` (``"rtt_ms 24 in links entry at line 9"``, ``"median of 3 measured
            Beijing-Tokyo pairs"``); :func:`hulk_env.cluster.links.link_rows` describes the
            others from the regions and coordinates.
    """

    machines: tuple[Machine, ...]
    latency_s: np.ndarray
    bandwidth_bps: np.ndarray
    imputed: np.ndarray = field(default=None)  # type: ignore[assignment]
    name: str = "cluster"
    link_notes: Mapping[tuple[int, int], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        machines = tuple(self.machines)
        object.__setattr__(self, "machines", machines)
        m = len(machines)
        if m < 1:
            raise HulkInputError("a cluster needs at least one machine", source=self.name)
        names = [mc.name for mc in machines]
        check_unique_names(names, self.name)  # ignoring case: "SJ" and "sj" read alike
        lat = np.array(self.latency_s, dtype=np.float64, copy=True)
        bw = np.array(self.bandwidth_bps, dtype=np.float64, copy=True)
        imp = (
            np.zeros((m, m), dtype=bool)
            if self.imputed is None
            else np.array(self.imputed, dtype=bool, copy=True)
        )
        for label, arr in (("latency_s", lat), ("bandwidth_bps", bw), ("imputed", imp)):
            if arr.shape != (m, m):
                raise HulkInputError(
                    f"has shape {arr.shape}, expected ({m}, {m}) for {m} machines",
                    source=self.name,
                    field=label,
                )
        off = ~np.eye(m, dtype=bool)
        if not np.all(np.isfinite(lat)):
            raise HulkInputError("latency must be finite", source=self.name, field="latency_s")
        if np.any(lat < 0):
            i, j = np.argwhere(lat < 0)[0]
            raise HulkInputError(
                f"negative latency between '{names[i]}' and '{names[j]}'",
                source=self.name,
                field="latency_s",
            )
        if not np.allclose(lat, lat.T, rtol=1e-9, atol=0.0):
            i, j = np.argwhere(~np.isclose(lat, lat.T, rtol=1e-9, atol=0.0))[0]
            raise HulkInputError(
                f"latency is not symmetric between '{names[i]}' and '{names[j]}'",
                source=self.name,
                field="latency_s",
            )
        if np.any(~np.isfinite(bw[off])) or np.any(bw[off] <= 0) or np.any(np.isnan(bw)):
            bad = off & (~np.isfinite(bw) | (bw <= 0))
            i, j = np.argwhere(bad)[0]
            raise HulkInputError(
                f"bandwidth between '{names[i]}' and '{names[j]}' must be positive and finite",
                source=self.name,
                field="bandwidth_bps",
            )
        np.fill_diagonal(lat, 0.0)
        np.fill_diagonal(bw, np.inf)
        np.fill_diagonal(imp, False)
        for arr in (lat, bw, imp):
            arr.setflags(write=False)
        object.__setattr__(self, "latency_s", lat)
        object.__setattr__(self, "bandwidth_bps", bw)
        object.__setattr__(self, "imputed", imp)
        notes = {(min(i, j), max(i, j)): str(note) for (i, j), note in dict(self.link_notes).items()}
        object.__setattr__(self, "link_notes", MappingProxyType(notes))

    # -- derived arrays (read-only, computed once) --------------------------------------------
    @property
    def num_machines(self) -> int:
        return len(self.machines)

    @cached_property
    def flops(self) -> np.ndarray:
        """``[M]`` effective FLOP/s per machine."""
        return _frozen(np.array([mc.flops for mc in self.machines], dtype=np.float64))

    @cached_property
    def num_gpus(self) -> np.ndarray:
        """``[M]`` GPUs per machine (int64)."""
        return _frozen(np.array([mc.num_gpus for mc in self.machines], dtype=np.int64))

    @cached_property
    def intra_node_bandwidth_bps(self) -> np.ndarray:
        """``[M]`` one GPU's bandwidth to the others of its machine, bytes/s per direction: the
        machine's own figure, else its GPU's datasheet value (PCIe 3 for custom machines)."""
        from hulk_env.hardware.gpus import GPUS, PCIE3_BPS

        return _frozen(np.array([
            mc.intra_node_bandwidth_bps if mc.intra_node_bandwidth_bps is not None
            else (GPUS[mc.gpu].intra_node_bps if mc.gpu in GPUS else PCIE3_BPS)
            for mc in self.machines
        ], dtype=np.float64))

    @cached_property
    def pair_bandwidth_bps(self) -> np.ndarray:
        """``[M, M]`` the slower direction of each machine pair (``inf`` on the diagonal)."""
        return _frozen(np.minimum(self.bandwidth_bps, self.bandwidth_bps.T))

    @cached_property
    def memory_bytes(self) -> np.ndarray:
        """``[M]`` GPU memory per machine, bytes."""
        return _frozen(np.array([mc.memory_bytes for mc in self.machines], dtype=np.float64))

    @cached_property
    def regions(self) -> tuple[str, ...]:
        """Distinct regions in order of first appearance."""
        return tuple(dict.fromkeys(mc.region for mc in self.machines))

    @cached_property
    def region_index(self) -> np.ndarray:
        """``[M]`` index of each machine's region in :attr:`regions`."""
        lookup = {r: i for i, r in enumerate(self.regions)}
        return _frozen(np.array([lookup[mc.region] for mc in self.machines], dtype=np.int64))

    @property
    def num_imputed_pairs(self) -> int:
        """Unordered machine pairs whose link was estimated, not measured."""
        return int(np.triu(self.imputed, 1).sum())

    def subset(self, indices: list[int] | np.ndarray, name: str | None = None) -> Cluster:
        """The cluster restricted to ``indices`` (in that order)."""
        idx = np.asarray(indices, dtype=np.int64)
        new = {int(old): k for k, old in enumerate(idx)}
        return Cluster(
            machines=tuple(self.machines[i] for i in idx),
            latency_s=self.latency_s[np.ix_(idx, idx)],
            bandwidth_bps=self.bandwidth_bps[np.ix_(idx, idx)],
            imputed=self.imputed[np.ix_(idx, idx)],
            name=name or self.name,
            link_notes={
                (new[i], new[j]): note for (i, j), note in self.link_notes.items() if i in new and j in new
            },
        )

    def to_networkx(self):
        """A complete undirected ``networkx.Graph``: machine attributes on nodes, links on edges.

        Edge attributes: ``latency_s``, ``bandwidth_bps`` (the slower direction), ``imputed``.
        """
        import networkx as nx

        g = nx.Graph(name=self.name)
        for i, mc in enumerate(self.machines):
            g.add_node(
                i,
                name=mc.name,
                region=mc.region,
                gpu=mc.gpu,
                num_gpus=mc.num_gpus,
                flops=mc.flops,
                memory_bytes=mc.memory_bytes,
            )
        m = self.num_machines
        for i in range(m):
            for j in range(i + 1, m):
                g.add_edge(
                    i,
                    j,
                    latency_s=float(self.latency_s[i, j]),
                    bandwidth_bps=float(min(self.bandwidth_bps[i, j], self.bandwidth_bps[j, i])),
                    imputed=bool(self.imputed[i, j]),
                )
        return g

    def summary(self) -> dict:
        """A JSON-ready summary (used by ``hulk show cluster --json``)."""
        m = self.num_machines
        off = ~np.eye(m, dtype=bool)
        lat_ms = s_to_ms(self.latency_s[off]) if m > 1 else np.zeros(1)
        bw_gbps = bytes_per_s_to_gbps(self.bandwidth_bps[off]) if m > 1 else np.zeros(1)
        regions = []
        for r in self.regions:
            members = [mc for mc in self.machines if mc.region == r]
            regions.append(
                {
                    "region": r,
                    "machines": len(members),
                    "gpus": sum(mc.num_gpus for mc in members),
                    "tflops": sum(mc.flops for mc in members) / TFLOPS,
                    "memory_gb": sum(mc.memory_bytes for mc in members) / GB,
                }
            )
        return {
            "name": self.name,
            "machines": m,
            "regions": len(self.regions),
            "gpus": int(sum(mc.num_gpus for mc in self.machines)),
            "total_flops": float(self.flops.sum()),
            "total_memory_bytes": float(self.memory_bytes.sum()),
            "imputed_pairs": self.num_imputed_pairs,
            "latency_convention": LATENCY_CONVENTION,
            "latency_ms": {
                "min": float(lat_ms.min()),
                "median": float(np.median(lat_ms)),
                "max": float(lat_ms.max()),
            },
            "bandwidth_gbps": {
                "min": float(bw_gbps.min()),
                "median": float(np.median(bw_gbps)),
                "max": float(bw_gbps.max()),
            },
            "by_region": regions,
        }


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def machine_prefix(region: str) -> str:
    """``"New Delhi"`` -> ``"new-delhi"``: the prefix of generated machine names."""
    return re.sub(r"[^a-z0-9]+", "-", region.lower()).strip("-") or "machine"


# ---- synthetic clusters over real cities --------------------------------------------------------


def geo_cluster(
    cities: Sequence[str],
    machines_per_city: int | Sequence[int],
    gpu_mix: Sequence[tuple[str, int, float]],
    seed: int,
    name: str,
    link_noise: float = 0.0,
    mfu: float = DEFAULT_MFU,
) -> Cluster:
    """A synthetic cluster over real cities: GPUs drawn from a mix, links from the geo model.

    All pairs are flagged ``imputed``: they come from the model, not from a measurement.

    Args:
        cities: city names (keys or aliases of :data:`hulk_env.hardware.geo.CITIES`).
        machines_per_city: machines in every city, or one count per city.
        gpu_mix: ``(gpu name, GPUs per machine, weight)`` choices; each machine draws one.
        seed: seeds the GPU draws and the link noise; same seed, same cluster.
        name: the cluster's name.
        link_noise: sigma of a log-normal factor on each pair's RTT (0 = the plain model);
            a noisy RTT never falls below the physical minimum for its distance.
        mfu: model-FLOPs utilisation turning peak into effective FLOP/s.

    Returns:
        The cluster; machines are named ``<city-slug>-<k>``.
    """
    places = [geo.get_city(c) for c in cities]
    counts = (
        [int(machines_per_city)] * len(places)
        if isinstance(machines_per_city, (int, np.integer))
        else [int(n) for n in machines_per_city]
    )
    if len(counts) != len(places) or any(n < 0 for n in counts):
        raise HulkInputError(
            f"machines_per_city needs one non-negative count per city, got {counts}", source=name
        )
    check_machine_count(sum(counts), name)
    specs = [(gpu_by_name(g), int(n), float(w)) for g, n, w in gpu_mix]
    weights = np.array([w for _, _, w in specs], dtype=np.float64)
    if not specs or np.any(weights < 0) or weights.sum() <= 0:
        raise HulkInputError(
            "gpu_mix needs at least one choice with a positive weight", source=name
        )
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(specs), size=sum(counts), p=weights / weights.sum())
    machines = []
    for city, count in zip(places, counts, strict=True):
        for k in range(count):
            gpu, n, _ = specs[picks[len(machines)]]
            machines.append(
                Machine(
                    name=f"{machine_prefix(city.name)}-{k}",
                    region=city.name,
                    gpu=gpu.name,
                    num_gpus=n,
                    flops=n * gpu.effective_flops(mfu),
                    memory_bytes=n * gpu.memory_bytes,
                    lat=city.lat,
                    lon=city.lon,
                )
            )
    lats = np.array([mc.lat for mc in machines])
    lons = np.array([mc.lon for mc in machines])
    regions = [mc.region for mc in machines]
    rtt_ms = geo.modelled_rtt_ms(lats, lons, regions)
    if link_noise > 0:
        noise = np.triu(np.exp(link_noise * rng.standard_normal(rtt_ms.shape)), 1)
        km = geo.great_circle_km(lats[:, None], lons[:, None], lats[None, :], lons[None, :])
        rtt_ms = np.maximum(rtt_ms * (noise + noise.T), geo.min_rtt_ms_physical(km))
    latency_s, bandwidth_bps = geo.links_from_rtt_ms(rtt_ms, geo.same_region(regions))
    m = len(machines)
    return Cluster(tuple(machines), latency_s, bandwidth_bps, ~np.eye(m, dtype=bool), name=name)

