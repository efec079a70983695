"""Dollars per training iteration: GPU rental plus egress of the bytes between machines.

``usd_per_iteration = T_iter / 3600 * sum_{m used} usd_per_hour_m + sum_{a != b} bytes_ab /
1e9 * egress_usd_per_gb(tier_ab)``, reported beside the time (not inside
:class:`hulk_env.cost.IterationCost`). ``T_iter`` is the cost model's (under DiLoCo: per inner
step), ``bytes_ab`` :func:`hulk_env.traffic.link_traffic_bytes` (one source of bytes per link;
DiLoCo's outer exchange amortised per inner step). A machine is *used* when it holds a slot:
the others can be released. Egress is charged to the sender, by the pair's tier (Sailor,
SOSP'25, prices the same two parts): ``same_zone`` (the same ``region`` label), ``same_region``
(other labels of one metro), ``same_continent``, ``across_continents``, ``across_providers``
(cloud regions of different providers). Prices and sources:
``hulk_env/cluster/data/prices/`` (``SOURCE.md``, dated).
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.hardware import cloud_regions, geo
from hulk_env.workload import Workload

PRICES_DIR = Path(__file__).parent / "cluster" / "data" / "prices"
PRICES_DATE = "2025-06"  # the list in effect when checked (2026-12): AWS cut P4/P5 prices in June 2025
TIERS = ("same_zone", "same_region", "same_continent", "across_continents", "across_providers")


@lru_cache(maxsize=1)
def gpu_usd_per_hour() -> dict[str, float]:
    """Default on-demand price per GPU-hour by catalog GPU name (``gpu_usd_per_hour.csv``)."""
    with open(PRICES_DIR / "gpu_usd_per_hour.csv", newline="", encoding="utf-8") as f:
        return {row["gpu"]: float(row["usd_per_gpu_hour"]) for row in csv.DictReader(f)}


@lru_cache(maxsize=1)
def egress_usd_per_gb() -> dict[str, float]:
    """Egress price per GB by tier (``egress_usd_per_gb.csv``)."""
    with open(PRICES_DIR / "egress_usd_per_gb.csv", newline="", encoding="utf-8") as f:
        return {row["tier"]: float(row["usd_per_gb"]) for row in csv.DictReader(f)}


def usd_per_flops_hour() -> float:
    """The median list price per hour of one effective FLOP/s over the priced catalog GPUs: the
    imputation for a machine without a price (``impute=True``)."""
    from hulk_env.hardware.gpus import GPUS

    return float(np.median([usd / GPUS[name].effective_flops() for name, usd in gpu_usd_per_hour().items()]))


def machine_usd_per_hour(cluster: Cluster, impute: bool = False) -> np.ndarray:
    """``[M]`` rental price per hour: the machine's ``usd_per_hour``, else GPUs x the list price,
    else (``impute``) its FLOP/s x :func:`usd_per_flops_hour`.

    Raises:
        HulkInputError: a machine with no price (a custom or consumer GPU) and ``impute`` off:
            give ``usd_per_hour``.
    """
    prices = gpu_usd_per_hour()
    out = []
    for mc in cluster.machines:
        if mc.usd_per_hour is not None:
            out.append(float(mc.usd_per_hour))
        elif mc.gpu in prices:
            out.append(mc.num_gpus * prices[mc.gpu])
        elif impute:
            out.append(mc.flops * usd_per_flops_hour())
        else:
            raise HulkInputError(
                f"machine '{mc.name}' ({mc.gpu}) has no list price; give usd_per_hour in the cluster "
                f"file (priced GPUs: {', '.join(prices)})",
                field="usd_per_hour",
            )
    return np.array(out)


class _Place(NamedTuple):
    provider: str | None
    metro: str | None
    continent: str | None


def _place(region: str) -> _Place:
    found = cloud_regions.find_region(region)
    if found is not None:
        return _Place(found.provider, found.metro, found.continent)
    city = geo.find_city(region)
    return _Place(None, city.name, city.continent) if city is not None else _Place(None, None, None)


def tier_matrix(cluster: Cluster) -> np.ndarray:
    """``[M, M]`` tier index (into :data:`TIERS`) of each machine pair (module docstring); an
    unknown place counts as across continents."""
    places = [_place(mc.region) for mc in cluster.machines]
    labels = [mc.region for mc in cluster.machines]
    m = cluster.num_machines
    out = np.zeros((m, m), dtype=np.int64)
    for a in range(m):
        for b in range(m):
            pa, pb = places[a], places[b]
            if labels[a] == labels[b]:
                tier = "same_zone"
            elif pa.provider and pb.provider and pa.provider != pb.provider:
                tier = "across_providers"
            elif pa.metro is not None and pa.metro == pb.metro:
                tier = "same_region"
            elif pa.continent is not None and pa.continent == pb.continent:
                tier = "same_continent"
            else:
                tier = "across_continents"
            out[a, b] = TIERS.index(tier)
    return out


class Dollars(NamedTuple):
    """Dollars of one iteration: ``rental_usd + egress_usd = usd_per_iteration``."""

    usd_per_iteration: float
    rental_usd: float
    egress_usd: float
    egress_bytes: float


def dollars(
    cluster: Cluster, workload: Workload, placement: np.ndarray, iteration_time_s: float | None = None,
    impute: bool = False,
) -> Dollars:
    """The breakdown of :func:`usd_per_iteration` (``iteration_time_s`` from the cost model
    when not given; ``impute``: see :func:`machine_usd_per_hour`)."""
    from hulk_env import cost
    from hulk_env.instance import Instance
    from hulk_env.traffic import link_traffic_bytes

    mach = np.asarray(placement, dtype=np.int64).reshape(workload.data_parallel, workload.num_layers)
    if iteration_time_s is None:
        iteration_time_s = float(cost.evaluate(cluster, workload, mach).iteration_time_s)
    used = np.unique(mach)
    rental = iteration_time_s / 3600.0 * float(machine_usd_per_hour(cluster, impute)[used].sum())
    sent = link_traffic_bytes(Instance(cluster, workload), mach)
    price = np.array([egress_usd_per_gb()[t] for t in TIERS])[tier_matrix(cluster)]
    egress = float((sent / 1e9 * price).sum())
    return Dollars(rental + egress, rental, egress, float(sent.sum()))


def usd_per_iteration(cluster: Cluster, workload: Workload, placement: np.ndarray) -> float:
    """Dollars of one training iteration (per inner step under DiLoCo): rental of the machines
    used for the iteration's time plus egress of its bytes between machines."""
    return dollars(cluster, workload, placement).usd_per_iteration
