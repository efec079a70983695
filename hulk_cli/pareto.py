"""``hulk pareto``: the time-versus-dollars front of the plans (placement + settings) of one instance."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hulk_cli.methods import PlacementRequest, with_placement_options
from hulk_cli.output import clean_errors, console, print_json


@clean_errors
@with_placement_options
def pareto(
    request: PlacementRequest,
    plot: Annotated[Path, typer.Option("--plot", help="Write the front as a PNG here.")] = Path("pareto.png"),
    fix: Annotated[list[str] | None, typer.Option("--fix", help="Pin a plan setting, KEY=VALUE (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Search placement and settings (as ``hulk place --objective cost``) and show every plan no
    other beats on both seconds and dollars per iteration."""
    from hulk_cli.place import base_instance
    from hulk_env import planner
    from hulk_env.render import save_figure

    instance = base_instance(request)
    found = planner.search(
        instance, request.method, seed=request.seed, budget=request.budget, objective="cost",
        fixed=planner.parse_fixed(fix or []),
    )  # fmt: skip
    front = planner.pareto_front(found.plans)
    save_figure(pareto_figure(found.plans, front, instance.instance_id), plot)
    rows = [
        {"iteration_time_s": p.iteration_time_s, "usd_per_iteration": p.usd_per_iteration,
         "machines": int(len(set(p.placement.ravel().tolist()))), "settings": planner.settings_of(p.workload)}
        for p in front
    ]  # fmt: skip
    if as_json:
        print_json({"instance": instance.instance_id, "front": rows, "plans": len(found.plans),
                    "pruned": found.pruned, "cost_evals": found.cost_evals, "plot": plot})
        return
    table = Table("s / iteration", "USD / iteration", "machines", "settings", title=f"time-vs-dollars front, {instance.instance_id}")
    for row in rows:
        shown = ", ".join(f"{k} {v}" for k, v in row["settings"].items())
        table.add_row(f"{row['iteration_time_s']:.3f}", f"{row['usd_per_iteration']:.4f}", str(row["machines"]), shown)
    console.print(table)
    console.print(f"{len(found.plans)} plans evaluated, {found.pruned} pruned by the memory bounds; plot written to {plot}")


def pareto_figure(plans, front, title: str):
    """Every feasible plan as a dot, the front as a line (seconds vs dollars per iteration)."""
    from hulk_env.render import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ok = [p for p in plans if p.feasible]
    ax.scatter([p.iteration_time_s for p in ok], [p.usd_per_iteration for p in ok], s=12, color="0.6", label="plans")
    ax.plot([p.iteration_time_s for p in front], [p.usd_per_iteration for p in front], "o-", color="C3", label="front")
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("seconds per iteration")
    ax.set_ylabel("USD per iteration")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    return fig
