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
    plan: Annotated[bool, typer.Option(
        "--plan", help="Search the plan settings with the placement (tensor parallel, ZeRO, micro-batch size).")] = False,
    fix: Annotated[list[str] | None, typer.Option(
        "--fix", help="Pin a plan setting, KEY=VALUE (tensor_parallel, zero, micro_batch_size, sync, inner_steps, "
        "outer_bits, streaming); implies --plan. Repeatable.")] = None,
    objective: Annotated[str | None, typer.Option(
        "--objective", help="time | cost | time-under-budget | cost-under-deadline; implies --plan.")] = None,
    max_usd: Annotated[float | None, typer.Option("--max-usd", help="Dollars per iteration (time-under-budget).")] = None,
    max_s: Annotated[float | None, typer.Option("--max-s", help="Seconds per iteration (cost-under-deadline).")] = None,
) -> None:
    """Place a model on a cluster and show the placement with its cost breakdown."""
    from hulk_env import cost
    from hulk_env.baselines.naive import naive
    from hulk_env.render import placement_figure, placement_rows, save_figure

    settings, usd, searched = None, None, None
    if plan or fix or objective:
        instance, name, result, wall_s, settings, usd, searched = planned(request, fix or [], objective or "time", max_usd, max_s)
    else:
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
            **({} if settings is None else {"settings": settings, "usd_per_iteration": usd, "plans": searched}),
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
    if settings is not None:
        shown = ", ".join(f"{k} {v}" for k, v in settings.items())
        money = "n/a (a machine has no price: give usd_per_hour)" if usd is None else f"{usd:.4f}"
        console.print(f"settings: {shown}; usd_per_iteration {money}; {searched}")
    if result.reason:  # a feasible result's note, e.g. why it is the naive placement
        console.print(f"note: {result.reason}")
    if plot is not None:
        console.print(f"plot written to {plot}")


def planned(request: PlacementRequest, fix: list[str], objective: str, max_usd: float | None, max_s: float | None):
    """Placement and settings searched together (:mod:`hulk_env.planner`): the instance with the
    chosen settings, the method's name, a result, seconds, the settings, dollars and a summary."""
    import time

    from hulk_env import planner
    from hulk_env.baselines import PlacementResult
    from hulk_env.errors import HulkInputError
    from hulk_env.instance import Instance
    from hulk_env.money import usd_per_iteration

    instance = base_instance(request)
    start = time.perf_counter()
    found = planner.search(
        instance, request.method, seed=request.seed, budget=request.budget, objective=objective,
        fixed=planner.parse_fixed(fix), max_usd=max_usd, max_s=max_s,
    )  # fmt: skip
    wall_s = time.perf_counter() - start
    if found.best is None:
        raise HulkInputError(
            f"no plan qualifies for objective {objective} ({len(found.plans)} evaluated, {found.pruned} pruned "
            "by the memory bounds): loosen --max-usd / --max-s or --fix fewer settings"
        )
    best = found.best
    chosen = Instance(instance.cluster, best.workload)
    result = PlacementResult(request.method, best.placement, found.cost_evals, best.note)
    try:
        usd = usd_per_iteration(chosen.cluster, chosen.workload, best.placement)
    except HulkInputError:  # a machine without a price: the time objective still answers
        usd = None
    summary = f"{len(found.plans)} settings searched, {found.pruned} pruned by the memory bounds, objective {objective}"
    return chosen, f"{request.method} + plan", result, wall_s, planner.settings_of(best.workload), usd, summary


def base_instance(request: PlacementRequest):
    """The instance of the request's options, before any plan settings are searched."""
    from hulk_cli.methods import model_overrides
    from hulk_env.errors import HulkInputError
    from hulk_env.generators import fixed_instance

    if request.policy is not None:
        raise HulkInputError("plan search uses a baseline method (--method), not a policy", field="policy")
    return fixed_instance(
        request.cluster, request.model, data_parallel=request.data_parallel,
        num_micro_batches=request.micro_batches, schedule=request.schedule,
        **model_overrides(request.micro_batch_size, request.seq_len, request.layers_per_block, request.recompute),
    )  # fmt: skip
