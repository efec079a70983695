"""The placement figure: a world map and a pipeline view, side by side.

Machines are coloured by pipeline stage (:func:`machine_stages`), links drawn as wide as the bytes
they carry in one iteration (:func:`hulk_env.traffic.link_traffic_bytes`). Partial placements
(``-1`` for unplaced slots, the env's ``rgb_array`` during an episode) show what is placed so far.
"""

from __future__ import annotations

import numpy as np

from hulk_env import cost
from hulk_env.instance import Instance
from hulk_env.render.common import (
    LAN_COLOUR,
    STAGE_CMAP,
    WAN_COLOUR,
    bytes_label,
    integer_locator,
    link_width,
    pyplot,
)
from hulk_env.render.geo import draw_land
from hulk_env.render.text import held_layers
from hulk_env.traffic import link_traffic_bytes, wan_share


def machine_stages(instance: Instance, placement: np.ndarray) -> np.ndarray:
    """``[M]`` pipeline stage of each machine, ``-1`` for idle machines.

    Within a replica, machines are numbered in the order of the first layer they hold (layers
    are in topological order, so stage 0 holds the input); a machine serving several replicas
    takes its smallest stage. Unplaced slots (``-1``) are skipped.
    """
    w = instance.workload
    mach = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    stages = np.full(instance.num_machines, np.iinfo(np.int64).max, dtype=np.int64)
    for row in mach:
        order = list(dict.fromkeys(row[row >= 0].tolist()))  # distinct machines by first layer
        for stage, m in enumerate(order):
            stages[m] = min(stages[m], stage)
    stages[stages == np.iinfo(np.int64).max] = -1
    return stages


def placement_figure(instance: Instance, placement: np.ndarray, title: str | None = None):
    """The placement as a picture: a world map and a pipeline view, side by side.

    * Map (geographic clusters only): land and coastlines (Natural Earth 1:110m), every city of the cluster, its machines on a small ring
      around it, coloured by pipeline stage (grey: idle); lines between cities carry the
      inter-city (WAN) bytes of one iteration, lines inside a ring the intra-city (LAN) bytes.
    * Pipeline view: the machines in use, one row per region, one column per pipeline stage;
      every link that carries traffic (intra-city ones too) as a line whose width grows with
      the bytes per iteration, labelled for the heaviest links.

    Args:
        instance: the cluster and model.
        placement: ``[D, L]`` machine of each (replica, layer), ``-1`` where not placed yet.
        title: the figure title (default: model, cluster, iteration time (once complete),
            machines, WAN share).
    """
    plt = pyplot()
    from matplotlib.colors import Normalize

    c, w = instance.cluster, instance.workload
    placement = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    stages = machine_stages(instance, placement)
    traffic = link_traffic_bytes(instance, placement)
    norm = Normalize(vmin=0, vmax=max(1, int(stages.max())))
    cmap = plt.get_cmap(STAGE_CMAP)
    if all(mc.lat is not None and mc.lon is not None for mc in c.machines):
        fig, (ax_map, ax_pipe) = plt.subplots(
            1, 2, figsize=(17, 6.8), dpi=100, gridspec_kw={"width_ratios": [1.25, 1]}
        )
        _draw_map(ax_map, instance, stages, traffic, cmap, norm)
    else:
        fig, ax_pipe = plt.subplots(figsize=(10, 6.2), dpi=100)
    _draw_pipeline(ax_pipe, instance, placement, stages, traffic, cmap, norm)
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    bar = fig.colorbar(sm, ax=ax_pipe, fraction=0.04, pad=0.02)
    bar.set_label("pipeline stage (0 holds the input layers)")
    bar.locator = integer_locator()
    bar.update_ticks()
    fig.suptitle(title or _default_title(instance, placement, stages), fontsize=11)
    fig.tight_layout()
    return fig


def _default_title(instance: Instance, placement: np.ndarray, stages: np.ndarray) -> str:
    c, w = instance.cluster, instance.workload
    used = int(np.count_nonzero(stages >= 0))
    regions = len({c.machines[m].region for m in np.flatnonzero(stages >= 0)})
    placed = int(np.count_nonzero(placement >= 0))
    time = (
        f"{cost.iteration_time(c, w, placement):.3f} s per iteration"
        if placed == placement.size else f"{placed}/{placement.size} slots placed"
    )
    return (
        f"{w.name} (D={w.data_parallel}, {w.num_micro_batches} micro-batches, {w.schedule}) on "
        f"{c.name}: {time}, {used} machine{'s' if used != 1 else ''} in "
        f"{regions} region{'s' if regions != 1 else ''}, "
        f"{100 * wan_share(instance, placement):.0f}% of bytes over WAN"
    )


def _city_centres(instance: Instance) -> tuple[np.ndarray, np.ndarray]:
    c = instance.cluster
    lon = np.array([mc.lon for mc in c.machines], dtype=float)
    lat = np.array([mc.lat for mc in c.machines], dtype=float)
    idx = c.region_index
    n = len(c.regions)
    counts = np.bincount(idx, minlength=n)
    return np.bincount(idx, lon, n) / counts, np.bincount(idx, lat, n) / counts


def _map_extent(lon: np.ndarray, lat: np.ndarray) -> tuple[float, float, float, float]:
    """``(lon_lo, lon_hi, lat_lo, lat_hi)``: the points with a margin, at least 40 x 24 degrees."""
    lon_lo, lon_hi, lat_lo, lat_hi = lon.min(), lon.max(), lat.min(), lat.max()
    pad = max(6.0, 0.12 * max(lon_hi - lon_lo, lat_hi - lat_lo))
    lon_lo, lon_hi, lat_lo, lat_hi = lon_lo - pad, lon_hi + pad, lat_lo - pad, lat_hi + pad
    for lo, hi, least, bound in ((0, 1, 40.0, 180.0), (2, 3, 24.0, 90.0)):
        box = [lon_lo, lon_hi, lat_lo, lat_hi]
        if box[hi] - box[lo] < least:
            mid = (box[hi] + box[lo]) / 2
            box[lo], box[hi] = mid - least / 2, mid + least / 2
        box[lo], box[hi] = max(-bound, box[lo]), min(bound, box[hi])
        lon_lo, lon_hi, lat_lo, lat_hi = box
    return float(lon_lo), float(lon_hi), float(lat_lo), float(lat_hi)


def _draw_map(ax, instance: Instance, stages: np.ndarray, traffic: np.ndarray, cmap, norm) -> None:
    """World-map panel of :func:`placement_figure` (equirectangular lon/lat axes).

    The map zooms on the cities in use; when that leaves cities out, an inset shows the whole
    cluster with the zoomed area framed.
    """
    c = instance.cluster
    region = c.region_index
    n = len(c.regions)
    city_lon, city_lat = _city_centres(instance)
    used_city = np.bincount(region[stages >= 0], minlength=n) > 0
    zoom = used_city if used_city.any() else np.ones(n, dtype=bool)  # nothing placed yet: all cities
    lon_lo, lon_hi, lat_lo, lat_hi = _map_extent(city_lon[zoom], city_lat[zoom])
    span = max(lon_hi - lon_lo, lat_hi - lat_lo)
    ax.set_xlim(lon_lo, lon_hi)
    ax.set_ylim(lat_lo, lat_hi)
    ax.set_aspect("equal", adjustable="box")
    ax.set_facecolor("#eef4f8")  # the sea
    draw_land(ax)
    ax.grid(color="white", lw=1.0)
    ax.set_xlabel("longitude (degrees)")
    ax.set_ylabel("latitude (degrees)")
    ring = 0.02 * span  # machines sit on a ring of this radius around their city

    # Machine positions: a ring per city (one machine: the city itself).
    x, y = np.empty(c.num_machines), np.empty(c.num_machines)
    for r in range(n):
        members = np.flatnonzero(region == r)
        angle = np.pi / 2 + 2 * np.pi * np.arange(len(members)) / len(members)
        radius = ring if len(members) > 1 else 0.0
        x[members] = city_lon[r] + radius * np.cos(angle)
        y[members] = city_lat[r] + radius * np.sin(angle)

    # WAN: bytes between cities (both directions), straight lines between city centres.
    city_bytes = np.zeros((n, n))
    np.add.at(city_bytes, (np.repeat(region, c.num_machines), np.tile(region, c.num_machines)), traffic.ravel())
    city_bytes = city_bytes + city_bytes.T
    np.fill_diagonal(city_bytes, 0.0)
    lan = traffic + traffic.T
    lan[region[:, None] != region[None, :]] = 0.0
    top = max(float(city_bytes.max()), float(lan.max()))
    pairs = sorted(zip(*np.nonzero(np.triu(city_bytes, 1)), strict=True), key=lambda p: -city_bytes[p])
    labels: set[str] = set()
    for i, j in pairs:
        ax.plot([city_lon[i], city_lon[j]], [city_lat[i], city_lat[j]], color=WAN_COLOUR,
                lw=link_width(city_bytes[i, j], top), alpha=0.55, zorder=2, solid_capstyle="round")
        text = bytes_label(city_bytes[i, j])
        if len(labels) < 6 and text not in labels:  # equal flows: one label says it
            labels.add(text)
            ax.annotate(text, ((city_lon[i] + city_lon[j]) / 2, (city_lat[i] + city_lat[j]) / 2),
                        fontsize=7, color="darkred", ha="center", va="center", zorder=6,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    # LAN: machine-to-machine lines inside a city's ring.
    for i, j in zip(*np.nonzero(np.triu(lan, 1)), strict=True):
        ax.plot([x[i], x[j]], [y[i], y[j]], color=LAN_COLOUR, lw=link_width(lan[i, j], top), alpha=0.7,
                zorder=3, solid_capstyle="round")

    idle = stages < 0
    ax.scatter(x[idle], y[idle], s=14, c="#b0b0b0", edgecolors="none", zorder=4)
    ax.scatter(x[~idle], y[~idle], s=60, c=stages[~idle], cmap=cmap, norm=norm, edgecolors="black",
               linewidths=0.6, zorder=5)
    visible = (city_lon >= lon_lo) & (city_lon <= lon_hi) & (city_lat >= lat_lo) & (city_lat <= lat_hi)
    _label_cities(ax, instance, city_lon, city_lat, ring, used=used_city, visible=visible)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=WAN_COLOUR, lw=3, alpha=0.6, label="between cities (WAN)"),
        Line2D([], [], color=LAN_COLOUR, lw=3, alpha=0.7, label="inside a city (LAN)"),
        Line2D([], [], marker="o", ls="", color="#b0b0b0", label="idle machine"),
    ]
    ax.set_title("machines at their cities (ring = one city); line width = bytes per iteration", fontsize=9)
    # The inset (when some cities are off the map) and the legend take the emptiest corners.
    corners = _corners_by_emptiness(ax, np.r_[np.c_[x, y], np.c_[city_lon, city_lat]], 0.28)
    if not visible.all():
        _overview_inset(ax, city_lon, city_lat, used_city, (lon_lo, lon_hi, lat_lo, lat_hi), corners.pop(0))
    ax.legend(handles=handles, loc=corners[0][0], fontsize=8, title="bytes per iteration", title_fontsize=8,
              framealpha=0.9)


_CORNERS = {"lower right": (1.0, 0.0), "upper right": (1.0, 1.0), "upper left": (0.0, 1.0), "lower left": (0.0, 0.0)}


def _corners_by_emptiness(ax, points: np.ndarray, size: float) -> list[tuple[str, list[float]]]:
    """Corners of the axes, fewest ``points`` (data coordinates) first: ``(legend location,
    axes-fraction box [x0, y0, w, h] of side ``size``)``."""
    ax.apply_aspect()  # the axes' final box, so that data -> axes fractions is right
    frac = ax.transAxes.inverted().transform(ax.transData.transform(points))
    ranked = []
    for name, (cx, cy) in _CORNERS.items():
        x0 = 0.01 if cx == 0.0 else 1 - size - 0.01
        y0 = 0.01 if cy == 0.0 else 1 - size - 0.01
        inside = (frac[:, 0] >= x0 - 0.03) & (frac[:, 0] <= x0 + size + 0.03)
        inside &= (frac[:, 1] >= y0 - 0.03) & (frac[:, 1] <= y0 + size + 0.03)
        ranked.append((int(np.count_nonzero(inside)), name, [x0, y0, size, size]))
    ranked.sort(key=lambda r: r[0])  # stable: ties keep the order above
    return [(name, box) for _, name, box in ranked]


def _overview_inset(
    ax, lon: np.ndarray, lat: np.ndarray, used: np.ndarray, box: tuple[float, float, float, float],
    corner: tuple[str, list[float]],
) -> None:
    """A small whole-cluster map in ``corner``, with the zoomed area framed."""
    from matplotlib.patches import Rectangle

    inset = ax.inset_axes(corner[1])
    lo_lon, hi_lon, lo_lat, hi_lat = _map_extent(np.r_[lon, box[:2]], np.r_[lat, box[2:]])
    inset.set_xlim(lo_lon, hi_lon)
    inset.set_ylim(lo_lat, hi_lat)
    inset.set_aspect("equal", adjustable="box")
    inset.set_facecolor("#eef4f8")
    draw_land(inset)
    inset.scatter(lon[~used], lat[~used], s=8, c="#a0a0a0", edgecolors="none")
    inset.scatter(lon[used], lat[used], s=12, c="black", edgecolors="none")
    inset.add_patch(Rectangle((box[0], box[2]), box[1] - box[0], box[3] - box[2], fill=False, ec="tab:red", lw=1))
    inset.set_xticks([])
    inset.set_yticks([])
    inset.set_title("whole cluster", fontsize=7, pad=2)


def _label_cities(
    ax, instance: Instance, lon: np.ndarray, lat: np.ndarray, ring: float, used: np.ndarray, visible: np.ndarray
) -> None:
    """City names next to their rings, moved around until they do not overlap each other."""
    c = instance.cluster
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    placed = []
    counts = np.bincount(c.region_index, minlength=len(c.regions))
    order = sorted(np.flatnonzero(visible).tolist(), key=lambda r: (not used[r], -counts[r]))
    off = 1.5 * ring
    candidates = ((0, off, "center", "bottom"), (off, 0, "left", "center"), (-off, 0, "right", "center"),
                  (0, -off, "center", "top"), (off, off, "left", "bottom"), (-off, -off, "right", "top"),
                  (off, -off, "left", "top"), (-off, off, "right", "bottom"))
    for r in order:
        text = None
        for dx, dy, ha, va in candidates:
            text = ax.text(lon[r] + dx, lat[r] + dy, f"{c.regions[r]} ({counts[r]})", fontsize=7, ha=ha, va=va,
                           color="black" if used[r] else "#707070", weight="bold" if used[r] else "normal",
                           zorder=7, bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.6})
            box = text.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(other) for other in placed):
                break
            text.remove()
            text = None
        if text is None:  # crowded: keep the first choice anyway
            dx, dy, ha, va = candidates[0]
            text = ax.text(lon[r] + dx, lat[r] + dy, c.regions[r], fontsize=6, ha=ha, va=va, color="#505050", zorder=7)
        placed.append(text.get_window_extent(renderer))


def _draw_pipeline(ax, instance: Instance, placement: np.ndarray, stages: np.ndarray, traffic: np.ndarray,
                   cmap, norm) -> None:
    """Pipeline-view panel of :func:`placement_figure`: regions as rows, stages as columns."""
    from matplotlib.patches import FancyArrowPatch

    c, w = instance.cluster, instance.workload
    used = np.flatnonzero(stages >= 0)
    region = c.region_index
    rows = sorted({int(region[m]) for m in used}, key=lambda r: min(stages[m] for m in used if region[m] == r))
    row_of = {r: i for i, r in enumerate(rows)}
    x = stages.astype(float)
    y = np.zeros(c.num_machines)
    for m in used:
        y[m] = row_of[int(region[m])]
    # Several machines of one region at one stage (replicas on different machines): spread them.
    for key in {(int(stages[m]), int(region[m])) for m in used}:
        same = [m for m in used if (stages[m], region[m]) == key]
        if len(same) > 1:
            y[same] += np.linspace(-0.28, 0.28, len(same))

    both = traffic + traffic.T
    top = float(both.max())
    pairs = sorted(zip(*np.nonzero(np.triu(both, 1)), strict=True), key=lambda p: -both[p])
    labels: set[tuple[str, bool]] = set()
    for i, j in pairs:
        wan = region[i] != region[j]
        same_row = abs(y[i] - y[j]) < 1e-9
        # Non-neighbours on one row would hide behind the nodes between them: bend them.
        rad = 0.35 if same_row and abs(x[i] - x[j]) > 1 else 0.0
        ax.add_patch(FancyArrowPatch((x[i], y[i]), (x[j], y[j]), arrowstyle="-", connectionstyle=f"arc3,rad={rad}",
                                     lw=link_width(both[i, j], top), color=WAN_COLOUR if wan else LAN_COLOUR,
                                     alpha=0.55, zorder=2, shrinkA=0, shrinkB=0))
        key = (bytes_label(both[i, j]), bool(wan))
        if len(labels) < 6 and key not in labels:  # equal flows: one label says it
            labels.add(key)
            mx, my = (x[i] + x[j]) / 2, (y[i] + y[j]) / 2 + (0.18 if rad else 0.0)
            ax.annotate(bytes_label(both[i, j]), (mx, my), fontsize=6.5, ha="center", va="center", zorder=6,
                        color="darkred" if wan else "navy",
                        bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.8})

    ax.scatter(x[used], y[used], s=190, c=stages[used], cmap=cmap, norm=norm, edgecolors="black", linewidths=0.8,
               zorder=4)
    many = len(used) > 10
    fontsize = 6 if many else 7
    longest = 0
    for m in used:
        held = [f"{'r' + str(r) + ':' if w.data_parallel > 1 else ''}L{ranges}" for r, ranges in held_layers(placement, m)]
        label = f"{c.machines[m].name}\n{' '.join(held)}"
        longest = max(longest, *(len(part) for part in label.split("\n")))
        ax.annotate(label, (x[m], y[m]), xytext=(0, -11), textcoords="offset points", ha="center", va="top",
                    fontsize=fontsize, rotation=90 if many else 0, zorder=5, linespacing=0.95,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75})
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([c.regions[r] for r in rows], fontsize=8)
    # Room under the last row for its labels: their height in points, converted to row units.
    label_pt = 14 + (0.62 * fontsize * longest if many else 2.4 * fontsize)
    axes_pt = 0.8 * ax.figure.get_figheight() * 72
    room = label_pt * (len(rows) + 0.75) / max(axes_pt - label_pt, 0.3 * axes_pt)
    ax.set_ylim(len(rows) - 1 + max(0.35, room), -0.75)
    ax.set_xlim(-0.7, max(1, int(stages.max())) + 0.7)
    ax.xaxis.set_major_locator(integer_locator())
    ax.set_xlabel("pipeline stage")
    ax.grid(axis="x", alpha=0.25)
    ax.set_title("machines in use (rows: regions); line width = bytes per iteration, "
                 "red WAN, blue LAN", fontsize=9)
