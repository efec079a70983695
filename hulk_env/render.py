"""Text and matplotlib views of a placement and of a simulated schedule.

Pure functions of an instance and a placement (or a :class:`hulk_env.simulate.SimResult`);
matplotlib is imported lazily and always with the non-interactive Agg backend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hulk_env import cost
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


def placement_figure(instance: Instance, placement: np.ndarray, title: str | None = None):
    """Machines on a world map (or a region grid), coloured by the pipeline position of the
    layers they hold; links drawn with a width proportional to the bytes they carry."""
    plt = _pyplot()
    c, w = instance.cluster, instance.workload
    placement = np.asarray(placement)
    x, y, geographic = machine_positions(instance)
    b = cost.evaluate(c, w, placement)
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=100)
    traffic = b.link_s_per_mb * np.where(np.isfinite(c.bandwidth_bps), c.bandwidth_bps, 0.0)
    traffic = traffic + traffic.T
    if traffic.max() > 0:
        for i, j in zip(*np.nonzero(np.triu(traffic, 1)), strict=True):
            width = 0.5 + 4.0 * traffic[i, j] / traffic.max()
            ax.plot([x[i], x[j]], [y[i], y[j]], color="tab:gray", lw=width, alpha=0.6, zorder=1)
    used = np.zeros(c.num_machines, dtype=bool)
    used[np.unique(placement)] = True
    position = np.full(c.num_machines, np.nan)
    for m in np.flatnonzero(used):
        position[m] = np.mean(np.nonzero(placement == m)[1]) / max(w.num_layers - 1, 1)
    ax.scatter(x[~used], y[~used], s=18, c="lightgray", zorder=2, label="idle")
    sc = ax.scatter(x[used], y[used], s=70, c=position[used], cmap="viridis", vmin=0, vmax=1,
                    edgecolors="black", zorder=3)
    fig.colorbar(sc, ax=ax, label="mean layer position (0 = input, 1 = output)")
    for region in c.regions:
        idx = np.flatnonzero(c.region_index == c.regions.index(region))
        ax.annotate(region, (x[idx].mean(), y[idx].mean() + 4), ha="center", fontsize=8)
    if geographic:
        ax.set_xlim(-180, 180)
        ax.set_ylim(-60, 80)
        ax.set_xlabel("longitude")
        ax.set_ylabel("latitude")
        ax.grid(alpha=0.3)
    else:
        ax.set_yticks([])
    ax.set_title(
        title or f"{w.name} on {c.name}: {b.iteration_time_s:.3f} s per iteration "
        f"({len(np.unique(placement))} machines)"
    )
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig


def gantt_figure(result, instance: Instance, max_rows: int = 40, title: str | None = None):
    """The simulated schedule: one row per machine and per directed link that did work.

    Args:
        result: a :class:`hulk_env.simulate.SimResult` recorded with tasks.
        instance: the instance it simulated (for names).
        max_rows: rows kept (the busiest resources).
    """
    plt = _pyplot()
    colours = {"forward": "tab:blue", "backward": "tab:orange", "transfer": "tab:green",
               "allreduce": "tab:red"}
    busy: dict[str, float] = {}
    for t in result.tasks:
        busy[t.resource] = busy.get(t.resource, 0.0) + (t.end_s - t.start_s)
    machines = [r for r in busy if r.startswith("machine")]
    links = [r for r in busy if not r.startswith("machine")]
    rows = sorted(machines, key=_resource_order) + sorted(links, key=lambda r: -busy[r])
    rows = rows[:max_rows]
    index = {r: i for i, r in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(12, 0.3 * len(rows) + 1.5), dpi=100)
    for t in result.tasks:
        if t.resource in index:
            ax.barh(index[t.resource], t.end_s - t.start_s, left=t.start_s, height=0.8,
                    color=colours.get(t.kind, "gray"), edgecolor="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_resource_label(r, instance) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    for kind, colour in colours.items():
        ax.barh([], [], color=colour, label=kind)
    ax.legend(loc="upper right", fontsize=8, ncols=4)
    ax.set_title(title or f"simulated iteration: {result.iteration_time_s:.3f} s")
    fig.tight_layout()
    return fig


def _resource_order(resource: str) -> int:
    digits = "".join(ch if ch.isdigit() else " " for ch in resource).split()
    return int(digits[0]) if digits else 0


def _resource_label(resource: str, instance: Instance) -> str:
    names = [mc.name for mc in instance.cluster.machines]
    parts = resource.replace("->", " ").split()
    if resource.startswith("machine") and len(parts) == 2 and parts[1].isdigit():
        return names[int(parts[1])]
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return f"{names[int(parts[1])]} > {names[int(parts[2])]}"
    return resource


def save_figure(fig, path: str | Path) -> Path:
    """Save ``fig`` as PNG (parent folders created) and close it."""
    plt = _pyplot()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def figure_to_rgb(fig) -> np.ndarray:
    """``[H, W, 3]`` uint8 pixels of ``fig`` (closed afterwards)."""
    plt = _pyplot()
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return rgb
