"""Text and matplotlib views: placements, simulated schedules, leaderboards, learning curves.

Pure functions of an instance and a placement (or a :class:`hulk_env.simulate.SimResult`, or
result rows, or logged scalars) that return a matplotlib figure; :func:`save_figure` writes it as
PNG. matplotlib (and tensorboard, for event files) is imported lazily, always with the
non-interactive Agg backend, so ``import hulk_env`` stays light.

* :func:`placement_figure` -- a world map (machines at their cities, coloured by pipeline stage,
  links as wide as the bytes they carry) next to a pipeline view that shows every link in use,
  intra-city ones included;
* :func:`gantt_figure` -- the simulated schedule, machines and links as rows;
* :func:`leaderboard_figure` -- geometric-mean speed-up over naive per method, with
  per-instance dots;
* :func:`curves_figure` -- learning curves read by :func:`read_curves` from TensorBoard event
  files or CSV logs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.units import GB


def layer_ranges(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    if not layers:
        return ""
    parts, start, prev = [], layers[0], layers[0]
    for x in layers[1:]:
        if x != prev + 1:
            parts.append(f"{start}-{prev}" if prev > start else str(start))
            start = x
        prev = x
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def placement_rows(instance: Instance, placement: np.ndarray) -> list[dict]:
    """One row per machine that holds layers, grouped by region, in machine order.

    Keys: ``machine``, ``region``, ``gpu``, ``layers`` (``"r0:0-5 r1:6-9"``), ``memory_gb``,
    ``memory_limit_gb``, ``compute_s_per_mb``.
    """
    c, w = instance.cluster, instance.workload
    breakdown = cost.evaluate(c, w, placement)
    rows = []
    for region in c.regions:
        for m, mc in enumerate(c.machines):
            if mc.region != region:
                continue
            held = [
                f"r{r}:{layer_ranges(np.flatnonzero(placement[r] == m).tolist())}"
                for r in range(w.data_parallel)
                if np.any(placement[r] == m)
            ]
            if not held:
                continue
            rows.append(
                {
                    "machine": mc.name,
                    "region": region,
                    "gpu": f"{mc.num_gpus}x {mc.gpu}",
                    "layers": " ".join(held),
                    "memory_gb": float(breakdown.memory_bytes[m]) / GB,
                    "memory_limit_gb": mc.memory_bytes / GB,
                    "compute_s_per_mb": float(breakdown.compute_s_per_mb[m]),
                }
            )
    return rows


def placement_text(instance: Instance, placement: np.ndarray) -> str:
    """A plain-text table of :func:`placement_rows` plus the cost breakdown."""
    rows = placement_rows(instance, placement)
    header = f"{'region':<12} {'machine':<16} {'gpu':<16} {'memory GB':>16} {'C s/mb':>8}  layers"
    lines = [header, "-" * len(header)]
    for r in rows:
        mem = f"{r['memory_gb']:.1f}/{r['memory_limit_gb']:.0f}"
        lines.append(
            f"{r['region']:<12} {r['machine']:<16} {r['gpu']:<16} {mem:>16} "
            f"{r['compute_s_per_mb']:>8.3f}  {r['layers']}"
        )
    b = cost.evaluate(instance.cluster, instance.workload, placement).to_dict()
    lines.append(
        f"iteration {b['iteration_time_s']:.3f} s = compute {b['compute_s']:.3f} + pipeline comm "
        f"{b['pipeline_comm_s']:.3f} + bubble {b['bubble_s']:.3f} + dp sync {b['dp_sync_s']:.3f}"
    )
    return "\n".join(lines)


# ---- traffic and pipeline stages (numpy only) ------------------------------------------------


def machine_stages(instance: Instance, placement: np.ndarray) -> np.ndarray:
    """``[M]`` pipeline stage of each machine, ``-1`` for idle machines.

    Within a replica, machines are numbered in the order of the first layer they hold (layers
    are in topological order, so stage 0 holds the input); a machine serving several replicas
    takes its smallest stage.
    """
    w = instance.workload
    mach = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    stages = np.full(instance.num_machines, np.iinfo(np.int64).max, dtype=np.int64)
    for row in mach:
        order = list(dict.fromkeys(row.tolist()))  # distinct machines by first layer
        for stage, m in enumerate(order):
            stages[m] = min(stages[m], stage)
    stages[stages == np.iinfo(np.int64).max] = -1
    return stages


def link_traffic_bytes(instance: Instance, placement: np.ndarray) -> np.ndarray:
    """``[M, M]`` bytes sent from machine ``a`` to machine ``b`` in one training iteration.

    Pipeline: every cross-machine layer edge ``u -> v`` of every replica carries
    ``activation_bytes[u]`` forward and the same bytes of gradient backward, once per
    micro-batch. Data parallel: a ring all-reduce of ``G`` bytes over ``k`` machines sends
    ``2 (k - 1) / k * G`` bytes over each of its ``k`` directed links (the rings of
    :func:`hulk_env.cost.dp_rings`). The diagonal is zero.
    """
    c, w = instance.cluster, instance.workload
    mach = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    out = np.zeros((c.num_machines, c.num_machines))
    edges = np.asarray(w.edges, dtype=np.int64).reshape(-1, 2)
    per_edge = w.num_micro_batches * np.asarray(w.activation_bytes, dtype=float)[edges[:, 0]]
    for row in mach:
        a, b = row[edges[:, 0]], row[edges[:, 1]]
        cross = a != b
        np.add.at(out, (a[cross], b[cross]), per_edge[cross])  # activations
        np.add.at(out, (b[cross], a[cross]), per_edge[cross])  # their gradients
    if w.data_parallel > 1:
        rings = cost.dp_rings(w, mach[None])
        for layer in np.flatnonzero(rings.leader[0] & (rings.size[0] > 1)):
            k = int(rings.size[0, layer])
            members = rings.members[0, :k, layer]
            np.add.at(out, (members, np.roll(members, -1)), 2.0 * (k - 1) / k * float(rings.group_bytes[0, layer]))
    return out


def wan_share(instance: Instance, placement: np.ndarray) -> float:
    """Share of one iteration's inter-machine bytes that crosses regions (0 when none move)."""
    traffic = link_traffic_bytes(instance, placement)
    region = instance.cluster.region_index
    total = float(traffic.sum())
    return float(traffic[region[:, None] != region[None, :]].sum()) / total if total > 0 else 0.0


# ---- matplotlib --------------------------------------------------------------------------------

WAN_COLOUR = "tab:red"
LAN_COLOUR = "tab:blue"
STAGE_CMAP = "viridis"
KIND_COLOURS = {
    "forward": "tab:blue",
    "backward": "tab:orange",
    "transfer": "tab:green",
    "allreduce": "tab:red",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def machine_positions(instance: Instance) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(x, y, geographic)``: lon/lat with a small jitter per machine, or a region grid."""
    c = instance.cluster
    have_geo = all(mc.lat is not None and mc.lon is not None for mc in c.machines)
    if have_geo:
        lon = np.array([mc.lon for mc in c.machines], dtype=float)
        lat = np.array([mc.lat for mc in c.machines], dtype=float)
    else:
        lon = c.region_index.astype(float) * 10.0
        lat = np.zeros(c.num_machines)
    # Spread machines of one place on a small circle so they stay visible.
    for key in set(zip(lon.round(3), lat.round(3), strict=True)):
        same = np.flatnonzero((lon.round(3) == key[0]) & (lat.round(3) == key[1]))
        if len(same) > 1:
            angle = 2 * np.pi * np.arange(len(same)) / len(same)
            lon[same] += 2.0 * np.cos(angle)
            lat[same] += 2.0 * np.sin(angle)
    return lon, lat, have_geo


def _is_geographic(instance: Instance) -> bool:
    return all(mc.lat is not None and mc.lon is not None for mc in instance.cluster.machines)


def _width(bytes_: float, max_bytes: float, widest: float = 7.0) -> float:
    """Line width for a link: area-like (square-root) scale, so small flows stay visible."""
    return 0.6 + widest * float(np.sqrt(bytes_ / max_bytes)) if max_bytes > 0 else 0.6


def _gb(bytes_: float) -> str:
    gb = bytes_ / GB
    return f"{gb:.0f} GB" if gb >= 100 else f"{gb:.1f} GB" if gb >= 1 else f"{bytes_ / 1e6:.0f} MB"


def placement_figure(instance: Instance, placement: np.ndarray, title: str | None = None):
    """The placement as a picture: a world map and a pipeline view, side by side.

    * Map (geographic clusters only): every city of the cluster, its machines on a small ring
      around it, coloured by pipeline stage (grey: idle); lines between cities carry the
      inter-city (WAN) bytes of one iteration, lines inside a ring the intra-city (LAN) bytes.
    * Pipeline view: the machines in use, one row per region, one column per pipeline stage;
      every link that carries traffic (intra-city ones too) as a line whose width grows with
      the bytes per iteration, labelled for the heaviest links.

    Args:
        instance: the cluster and model.
        placement: ``[D, L]`` machine of each (replica, layer).
        title: the figure title (default: model, cluster, iteration time, machines, WAN share).
    """
    plt = _pyplot()
    from matplotlib.colors import Normalize

    c, w = instance.cluster, instance.workload
    placement = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    breakdown = cost.evaluate(c, w, placement)
    stages = machine_stages(instance, placement)
    traffic = link_traffic_bytes(instance, placement)
    norm = Normalize(vmin=0, vmax=max(1, int(stages.max())))
    cmap = plt.get_cmap(STAGE_CMAP)
    if _is_geographic(instance):
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
    bar.locator = _integer_locator()
    bar.update_ticks()
    used = int(np.count_nonzero(stages >= 0))
    regions = len({c.machines[m].region for m in np.flatnonzero(stages >= 0)})
    fig.suptitle(
        title
        or f"{w.name} (D={w.data_parallel}, {w.num_micro_batches} micro-batches, {w.schedule}) on "
        f"{c.name}: {float(breakdown.iteration_time_s):.3f} s per iteration, {used} machine{'s' if used > 1 else ''} in "
        f"{regions} region{'s' if regions > 1 else ''}, "
        f"{100 * wan_share(instance, placement):.0f}% of bytes over WAN",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def _integer_locator():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True, nbins=8)


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
    lon_lo, lon_hi, lat_lo, lat_hi = _map_extent(city_lon[used_city], city_lat[used_city])
    span = max(lon_hi - lon_lo, lat_hi - lat_lo)
    ax.set_xlim(lon_lo, lon_hi)
    ax.set_ylim(lat_lo, lat_hi)
    ax.set_aspect("equal", adjustable="box")
    ax.set_facecolor("#eef4f8")
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
                lw=_width(city_bytes[i, j], top), alpha=0.55, zorder=2, solid_capstyle="round")
        text = _gb(city_bytes[i, j])
        if len(labels) < 6 and text not in labels:  # equal flows: one label says it
            labels.add(text)
            ax.annotate(text, ((city_lon[i] + city_lon[j]) / 2, (city_lat[i] + city_lat[j]) / 2),
                        fontsize=7, color="darkred", ha="center", va="center", zorder=6,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    # LAN: machine-to-machine lines inside a city's ring.
    for i, j in zip(*np.nonzero(np.triu(lan, 1)), strict=True):
        ax.plot([x[i], x[j]], [y[i], y[j]], color=LAN_COLOUR, lw=_width(lan[i, j], top), alpha=0.7,
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
    inset.set_facecolor("#f7fafc")
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
                                     lw=_width(both[i, j], top), color=WAN_COLOUR if wan else LAN_COLOUR,
                                     alpha=0.55, zorder=2, shrinkA=0, shrinkB=0))
        key = (_gb(both[i, j]), bool(wan))
        if len(labels) < 6 and key not in labels:  # equal flows: one label says it
            labels.add(key)
            mx, my = (x[i] + x[j]) / 2, (y[i] + y[j]) / 2 + (0.18 if rad else 0.0)
            ax.annotate(_gb(both[i, j]), (mx, my), fontsize=6.5, ha="center", va="center", zorder=6,
                        color="darkred" if wan else "navy",
                        bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.8})

    ax.scatter(x[used], y[used], s=190, c=stages[used], cmap=cmap, norm=norm, edgecolors="black", linewidths=0.8,
               zorder=4)
    many = len(used) > 10
    fontsize = 6 if many else 7
    longest = 0
    for m in used:
        held = [f"{'r' + str(r) + ':' if w.data_parallel > 1 else ''}L{layer_ranges(np.flatnonzero(placement[r] == m).tolist())}"
                for r in range(w.data_parallel) if np.any(placement[r] == m)]
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
    ax.xaxis.set_major_locator(_integer_locator())
    ax.set_xlabel("pipeline stage")
    ax.grid(axis="x", alpha=0.25)
    ax.set_title("machines in use (rows: regions); line width = bytes per iteration, "
                 "red WAN, blue LAN", fontsize=9)


# ---- Gantt chart of a simulated schedule ------------------------------------------------------


class _Bar(NamedTuple):
    row: str
    kind: str
    replica: int
    micro_batch: int
    start_s: float
    end_s: float


def _merged_bars(tasks) -> list[_Bar]:
    """Back-to-back tasks of one kind, replica and micro-batch on one resource become one bar
    (the layers of a stage run one after another; one bar per stage and micro-batch reads best)."""
    bars: list[_Bar] = []
    last: dict[str, int] = {}
    for t in sorted(tasks, key=lambda t: (t.resource, t.start_s)):
        i = last.get(t.resource)
        if i is not None:
            b = bars[i]
            if (b.kind, b.replica, b.micro_batch) == (t.kind, t.replica, t.micro_batch) and t.start_s - b.end_s <= 1e-9 * max(1.0, b.end_s):
                bars[i] = b._replace(end_s=max(b.end_s, t.end_s))
                continue
        last[t.resource] = len(bars)
        bars.append(_Bar(t.resource, t.kind, t.replica, t.micro_batch, t.start_s, t.end_s))
    return bars


def gantt_figure(result, instance: Instance, max_rows: int = 40, title: str | None = None):
    """The simulated schedule: one row per machine and per directed link that did work.

    Machines come first, in pipeline order (by their first forward), then links in order of
    first use. Back-to-back layers of one micro-batch on one machine form one bar, labelled with
    the micro-batch number when it is wide enough; replicas after the first are drawn lighter.

    Args:
        result: a :class:`hulk_env.simulate.SimResult` recorded with tasks.
        instance: the instance it simulated (for names).
        max_rows: rows kept (all machines first, then the busiest links).
        title: the figure title (default: simulated vs analytic iteration time).
    """
    plt = _pyplot()
    from matplotlib.patches import Patch

    tasks = list(result.tasks)
    if not tasks:
        raise HulkInputError("the simulation recorded no tasks: call simulate(..., record=True)")
    busy: dict[str, float] = {}
    first: dict[str, float] = {}
    for t in tasks:
        busy[t.resource] = busy.get(t.resource, 0.0) + (t.end_s - t.start_s)
        if t.kind == "forward" or not t.resource.startswith("machine"):
            first[t.resource] = min(first.get(t.resource, np.inf), t.start_s)
    machines = sorted((r for r in busy if r.startswith("machine")), key=lambda r: (first.get(r, np.inf), _resource_order(r)))
    links = sorted((r for r in busy if not r.startswith("machine")), key=lambda r: -busy[r])
    rows = machines[:max_rows]
    kept_links = sorted(links[: max(0, max_rows - len(rows))], key=lambda r: first.get(r, 0.0))
    rows += kept_links
    hidden = len(machines) + len(links) - len(rows)
    index = {r: i for i, r in enumerate(rows)}
    total_s = max(t.end_s for t in tasks)

    fig, ax = plt.subplots(figsize=(13, max(3.2, 0.27 * len(rows) + 2.0)), dpi=100, layout="constrained")
    bars = [b for b in _merged_bars(tasks) if b.row in index]
    groups: dict[tuple[int, str, bool], list[tuple[float, float]]] = {}
    for b in bars:
        groups.setdefault((index[b.row], b.kind, b.replica > 0 and b.kind != "allreduce"), []).append(
            (b.start_s, b.end_s - b.start_s)
        )
    for (row, kind, later), spans in groups.items():
        ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=KIND_COLOURS.get(kind, "gray"),
                       alpha=0.55 if later else 1.0, edgecolor="white", linewidth=0.4)
    # Micro-batch numbers on compute bars that have room (~14 px at this size).
    min_width = total_s * 14 / (fig.get_figwidth() * fig.dpi * 0.85)
    for b in bars:
        if b.kind in ("forward", "backward") and b.end_s - b.start_s >= min_width:
            ax.text((b.start_s + b.end_s) / 2, index[b.row], str(b.micro_batch), ha="center", va="center",
                    fontsize=6, color="white")
    if result.dp_sync_s > 0:
        ax.axvline(result.pipeline_s, color="black", ls="--", lw=0.8)
        ax.text(result.pipeline_s, -0.7, " all-reduce starts", fontsize=7, va="bottom")
    if machines and kept_links:
        ax.axhline(len(machines[:max_rows]) - 0.5, color="black", lw=0.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_resource_label(r, instance) for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.9)
    ax.set_xlim(0, total_s * 1.005)
    ax.set_xlabel("time (s)")
    handles = [Patch(color=colour, label=kind) for kind, colour in KIND_COLOURS.items()]
    if instance.data_parallel > 1:
        handles.append(Patch(color="tab:blue", alpha=0.55, label="lighter: replica >= 1"))
    fig.legend(handles=handles, loc="outside lower center", fontsize=8, ncols=len(handles), frameon=False)
    analytic = cost.iteration_time(instance.cluster, instance.workload, _placement_from_tasks(tasks, instance))
    heading = title or (
        f"{instance.workload.name}: simulated iteration {result.iteration_time_s:.3f} s "
        f"(cost model {analytic:.3f} s)" + (f"; {hidden} quieter links not shown" if hidden else "")
    )
    ax.set_title(heading, loc="left", fontsize=10)
    return fig


def _placement_from_tasks(tasks, instance: Instance) -> np.ndarray:
    """``[D, L]`` placement read back from the forward tasks of a simulated timeline."""
    w = instance.workload
    out = np.zeros((w.data_parallel, w.num_layers), dtype=np.int64)
    for t in tasks:
        if t.kind == "forward":
            out[t.replica, t.layer] = _resource_order(t.resource)
    return out


def _resource_order(resource: str) -> int:
    digits = "".join(ch if ch.isdigit() else " " for ch in resource).split()
    return int(digits[0]) if digits else 0


def _resource_label(resource: str, instance: Instance) -> str:
    names = [mc.name for mc in instance.cluster.machines]
    parts = resource.replace("->", " ").split()
    if resource.startswith("machine") and len(parts) == 2 and parts[1].isdigit():
        return names[int(parts[1])]
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return f"{names[int(parts[1])]} \u2192 {names[int(parts[2])]}"
    return resource


# ---- leaderboard -----------------------------------------------------------------------------

LEADERBOARD_COLUMNS = ("instance", "method", "speedup_vs_naive")


def read_results_csv(path: str | Path) -> list[dict]:
    """Rows of a ``results.csv`` (``hulk evaluate``, the experiments) as dicts.

    Needs the columns ``instance``, ``method`` and ``speedup_vs_naive``; numbers become floats
    (an empty cell is ``nan``), ``feasible`` a bool when present; other columns stay strings.

    Raises:
        HulkInputError: a missing file or column, or a speed-up that is not a number.
    """
    import csv

    src = Path(path)
    try:
        with src.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in LEADERBOARD_COLUMNS if c not in header]
            if missing:
                raise HulkInputError(
                    f"missing column(s) {', '.join(missing)}; a results.csv from `hulk evaluate` has "
                    f"{', '.join(LEADERBOARD_COLUMNS)}",
                    source=str(src),
                )
            rows = []
            for n, raw in enumerate(reader, start=2):
                row: dict = dict(raw)
                for key in ("speedup_vs_naive", "iteration_time_s", "gap_to_best", "wall_s", "cost_evals"):
                    if key in row:
                        row[key] = _float_cell(row[key], src, n, key)
                if "feasible" in row:
                    row["feasible"] = str(row["feasible"]).strip().lower() == "true"
                rows.append(row)
    except (OSError, UnicodeDecodeError) as exc:
        raise HulkInputError(f"cannot read the results file: {exc}", source=str(src)) from None
    if not rows:
        raise HulkInputError("no result rows", source=str(src))
    return rows


def _float_cell(value: str | None, src: Path, row: int, key: str) -> float:
    text = (value or "").strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise HulkInputError(f"not a number: {text!r}", source=str(src), row=row, field=key) from None


def _row_value(row, key: str):
    """A field of a result row (object or mapping); a missing speed-up counts as undefined."""
    if isinstance(row, Mapping):
        return row.get(key, math.nan) if key == "speedup_vs_naive" else row[key]
    return getattr(row, key)


def speedup_summary(rows: Sequence) -> list[dict]:
    """Per method (best geometric mean first): ``method``, ``geomean``, ``low``, ``high`` (one
    geometric standard error either side), ``speedups`` (finite positive values), ``n``.

    ``rows`` are :class:`hulk_env.evaluation.ResultRow` or mappings with ``method`` and
    ``speedup_vs_naive`` (e.g. from :func:`read_results_csv`).
    """
    by_method: dict[str, list[float]] = {}
    for row in rows:
        by_method.setdefault(str(_row_value(row, "method")), [])
        value = float(_row_value(row, "speedup_vs_naive"))
        if math.isfinite(value) and value > 0:
            by_method[str(_row_value(row, "method"))].append(value)
    out = []
    for method, values in by_method.items():
        logs = np.log(np.asarray(values, dtype=float))
        mean = float(logs.mean()) if len(logs) else math.nan
        se = float(logs.std(ddof=1) / np.sqrt(len(logs))) if len(logs) > 1 else 0.0
        out.append({"method": method, "geomean": math.exp(mean) if len(logs) else math.nan,
                    "low": math.exp(mean - se) if len(logs) else math.nan,
                    "high": math.exp(mean + se) if len(logs) else math.nan,
                    "speedups": values, "n": len(values)})
    out.sort(key=lambda e: (-(e["geomean"] if math.isfinite(e["geomean"]) else -math.inf), e["method"]))
    return out


def leaderboard_figure(rows: Sequence, title: str | None = None, reference: float | None = None):
    """Geometric-mean speed-up over naive per method: bars, one-standard-error whiskers (in log
    space) and one dot per instance, on a log axis (speed-ups are ratios).

    Args:
        rows: result rows (see :func:`speedup_summary`).
        title: the figure title.
        reference: draw a dashed line at this speed-up too (e.g. 1.25 for "20% shorter").
    """
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator

    summary = [e for e in speedup_summary(rows) if e["n"] > 0]
    if not summary:
        raise HulkInputError("no finite speed-ups to plot (every method infeasible?)")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(summary) + 2.5), 4.8), dpi=100)
    rng = np.random.default_rng(0)  # jitter of the dots only
    for i, e in enumerate(summary):
        # Bars start at 1 (= naive): up for faster, down for slower (a log axis has no zero).
        ax.bar(i, e["geomean"] - 1.0, bottom=1.0, width=0.65, color="tab:blue" if e["geomean"] >= 1 else "tab:gray",
               alpha=0.75, zorder=2)
        ax.errorbar(i, e["geomean"], yerr=[[e["geomean"] - e["low"]], [e["high"] - e["geomean"]]], color="black",
                    capsize=4, lw=1.2, zorder=4)
        jitter = rng.uniform(-0.2, 0.2, e["n"])
        ax.scatter(i + jitter, e["speedups"], s=12, color="black", alpha=0.55, zorder=3, edgecolors="none")
        ax.annotate(f"\u00d7{e['geomean']:.2f}", (i, e["high"]), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, weight="bold", zorder=5)
    ax.axhline(1.0, color="black", lw=0.8, zorder=1)
    if reference is not None:
        ax.axhline(reference, color="tab:red", lw=1.0, ls="--", zorder=1, label=f"\u00d7{reference:g}")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(len(summary)))
    ax.set_xticklabels([e["method"] for e in summary], rotation=30, ha="right", fontsize=9)
    ax.set_ylabel("speed-up vs naive (naive time / method time)")
    n_instances = len({str(_row_value(r, "instance")) for r in rows})
    ax.set_title(title or f"geometric-mean speed-up over naive, {n_instances} instance(s); "
                 "whiskers: \u00b11 geometric s.e., dots: instances", fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.25, zorder=0)
    fig.tight_layout()
    return fig


def speedup_bars_figure(
    rows: Sequence,
    methods: Sequence[str] | None = None,
    reference: float | None = None,
    title: str | None = None,
):
    """Speed-up over naive per instance (groups) and method (bars): the median of repeated rows
    (seeds) with min-max whiskers, on a log axis; bars start at 1 (= naive).

    Args:
        rows: result rows (see :func:`speedup_summary`); rows repeated for one instance and
            method (several seeds) are summarised.
        methods: the methods to show, in this order (default: all but ``naive``, in first-seen
            order).
        reference: draw a dashed line at this speed-up too.
        title: the figure title.
    """
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator

    values: dict[tuple[str, str], list[float]] = {}
    instances: list[str] = []
    seen: list[str] = []
    for row in rows:
        inst, method = str(_row_value(row, "instance")), str(_row_value(row, "method"))
        if inst not in instances:
            instances.append(inst)
        if method not in seen:
            seen.append(method)
        value = float(_row_value(row, "speedup_vs_naive"))
        values.setdefault((inst, method), [])
        if math.isfinite(value) and value > 0:
            values[(inst, method)].append(value)
    shown = list(methods) if methods else [m for m in seen if m != "naive"]
    if not shown or not instances:
        raise HulkInputError("nothing to plot: no methods or instances in the rows")
    fig, ax = plt.subplots(figsize=(min(15.0, max(8.0, 0.16 * len(shown) * len(instances) + 3.0)), 5.4), dpi=100,
                           layout="constrained")
    width = 0.8 / len(shown)
    colours = plt.get_cmap("tab10")
    for k, method in enumerate(shown):
        xs, med, lo, hi = [], [], [], []
        for i, inst in enumerate(instances):
            v = values.get((inst, method), [])
            if v:
                xs.append(i - 0.4 + (k + 0.5) * width)
                med.append(float(np.median(v)))
                lo.append(min(v))
                hi.append(max(v))
        if not xs:
            continue
        med_a = np.asarray(med)
        ax.bar(xs, med_a - 1.0, bottom=1.0, width=width * 0.92, color=colours(k % 10), label=method, zorder=2)
        ax.errorbar(xs, med_a, yerr=[med_a - np.asarray(lo), np.asarray(hi) - med_a], fmt="none", ecolor="black",
                    elinewidth=0.8, capsize=1.5, zorder=3)
    ax.axhline(1.0, color="black", lw=0.8, zorder=1)
    if reference is not None:
        ax.axhline(reference, color="tab:red", lw=1.0, ls="--", zorder=1, label=f"\u00d7{reference:g}")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(len(instances)))
    ax.set_xticklabels(instances, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(instances) - 0.4)
    ax.set_ylabel("speed-up vs naive (log scale)")
    ax.grid(axis="y", which="both", alpha=0.25, zorder=0)
    fig.legend(fontsize=8, ncols=min(9, len(shown) + (reference is not None)), loc="outside lower center",
               frameon=False)
    ax.set_title(title or "speed-up over naive per instance (median over seeds, whiskers: min-max)", fontsize=10)
    return fig


# ---- learning curves -------------------------------------------------------------------------


class Curve(NamedTuple):
    """One scalar series.

    Attributes:
        tag: its name (a TensorBoard tag like ``placement/speedup_vs_naive`` or a CSV column).
        steps: ``[N]`` environment steps.
        values: ``[N]`` values.
    """

    tag: str
    steps: np.ndarray
    values: np.ndarray


STEP_COLUMNS = ("timesteps", "num_timesteps", "timestep", "step", "steps", "global_step")
DEFAULT_CURVE_TAGS = (
    "placement/speedup_vs_naive",
    "eval/mean_speedup_vs_naive",
    "eval/mean_speedup",
    "rollout/ep_rew_mean",
)
_EVENT_GLOB = "events.out.tfevents.*"


def read_curves(path: str | Path) -> list[Curve]:
    """Scalar series from a run directory, a TensorBoard event file or a CSV file.

    * CSV: the first column named like a step (``timesteps``, ``step``, ...; else the first
      column) is the x axis; every other numeric column is a curve named after it (prefixed with
      ``eval/`` for a run's ``eval/evaluations.csv``).
    * TensorBoard: every scalar tag of every event file (read with tensorboard's
      ``EventAccumulator``); series of one tag from several files (a resumed run) are merged
      in step order.
    * A directory: all event files below it, plus ``eval/evaluations.csv`` when there.

    Raises:
        HulkInputError: the path does not exist or holds no scalar series.
    """
    src = Path(path)
    if not src.exists():
        raise HulkInputError("no such file or run directory", source=str(src))
    if src.is_file():
        curves = _csv_curves(src) if src.suffix.lower() == ".csv" else _event_curves([src])
    else:
        curves = _event_curves(sorted(src.rglob(_EVENT_GLOB)))
        evaluations = src / "eval" / "evaluations.csv"
        if evaluations.is_file():
            known = {c.tag for c in curves}
            curves += [c for c in _csv_curves(evaluations, prefix="eval/") if c.tag not in known]
        if not curves:
            curves = [c for f in sorted(src.glob("*.csv")) for c in _csv_curves(f)]
    if not curves:
        raise HulkInputError(
            "no learning curves here: expected TensorBoard event files (tb/) or a CSV with a step column",
            source=str(src),
        )
    return curves


def _csv_curves(path: Path, prefix: str = "") -> list[Curve]:
    import csv

    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise HulkInputError(f"cannot read the CSV: {exc}", source=str(path)) from None
    if len(rows) < 2:
        return []
    header, body = rows[0], rows[1:]
    x_col = next((header.index(c) for c in STEP_COLUMNS if c in header), 0)
    columns = list(zip(*[r for r in body if len(r) == len(header)], strict=True)) if body else []
    if not columns:
        return []
    try:
        steps = np.array([float(v) for v in columns[x_col]])
    except ValueError:
        raise HulkInputError(f"step column '{header[x_col]}' holds non-numbers", source=str(path)) from None
    out = []
    for i, name in enumerate(header):
        if i == x_col:
            continue
        try:
            values = np.array([float(v) if v.strip() else math.nan for v in columns[i]])
        except ValueError:
            continue  # a text column (method names, ...)
        out.append(Curve(prefix + name, steps, values))
    return out


def _event_curves(files: Sequence[Path]) -> list[Curve]:
    if not files:
        return []
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[tuple[float, float]]] = {}
    for f in files:
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        try:
            acc.Reload()
        except Exception as exc:  # a truncated or foreign file: say which one
            raise HulkInputError(f"not a readable TensorBoard event file ({type(exc).__name__})", source=str(f)) from None
        for tag in acc.Tags().get("scalars", []):
            series.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    out = []
    for tag, points in series.items():
        points.sort()
        arr = np.asarray(points, dtype=float)
        out.append(Curve(tag, arr[:, 0], arr[:, 1]))
    return out


def smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's exponential moving average with bias correction (``weight`` in [0, 1))."""
    if weight <= 0 or len(values) == 0:
        return np.asarray(values, dtype=float)
    out, last, debias = np.empty(len(values)), 0.0, 0.0
    for i, v in enumerate(np.asarray(values, dtype=float)):
        last = weight * last + (1 - weight) * v
        debias = weight * debias + (1 - weight)
        out[i] = last / debias
    return out


def curves_figure(
    runs: Mapping[str, Sequence[Curve]],
    tags: Sequence[str] | None = None,
    smoothing: float = 0.6,
    title: str | None = None,
):
    """Learning curves: one panel per tag, one line per run (raw faint, smoothed solid).

    Args:
        runs: ``{label: curves}``, e.g. ``{"gnn": read_curves("runs/gnn")}``.
        tags: the tags to plot (default: those of :data:`DEFAULT_CURVE_TAGS` that any run has,
            else the first four tags).
        smoothing: EMA weight (0 = raw only).
        title: the figure title.

    Raises:
        HulkInputError: no run has any of the requested tags.
    """
    plt = _pyplot()
    available = {c.tag for curves in runs.values() for c in curves}
    if tags:
        chosen = [t for t in tags if t in available]
        if not chosen:
            raise HulkInputError(
                f"none of the tags {', '.join(tags)} is in these runs; available: {', '.join(sorted(available))}",
                field="tag",
            )
    else:
        chosen = [t for t in DEFAULT_CURVE_TAGS if t in available] or sorted(available)[:4]
        if "eval/mean_speedup_vs_naive" in chosen and "eval/mean_speedup" in chosen:
            chosen.remove("eval/mean_speedup")  # the CSV copy of the same evaluations
    cols = min(len(chosen), 2)
    nrows = math.ceil(len(chosen) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.7 * nrows + 0.6), dpi=100, squeeze=False,
                             layout="constrained")
    colours = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    # Runs labelled "<group>/<member>" (e.g. variant/seed) share their group's colour.
    groups = list(dict.fromkeys(label.split("/")[0] for label in runs))
    member: dict[str, int] = {}
    look = {}
    for label in runs:
        group = label.split("/")[0]
        look[label] = (colours(groups.index(group) % 10), styles[member.get(group, 0) % len(styles)])
        member[group] = member.get(group, 0) + 1
    handles: dict[str, object] = {}
    for k, tag in enumerate(chosen):
        ax = axes[k // cols][k % cols]
        for label, curves in runs.items():
            colour, style = look[label]
            for c in curves:
                if c.tag != tag or len(c.steps) == 0:
                    continue
                if smoothing > 0 and len(c.values) > 2:
                    ax.plot(c.steps, c.values, color=colour, alpha=0.2, lw=0.8)
                    (line,) = ax.plot(c.steps, smooth(c.values, smoothing), color=colour, ls=style, lw=1.6)
                else:
                    (line,) = ax.plot(c.steps, c.values, color=colour, ls=style, lw=1.6,
                                      marker="o" if len(c.values) < 30 else None, ms=3)
                handles.setdefault(label, line)
        if "speedup" in tag:
            ax.axhline(1.0, color="black", lw=0.7, ls=":")
        ax.set_title(tag, fontsize=9)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    for k in range(len(chosen), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", fontsize=8,
               ncols=min(6, len(handles)), frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


# ---- files -----------------------------------------------------------------------------------


def save_figure(fig, path: str | Path, dpi: int | None = None) -> Path:
    """Save ``fig`` as PNG (parent folders created) and close it."""
    plt = _pyplot()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi)
    plt.close(fig)
    return out


def figure_to_rgb(fig) -> np.ndarray:
    """``[H, W, 3]`` uint8 pixels of ``fig`` (closed afterwards)."""
    plt = _pyplot()
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return rgb
