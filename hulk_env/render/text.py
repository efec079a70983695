"""Placements as rows and plain text (the CLI's tables, the env's ``"ansi"`` rendering)."""

from __future__ import annotations

import numpy as np

from hulk_env import cost
from hulk_env.instance import Instance
from hulk_env.units import GB, TFLOPS


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


def held_layers(placement: np.ndarray, machine: int) -> list[tuple[int, str]]:
    """``[(replica, "0-2,5"), ...]``: the layers ``machine`` holds, per replica that uses it."""
    return [
        (r, layer_ranges(np.flatnonzero(row == machine).tolist()))
        for r, row in enumerate(np.asarray(placement))
        if np.any(row == machine)
    ]


def machines_by_region(instance: Instance) -> list[int]:
    """Machine indices grouped by region (regions in cluster order), machine order within."""
    c = instance.cluster
    return [int(m) for r in range(len(c.regions)) for m in np.flatnonzero(c.region_index == r)]


def placement_rows(instance: Instance, placement: np.ndarray) -> list[dict]:
    """One row per machine that holds layers of a complete placement, grouped by region.

    Keys: ``machine``, ``region``, ``gpu``, ``layers`` (``"r0:0-5 r1:6-9"``), ``memory_gb``,
    ``memory_limit_gb``, ``compute_s_per_mb``.
    """
    c, w = instance.cluster, instance.workload
    placement = np.asarray(placement).reshape(w.data_parallel, w.num_layers)
    breakdown = cost.evaluate(c, w, placement)
    rows = []
    for m in machines_by_region(instance):
        held = held_layers(placement, m)
        if not held:
            continue
        mc = c.machines[m]
        rows.append(
            {
                "machine": mc.name,
                "region": mc.region,
                "gpu": f"{mc.num_gpus}x {mc.gpu}",
                "layers": " ".join(f"r{r}:{ranges}" for r, ranges in held),
                "memory_gb": float(breakdown.memory_bytes[m]) / GB,
                "memory_limit_gb": mc.memory_bytes / GB,
                "compute_s_per_mb": float(breakdown.compute_s_per_mb[m]),
            }
        )
    return rows


def placement_text(instance: Instance, placement: np.ndarray) -> str:
    """A plain-text table of every machine, grouped by region, with the slots it holds.

    ``placement`` ``[D, L]`` may be partial (``-1`` unplaced): memory in use is that of the
    placed slots (:func:`hulk_env.cost.placed_memory_bytes`). A complete placement adds its
    iteration time and breakdown.
    """
    c, w = instance.cluster, instance.workload
    placement = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    used = cost.placed_memory_bytes(c, w, placement)
    lines = [f"{'region':<14} {'machine':<16} {'gpus':<16} {'TFLOP/s':>8} {'mem GB used/total':>18}  slots (replica:layers)"]
    previous = None
    for m in machines_by_region(instance):
        mc = c.machines[m]
        held = " ".join(f"r{r}:{ranges}" for r, ranges in held_layers(placement, m))
        mem = f"{used[m] / GB:,.1f}/{mc.memory_bytes / GB:,.1f}"
        region = mc.region if mc.region != previous else ""
        previous = mc.region
        lines.append(
            f"{region:<14.14} {mc.name:<16.16} {f'{mc.num_gpus}x {mc.gpu}':<16.16} "
            f"{mc.flops / TFLOPS:>8.1f} {mem:>18}  {held}"
        )
    if np.all(placement >= 0):
        b = cost.evaluate(c, w, placement).to_dict()
        lines.append(
            f"iteration {b['iteration_time_s']:.4g} s = compute {b['compute_s']:.4g} + pipeline comm "
            f"{b['pipeline_comm_s']:.4g} + bubble {b['bubble_s']:.4g} + dp sync {b['dp_sync_s']:.4g}"
        )
    return "\n".join(lines)
