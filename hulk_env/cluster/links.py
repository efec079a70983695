"""Every link of a cluster, with where its numbers come from (``hulk show cluster --links``).

Latency is one-way throughout (:data:`~hulk_env.cluster.model.LATENCY_CONVENTION`); each row
also gives the round trip. A pair is ``measured`` when a file or the paper's ``edge.txt`` gave
it, else ``imputed``; ``basis`` says from what: the loader's note where it left one
(:attr:`Cluster.link_notes`), otherwise the model that set it, the LAN inside a region or the
distance model of :mod:`hulk_env.hardware.geo` over the machines' great-circle distance.

Latency and bandwidth are labelled apart (``latency_source``, ``bandwidth_source``): a latency
is ``measured`` (a file's ``latency_ms``/``rtt_ms``, the paper's pings), ``imputed`` from other
measurements (the paper's city medians), ``imputed from geography`` (the distance model) or the
``LAN model``; a bandwidth is ``measured`` only where a file gave ``bandwidth_gbps``, otherwise
``fitted from RTT`` (the WAN fit of :func:`hulk_env.hardware.geo.wan_bandwidth_gbps` over a
measured or imputed round trip), ``imputed from geography`` (that fit over the distance model's
round trip) or the ``LAN model``. Loaders mark a given bandwidth in the pair's note
(:data:`BANDWIDTH_GIVEN`).
"""

from __future__ import annotations

import numpy as np

from hulk_env.cluster.model import Cluster
from hulk_env.hardware import geo
from hulk_env.units import bytes_per_s_to_gbps, s_to_ms

BANDWIDTH_GIVEN = "bandwidth_gbps"  # in a pair's note: the file gave its bandwidth


def _derived_basis(cluster: Cluster, i: int, j: int) -> str:
    a, b = cluster.machines[i], cluster.machines[j]
    if a.region == b.region:
        return f"LAN model (same region '{a.region}')"
    if None in (a.lat, a.lon, b.lat, b.lon):
        return "estimated (no coordinates)"
    km = geo.great_circle_km(a.lat, a.lon, b.lat, b.lon)
    return f"distance model ({km:,.0f} km)"


def _sources(cluster: Cluster, i: int, j: int, measured: bool, note: str | None) -> tuple[str, str]:
    """Where the pair's latency and bandwidth come from (module docstring)."""
    lan = cluster.machines[i].region == cluster.machines[j].region
    if measured:
        latency = "measured"
    elif note:
        latency = "imputed"
    else:
        latency = "LAN model" if lan else "imputed from geography"
    if note and BANDWIDTH_GIVEN in note:
        bandwidth = "measured"
    elif lan:
        bandwidth = "LAN model"
    elif latency == "imputed from geography":
        bandwidth = "imputed from geography"
    else:
        bandwidth = "fitted from RTT"
    return latency, bandwidth


def describe(row: dict) -> str:
    """One line for a row: ``latency measured: rtt_ms 124 ...; bandwidth fitted from RTT``."""
    return f"latency {row['latency_source']}: {row['basis']}; bandwidth {row['bandwidth_source']}"


def link_rows(cluster: Cluster) -> list[dict]:
    """One JSON-ready row per unordered machine pair ``i < j``, in index order.

    Keys: ``a``, ``b`` (machine names), ``region_a``, ``region_b``, ``latency_ms`` (one-way),
    ``rtt_ms``, ``bandwidth_gbps`` (the slower direction), ``measured`` (bool: the latency was
    measured), ``basis``, ``latency_source`` and ``bandwidth_source`` (module docstring).
    """
    rows = []
    lat_ms = s_to_ms(cluster.latency_s)
    gbps = bytes_per_s_to_gbps(cluster.pair_bandwidth_bps)
    for i, j in zip(*np.triu_indices(cluster.num_machines, 1), strict=True):
        i, j = int(i), int(j)
        measured = not bool(cluster.imputed[i, j])
        note = cluster.link_notes.get((i, j))
        latency_source, bandwidth_source = _sources(cluster, i, j, measured, note)
        rows.append({
            "a": cluster.machines[i].name,
            "b": cluster.machines[j].name,
            "region_a": cluster.machines[i].region,
            "region_b": cluster.machines[j].region,
            "latency_ms": float(lat_ms[i, j]),
            "rtt_ms": float(2 * lat_ms[i, j]),
            "bandwidth_gbps": float(gbps[i, j]),
            "measured": measured,
            "basis": note or ("given" if measured else _derived_basis(cluster, i, j)),
            "latency_source": latency_source,
            "bandwidth_source": bandwidth_source,
        })  # fmt: skip
    return rows
