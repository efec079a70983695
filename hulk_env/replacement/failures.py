"""Failure scenarios: which machines are gone, from a spec such as ``"tokyo-0,region:Paris"``.

Spec grammar (comma-separated items, their union):

- ``NAME``: one machine by name (case-insensitive);
- ``region:NAME``: every machine of a region (city), e.g. ``region:Tokyo``;
- ``P%``: ``P`` percent of the cluster's machines (rounded, at least one), drawn with ``seed``.

Unknown names are an error that lists close matches.
"""

from __future__ import annotations

import difflib
from typing import NamedTuple

import numpy as np

from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.validation.reading import safe_repr

REGION_PREFIX = "region:"


class FailureScenario(NamedTuple):
    """A set of failed machines with a label.

    Attributes:
        label: what failed, e.g. ``"region:Tokyo"``.
        failed: sorted machine indices.
    """

    label: str
    failed: tuple[int, ...]


def machine_index(cluster: Cluster, name: str) -> int:
    """The index of a machine by name (case-insensitive); unknown names list close matches."""
    names = [mc.name for mc in cluster.machines]
    lookup = {n.lower(): i for i, n in enumerate(names)}
    key = name.strip().lower()
    if key in lookup:
        return lookup[key]
    close = difflib.get_close_matches(key, list(lookup), n=3)
    hint = f"did you mean {', '.join(repr(names[lookup[c]]) for c in close)}? " if close else ""
    raise HulkInputError(
        f"unknown machine {safe_repr(name)} in cluster '{cluster.name}'; {hint}"
        f"use a machine name or region:NAME (regions: {', '.join(cluster.regions)})",
        field="fail",
    )


def region_machines(cluster: Cluster, region: str) -> tuple[int, ...]:
    """The machines of a region (case-insensitive); unknown regions list the valid ones."""
    key = region.strip().lower()
    regions = {r.lower(): k for k, r in enumerate(cluster.regions)}
    if key not in regions:
        raise HulkInputError(
            f"unknown region {safe_repr(region)} in cluster '{cluster.name}'; regions: {', '.join(cluster.regions)}",
            field="fail",
        )
    return tuple(int(i) for i in np.flatnonzero(cluster.region_index == regions[key]))


def fraction_machines(cluster: Cluster, percent: float, seed: int) -> tuple[int, ...]:
    """``percent`` % of the machines (at least one), drawn uniformly with ``seed``."""
    if not 0 < percent < 100:
        raise HulkInputError(f"a failure share must lie strictly between 0% and 100%, got {percent}%", field="fail")
    count = max(1, round(cluster.num_machines * percent / 100))
    rng = np.random.default_rng(seed)
    return tuple(sorted(int(i) for i in rng.choice(cluster.num_machines, size=count, replace=False)))


def parse_failures(cluster: Cluster, spec: str, seed: int = 0) -> FailureScenario:
    """The scenario of a spec (see the module docstring)."""
    items = [x.strip() for x in str(spec).split(",") if x.strip()]
    if not items:
        raise HulkInputError("no failed machines given; use NAME[,NAME...], region:NAME or P%", field="fail")
    failed: set[int] = set()
    for item in items:
        if item.lower().startswith(REGION_PREFIX):
            failed.update(region_machines(cluster, item[len(REGION_PREFIX) :]))
        elif item.endswith("%"):
            try:
                percent = float(item[:-1])
            except ValueError:
                raise HulkInputError(f"{safe_repr(item)} is not a percentage such as 10%", field="fail") from None
            failed.update(fraction_machines(cluster, percent, seed))
        else:
            failed.add(machine_index(cluster, item))
    return FailureScenario(",".join(items), tuple(sorted(failed)))


def names(cluster: Cluster, machines: tuple[int, ...] | list[int] | np.ndarray) -> list[str]:
    """Machine names of indices."""
    return [cluster.machines[int(i)].name for i in machines]


def standard_scenarios(cluster: Cluster, placement: np.ndarray, seed: int = 0) -> list[FailureScenario]:
    """The benchmark's failures of a running placement ``[D, L]``.

    One busy machine (the one holding the most slots, lowest index on ties), the region holding
    the most slots (a whole-region outage), and 10% of all machines drawn with ``seed`` (which
    may or may not hit the placement: that is what a random failure does).
    """
    placement = np.asarray(placement, dtype=np.int64)
    slots = np.bincount(placement.ravel(), minlength=cluster.num_machines)
    busiest = int(np.argmax(slots))
    region_slots = np.bincount(cluster.region_index, weights=slots, minlength=len(cluster.regions))
    region = cluster.regions[int(np.argmax(region_slots))]
    return [
        FailureScenario(cluster.machines[busiest].name, (busiest,)),
        FailureScenario(f"{REGION_PREFIX}{region}", region_machines(cluster, region)),
        FailureScenario("10%", fraction_machines(cluster, 10.0, seed)),
    ]


def random_scenario(cluster: Cluster, placement: np.ndarray, rng: np.random.Generator) -> FailureScenario:
    """A random failure of a running placement, for training and the env: one of the
    :func:`standard_scenarios` kinds or their random variants (a random machine or region that
    the placement uses), each equally likely."""
    placement = np.asarray(placement, dtype=np.int64)
    used = np.unique(placement)
    kind = int(rng.integers(5))
    if kind < 3:
        return standard_scenarios(cluster, placement, int(rng.integers(2**31)))[kind]
    if kind == 3:
        i = int(rng.choice(used))
        return FailureScenario(cluster.machines[i].name, (i,))
    region = cluster.regions[int(rng.choice(np.unique(cluster.region_index[used])))]
    return FailureScenario(f"{REGION_PREFIX}{region}", region_machines(cluster, region))
