"""Averages of ratios (speed-ups, gaps): geometric means with a geometric standard error."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np


class GeometricSummary(NamedTuple):
    """The geometric mean of the finite positive values, one standard error either side.

    Attributes:
        geomean: ``exp(mean(log v))`` (``nan`` when there are no values).
        low: ``exp(mean - se)``, ``se`` the standard error of the mean log (0 for one value).
        high: ``exp(mean + se)``.
        n: how many values counted.
    """

    geomean: float
    low: float
    high: float
    n: int


def geometric_summary(values: Iterable[float]) -> GeometricSummary:
    """:class:`GeometricSummary` of the finite positive ``values`` (others are left out)."""
    logs = np.log(np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=np.float64))
    if len(logs) == 0:
        return GeometricSummary(math.nan, math.nan, math.nan, 0)
    mean = float(logs.mean())
    se = float(logs.std(ddof=1) / math.sqrt(len(logs))) if len(logs) > 1 else 0.0
    return GeometricSummary(math.exp(mean), math.exp(mean - se), math.exp(mean + se), len(logs))


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of the finite positive values (``nan`` when there are none)."""
    return geometric_summary(values).geomean
