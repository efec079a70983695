"""Land outlines for the world maps: Natural Earth 1:110m land, shipped with the package.

The data (public domain; source and how it was reduced: ``data/SOURCE.md``) is read once, on
first use. Maps are equirectangular (x = longitude, y = latitude, degrees), like the placement
figure's axes, so the rings are drawn as they are.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np

LAND_FILE = "land_110m.json"
LAND_COLOUR = "#e4e0d4"
COAST_COLOUR = "#9a9a8e"


@lru_cache(maxsize=1)
def land_rings() -> tuple[np.ndarray, ...]:
    """The land as closed rings, each ``[N, 2]`` (longitude, latitude) in degrees."""
    text = resources.files("hulk_env.render").joinpath("data", LAND_FILE).read_text(encoding="utf-8")
    return tuple(np.asarray(r, dtype=float).reshape(-1, 2) for r in json.loads(text)["rings"])


def draw_land(ax, zorder: float = 0.5) -> None:
    """Fill the land and draw its coastlines on a lon/lat axis (under everything else)."""
    from matplotlib.collections import PolyCollection

    ax.add_collection(
        PolyCollection(land_rings(), facecolors=LAND_COLOUR, edgecolors=COAST_COLOUR, linewidths=0.5,
                       zorder=zorder),
        autolim=False,
    )
