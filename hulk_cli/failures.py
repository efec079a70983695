"""``hulk simulate-failures``: replay machine and region failures over a training run, per method."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Column, Table

from hulk_cli.methods import (
    ClusterOpt,
    DataParallelOpt,
    MicroBatchesOpt,
    ModelOpt,
    ScheduleOpt,
    SeedOpt,
)
from hulk_cli.output import clean_errors, console, print_json
from hulk_cli.replace import CheckpointGbpsOpt, CheckpointOpt, checkpoint_store, load_running
from hulk_env.errors import HulkInputError
from hulk_env.validation import limits

DEFAULT_METHODS = "scratch,repair,search,agent"
TRACE_SEARCH_BUDGET = 5_000  # per decision: a trace asks the method at every failure that hits
# A random trace's events are drawn over this many times the failure-free run time.
TRACE_SPAN = 4.0


@clean_errors
def simulate_failures(
    cluster: ClusterOpt = "default",
    model: ModelOpt = "default",
    trace: Annotated[Path | None, typer.Option("--trace", help="A trace file (YAML/JSON: checkpoint_every, events of at_h/at_s + fail/recover).")] = None,
    rate: Annotated[float | None, typer.Option("--rate", min=0.0, help="Random trace: failures per machine per hour.")] = None,
    region_rate: Annotated[float, typer.Option("--region-rate", min=0.0, help="Random trace: whole-region outages per region per hour.")] = 0.0,
    repair_h: Annotated[float, typer.Option("--repair-h", min=0.0, help="Random trace: mean hours until a failed machine is back.")] = 1.0,
    outage_h: Annotated[float, typer.Option("--outage-h", min=0.0, help="Random trace: mean hours a region outage lasts.")] = 1.0,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", min=1, help="Random trace: iterations between checkpoints.")] = 500,
    iterations: Annotated[int, typer.Option("--iterations", "-n", min=1, max=limits.MAX_TRAIN_ITERATIONS, help="Iterations to train.")] = 10_000,
    methods: Annotated[str, typer.Option("--methods", "--method", help="Comma-separated re-placement methods to compare.")] = DEFAULT_METHODS,
    placement: Annotated[Path | None, typer.Option("--placement", "-p", help="The starting placement (`hulk place --json`); default: latency-chain-dp.")] = None,
    data_parallel: DataParallelOpt = None,
    micro_batches: MicroBatchesOpt = None,
    schedule: ScheduleOpt = None,
    checkpoint: CheckpointOpt = None,
    checkpoint_gbps: CheckpointGbpsOpt = 10.0,
    seed: SeedOpt = 0,
    budget: Annotated[int, typer.Option("--budget", min=1, help="Cost-model evaluations per search decision.")] = TRACE_SEARCH_BUDGET,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the timeline plot (PNG) here.")] = None,
) -> None:
    """Replay a failure trace (a file, or random at --rate) over a run; time lost per method."""
    from hulk_env import cost
    from hulk_env.baselines import get_method
    from hulk_env.generators import fixed_instance
    from hulk_env.render import save_figure
    from hulk_env.replacement.methods import get_replace_method
    from hulk_env.replacement.traces import compare_methods, load_trace, random_trace

    if (trace is None) == (rate is None):
        raise HulkInputError("give either --trace FILE or --rate PER_HOUR (a random trace)")
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise HulkInputError("--methods is empty; e.g. --methods repair,search", field="methods")
    fns = {m: get_replace_method(m) for m in names}
    if placement is not None:
        instance, start = load_running(placement, cluster, model, data_parallel, micro_batches, schedule)
    else:
        instance = fixed_instance(cluster, model, data_parallel=data_parallel, num_micro_batches=micro_batches, schedule=schedule)
        placed = get_method("latency-chain-dp")(instance, seed, None)
        if not placed.feasible:
            raise HulkInputError(f"the model does not fit the cluster: {placed.reason}")
        start = placed.placement
    t0 = float(cost.evaluate(instance.cluster, instance.workload, start).iteration_time_s)
    if trace is not None:
        events = load_trace(trace, instance.cluster, seed)
    else:
        events = random_trace(
            instance.cluster, TRACE_SPAN * iterations * t0, rate, seed, region_outage_per_hour=region_rate,
            mean_repair_h=repair_h, mean_outage_h=outage_h, checkpoint_every=checkpoint_every,
        )
    store = checkpoint_store(checkpoint, checkpoint_gbps)
    results = compare_methods(instance, start, events, iterations, fns, seed=seed, budget=budget, store=store)
    best = min(results, key=lambda r: (not r.finished, r.wall_s))
    paths = None
    if plot is not None:
        from hulk_env.replacement.plots import timeline_figure

        title = (f"{instance.workload.name} x{instance.data_parallel} on {instance.cluster.name}: {iterations:,} iterations, "
                 f"{events.failures} failures ({events.name}); least time lost: {best.method}")
        paths = str(save_figure(timeline_figure(results, events, title), plot))
    if as_json:
        print_json({
            "instance": instance.instance_id,
            "trace": events.name,
            "failures": events.failures,
            "events": len(events.events),
            "checkpoint_every": events.checkpoint_every,
            "iterations": iterations,
            "failure_free_s": iterations * t0,
            "least_time_lost": best.method,
            "methods": [r.to_dict() for r in results],
            "plot": paths,
        })
        return
    table = Table(Column("method", no_wrap=True), "wall h", "lost m", "migr m", "redo m", "stall m", "slow m", "k it.", "calls", "dec s",
                  title=f"{events.name}: {events.failures} failures, {iterations:,} iterations")
    for r in results:
        table.add_row(
            f"[bold]{r.method}[/]" if r is best else r.method, f"{r.wall_s / 3600:.2f}", f"{r.lost_s / 60:.1f}",
            f"{r.migration_s / 60:.1f}", f"{r.rollback_s / 60:.1f}", f"{r.stalled_s / 60:.1f}", f"{r.slowdown_s / 60:.1f}",
            f"{r.iterations_done / 1000:.1f}" + ("" if r.finished else "*"), str(r.decisions), f"{r.decision_s:.1f}",
        )
    table.caption = ("minutes lost: migrating, redoing iterations after a checkpoint restore, stalled (nothing fits), "
                     "running slower; k it.: thousands of iterations done (* stopped); calls: method decisions")
    console.print(table)
    console.print(f"failure-free: {iterations * t0 / 3600:.2f} h; least time lost: [bold]{best.method}[/] ({best.lost_s / 60:.1f} min)")
    if paths:
        console.print(f"timeline written to {paths}")
