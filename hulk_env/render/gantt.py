"""The Gantt chart of a simulated schedule (:func:`hulk_env.simulate.simulate`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.render.common import pyplot

KIND_COLOURS = {
    "forward": "tab:blue",
    "backward": "tab:orange",
    "transfer": "tab:green",
    "allreduce": "tab:red",
}


class Bar(NamedTuple):
    """One bar of the chart: back-to-back tasks of one kind, replica and micro-batch on a resource."""

    row: str
    kind: str
    replica: int
    micro_batch: int
    start_s: float
    end_s: float


def merged_bars(tasks) -> list[Bar]:
    """Back-to-back tasks of one kind, replica and micro-batch on one resource become one bar
    (the layers of a stage run one after another; one bar per stage and micro-batch reads best)."""
    bars: list[Bar] = []
    last: dict[str, int] = {}
    for t in sorted(tasks, key=lambda t: (t.resource, t.start_s)):
        i = last.get(t.resource)
        if i is not None:
            b = bars[i]
            if (b.kind, b.replica, b.micro_batch) == (t.kind, t.replica, t.micro_batch) and t.start_s - b.end_s <= 1e-9 * max(1.0, b.end_s):
                bars[i] = b._replace(end_s=max(b.end_s, t.end_s))
                continue
        last[t.resource] = len(bars)
        bars.append(Bar(t.resource, t.kind, t.replica, t.micro_batch, t.start_s, t.end_s))
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
    plt = pyplot()
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
    bars = [b for b in merged_bars(tasks) if b.row in index]
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
