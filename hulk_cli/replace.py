"""``hulk replace``: re-place a running model after machines or a region fail; ``hulk bench replace``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hulk_cli.methods import (
    ClusterOpt,
    DataParallelOpt,
    MicroBatchesOpt,
    ModelOpt,
    ScheduleOpt,
    SeedOpt,
)
from hulk_cli.output import clean_errors, console, print_figures, print_json
from hulk_env.errors import HulkInputError

COMPARED = ("scratch", "repair", "search", "agent")
FailOpt = Annotated[str, typer.Option("--fail", help="What failed: NAME[,NAME...], region:NAME or P% (e.g. 10%).")]
HorizonOpt = Annotated[int, typer.Option("--horizon", min=0, help="Iterations the new placement must run: total = migration + horizon x iteration time.")]
CheckpointOpt = Annotated[str | None, typer.Option("--checkpoint", help="Where the last checkpoint lives: region:NAME (default: a copy in every region).")]
CheckpointGbpsOpt = Annotated[float, typer.Option("--checkpoint-gbps", min=0.001, help="The checkpoint store's read bandwidth, shared by its reads (Gbps).")]


def checkpoint_store(checkpoint: str | None, gbps: float):
    """The :class:`~hulk_env.replacement.migration.CheckpointStore` of the CLI options."""
    from hulk_env.replacement import CheckpointStore
    from hulk_env.units import gbps_to_bytes_per_s

    region = None
    if checkpoint is not None:
        text = checkpoint.strip()
        if not text.lower().startswith("region:"):
            raise HulkInputError(f"'{checkpoint}' is not region:NAME", field="checkpoint")
        region = text.split(":", 1)[1]
    return CheckpointStore(region=region, egress_bps=gbps_to_bytes_per_s(gbps))


def load_running(
    placement: Path, cluster: str, model: str, data_parallel: int | None, micro_batches: int | None, schedule: str | None
):
    """``(instance, old placement)`` from a placement file; ``D`` defaults to the file's replicas."""
    from hulk_env.generators import fixed_instance
    from hulk_env.replacement.problem import placement_from_file, read_placement_file

    file = read_placement_file(placement)
    instance = fixed_instance(
        cluster, model, data_parallel=data_parallel or len(file.rows), num_micro_batches=micro_batches, schedule=schedule
    )
    return instance, placement_from_file(file, instance)


@clean_errors
def replace(
    placement: Annotated[Path, typer.Option("--placement", "-p", help="The running placement: `hulk place --json` output.")],
    fail: FailOpt,
    cluster: ClusterOpt = "default",
    model: ModelOpt = "default",
    method: Annotated[str, typer.Option("--method", help="scratch, scratch:NAME, repair, search or agent; the others are shown for comparison.")] = "search",
    horizon: HorizonOpt = 1_000,
    data_parallel: DataParallelOpt = None,
    micro_batches: MicroBatchesOpt = None,
    schedule: ScheduleOpt = None,
    checkpoint: CheckpointOpt = None,
    checkpoint_gbps: CheckpointGbpsOpt = 10.0,
    seed: SeedOpt = 0,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Cost-model evaluations for search.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write before/after placement maps: PATH-before.png, PATH-after.png.")] = None,
) -> None:
    """Re-place a running model after machines or a whole region fail, weighing moved bytes."""
    from hulk_env.render import placement_rows, save_figure
    from hulk_env.replacement import ReplacementProblem, parse_failures
    from hulk_env.replacement.failures import names
    from hulk_env.replacement.methods import get_replace_method, run_method

    get_replace_method(method)  # an unknown method fails before any work
    instance, old = load_running(placement, cluster, model, data_parallel, micro_batches, schedule)
    scenario = parse_failures(instance.cluster, fail, seed)
    problem = ReplacementProblem(
        instance, old, list(scenario.failed), horizon, checkpoint_store(checkpoint, checkpoint_gbps), scenario.label
    )
    names_failed = names(instance.cluster, scenario.failed)
    order = [method, *(m for m in COMPARED if m != method)]
    results = {m: run_method(problem, m, seed, budget if m == "search" else None) for m in order}
    chosen = results[method]
    if not chosen.feasible:
        reasons = {m: r.reason for m, r in results.items() if not r.feasible}
        if len(reasons) == len(results):
            raise HulkInputError(
                f"no placement fits on the {len(problem.survivors)} machines left after {scenario.label} failed: {chosen.reason}"
            )
        raise HulkInputError(f"{method} found no placement ({chosen.reason}); try --method search")
    if plot is not None:
        from hulk_env.replacement.plots import before_after_figures

        before, after = before_after_figures(problem, chosen)
        paths = [save_figure(fig, plot.with_name(f"{plot.stem}-{tag}.png")) for fig, tag in ((before, "before"), (after, "after"))]
    if as_json:
        print_json({
            "instance": instance.instance_id,
            "failed": names_failed,
            "label": scenario.label,
            "horizon_iterations": horizon,
            "checkpoint": problem.store.label(),
            "displaced_slots": int(problem.displaced.sum()),
            "method": method,
            "placement": chosen.placement,
            "machines": [row["machine"] for row in placement_rows(instance, chosen.placement)],
            "result": chosen.to_dict(),
            "scratch": results["scratch"].to_dict(),
            "compared": [r.to_dict() for r in results.values()],
            "plot": [str(p) for p in paths] if plot is not None else None,
        })
        return
    console.print(
        f"{scenario.label} failed ({len(names_failed)} machine{'s' if len(names_failed) > 1 else ''}: "
        f"{', '.join(names_failed[:6])}{' ...' if len(names_failed) > 6 else ''}); "
        f"{int(problem.displaced.sum())} of {problem.old.size} slots displaced; checkpoint: {problem.store.label()}"
    )
    console.print(comparison_table(results, method, horizon))
    o = chosen.outcome
    console.print(
        f"{method}: {o.iteration_time_s:.3f} s per iteration, {o.moved_bytes / 1e9:,.1f} GB moved "
        f"({o.checkpoint_bytes / 1e9:,.1f} GB from the checkpoint) in {o.migration_s:,.1f} s; total over "
        f"{horizon:,} iterations [bold]{o.total_s:,.0f} s[/]"
        + (f", training rolls back to the last checkpoint ({len(o.lost_layers)} layers survived nowhere)" if o.lost_layers else "")
    )
    table = Table("region", "machine", "GPUs", "layers (replica:range)", "memory GB", title=f"{method}'s placement")
    for row in placement_rows(instance, chosen.placement):
        table.add_row(row["region"], row["machine"], row["gpu"], row["layers"], f"{row['memory_gb']:,.1f} / {row['memory_limit_gb']:,.0f}")
    console.print(table)
    if plot is not None:
        console.print(f"maps written to {paths[0]} and {paths[1]}")


def comparison_table(results: dict, chosen: str, horizon: int) -> Table:
    """One row per method: iteration time, moved bytes, migration, horizon total, decision time."""
    best = min((r.outcome.total_s for r in results.values() if r.feasible), default=float("nan"))
    table = Table("method", "iteration s", "moved GB", "migration s", f"total s ({horizon:,} it.)", "vs best", "decision s",
                  title="re-placement methods")
    for name, r in results.items():
        label = f"[bold]{name}[/]" if name == chosen else name
        if not r.feasible:
            table.add_row(label, "-", "-", "-", "infeasible", "-", f"{r.decision_s:.2f}")
            continue
        o = r.outcome
        table.add_row(label, f"{o.iteration_time_s:.3f}", f"{o.moved_bytes / 1e9:,.1f}", f"{o.migration_s:,.1f}",
                      f"{o.total_s:,.0f}", f"x{o.total_s / best:.3f}", f"{r.decision_s:.2f}")
    return table


@clean_errors
def bench_replace_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    clusters: Annotated[str | None, typer.Option("--clusters", help="Comma-separated clusters (default: the built-in ones and hulk-paper).")] = None,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Cost-model evaluations for search (default 20,000).")] = None,
    seed: SeedOpt = 0,
) -> None:
    """Every re-placement method on fixed failure scenarios (horizon 1,000): totals vs the best, decision times."""
    from hulk_env.replacement.bench import bench_replace

    names = [c.strip() for c in clusters.split(",") if c.strip()] if clusters else None
    result = bench_replace(names, seed=seed, budget=budget)
    if as_json:
        print_json(result)
        return
    rows = result.pop("rows")
    table = Table("scenario", "displaced", *(f"{m} / best" for m in COMPARED), title="re-placement benchmark")
    for row in rows:
        if not row["feasible"]:
            table.add_row(row["scenario"], str(row["displaced_slots"]), *(["infeasible"] * len(COMPARED)))
            continue
        table.add_row(row["scenario"], str(row["displaced_slots"]),
                      *(f"{row[f'{m}_total_s'] / row['best_total_s']:.3f}" for m in COMPARED))
    console.print(table)
    print_figures(result, False)
