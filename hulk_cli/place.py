"""``hulk place``: place a model on a cluster; the placement table and its cost breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Column, Table

from hulk_cli.methods import PlacementRequest, with_placement_options
from hulk_cli.output import clean_errors, console, print_json


@clean_errors
@with_placement_options
def place(
    request: PlacementRequest,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of the placement here.")] = None,
) -> None:
    """Place a model on a cluster and show the placement with its cost breakdown."""
    from hulk_env import cost
    from hulk_env.baselines.naive import naive
    from hulk_env.render import placement_figure, placement_rows, save_figure

    instance, name, result, wall_s = request.place()
    breakdown = cost.evaluate(instance.cluster, instance.workload, result.placement)
    reference = naive(instance)
    naive_s = (
        cost.evaluate(instance.cluster, instance.workload, reference.placement).iteration_time_s
        if reference.feasible else float("nan")
    )
    rows = placement_rows(instance, result.placement)
    if plot is not None:
        save_figure(placement_figure(instance, result.placement), plot)
    if as_json:
        print_json({
            "instance": instance.instance_id,
            "method": name,
            "placement": result.placement,
            "machines": [row["machine"] for row in rows],
            "rows": rows,
            "cost": breakdown.to_dict(),
            "naive_iteration_time_s": naive_s,
            "speedup_vs_naive": naive_s / breakdown.iteration_time_s,
            "cost_evals": result.cost_evals,
            "wall_s": wall_s,
            "note": result.reason,
            "plot": plot,
        })
        return
    table = Table(Column("region", overflow="fold"), Column("machine", overflow="fold"), "GPUs",  # names in full
                  "layers (replica:range)", "memory GB", "compute s/mb",
                  title=f"{name} on {instance.instance_id}")
    for row in rows:
        table.add_row(row["region"], row["machine"], row["gpu"], row["layers"],
                      f"{row['memory_gb']:,.1f} / {row['memory_limit_gb']:,.0f}", f"{row['compute_s_per_mb']:.3f}")
    console.print(table)
    b = breakdown.to_dict()
    console.print(
        f"iteration [bold]{b['iteration_time_s']:.3f} s[/] = compute {b['compute_s']:.3f} + pipeline comm "
        f"{b['pipeline_comm_s']:.3f} + bubble {b['bubble_s']:.3f} + data-parallel sync {b['dp_sync_s']:.3f}; "
        f"bottleneck: {b['bottleneck_kind']} {b['bottleneck']}; naive {naive_s:.3f} s -> "
        f"speed-up x{naive_s / b['iteration_time_s']:.2f}; {result.cost_evals} cost evaluations in {wall_s:.2f} s"
    )
    if result.reason:  # a feasible result's note, e.g. why it is the naive placement
        console.print(f"note: {result.reason}")
    if plot is not None:
        console.print(f"plot written to {plot}")
