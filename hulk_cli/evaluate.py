"""``hulk evaluate``: methods on a benchmark suite; the leaderboard, CSV, JSON and Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hulk_cli.methods import (
    LayersPerBlockOpt,
    MicroBatchSizeOpt,
    RecomputeOpt,
    SeqLenOpt,
    model_overrides,
    policy_method,
    resolve_method,
)
from hulk_cli.output import clean_errors, console, err_console, leaderboard_table, print_figures
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.suites import SUITES
from hulk_env.validation import limits

DEFAULT_METHODS = "naive,random,compute-greedy,latency-chain-dp,partition,genetic,anneal"


@clean_errors
def evaluate(
    suite: Annotated[str, typer.Option("--suite", "-s", help="A benchmark suite: " + ", ".join(SUITES) + ".")] = "tiny-v0",
    methods: Annotated[str, typer.Option("--methods", help="Comma-separated method names (or run directories).")] = DEFAULT_METHODS,
    policy: Annotated[list[Path] | None, typer.Option("--policy", help="A trained policy's run directory (repeatable).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for results.csv, results.json, summary.md and report.html.")] = Path("runs/evaluate"),
    hulk_data: Annotated[Path | None, typer.Option("--hulk-data", help="The paper's data directory (paper-v0).")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=limits.MAX_SEED)] = 0,
    budget: Annotated[int | None, typer.Option("--budget", min=1, max=limits.MAX_BUDGET, help="Evaluation budget of every search method.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N instances.")] = None,
    micro_batch_size: MicroBatchSizeOpt = None,
    seq_len: SeqLenOpt = None,
    layers_per_block: LayersPerBlockOpt = None,
    recompute: RecomputeOpt = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Run every (instance, method) as a Ray task: local (a Ray started here), auto (the cluster of `ray start` here) or a cluster address.")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="With --ray: tasks at a time (default: the cluster's CPUs).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Keep the rows already in OUT/results.csv; run only the missing ones.")] = False,
) -> None:
    """Run methods on a benchmark suite; print the leaderboard and write CSV/JSON/Markdown.

    Every finished row is saved in OUT/results.csv at once, so an interrupted run loses at most
    the tasks in flight: rerun with ``--resume``. ``--ray`` runs the tasks on Ray (same rows).

    ``--micro-batch-size``, ``--seq-len``, ``--layers-per-block`` and ``--recompute`` rebuild
    every instance's model with that setting (the title of the results says so).
    """
    from dataclasses import replace

    from hulk_env.baselines import METHODS
    from hulk_env.evaluation import leaderboard, load_suite
    from hulk_env.evaluation.distributed import evaluate_tasks
    from hulk_env.workload import apply_overrides

    instances = load_suite(suite, hulk_data=hulk_data)[:limit]
    overrides = model_overrides(micro_batch_size, seq_len, layers_per_block, recompute)
    instances = [replace(i, workload=apply_overrides(i.workload, **overrides)) for i in instances]
    setting = "".join(f" {k.replace('_', '-')}={v}" for k, v in overrides.items())
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names and not policy:
        raise HulkInputError(f"--methods {methods!r} names no method; e.g. --methods naive,genetic", field="methods")
    extra = {n: resolve_method(n) for n in names if n not in METHODS}
    extra.update({f"policy:{Path(p).name}": policy_method(p) for p in policy or []})
    budgets = {n: budget for n in names} if budget else None
    if workers is not None and ray is None:
        raise HulkInputError("--workers needs --ray (local, auto or a cluster address)")
    try:
        run = evaluate_tasks(
            instances, names, out, seed=seed, budgets=budgets, extra_methods=extra,
            ray=ray, workers=workers, resume=resume, title=f"{suite}{setting} leaderboard",
        )  # fmt: skip
    except KeyboardInterrupt:
        err_console.print(f"interrupted: the finished rows are in {out / 'results.csv'}; rerun with --resume")
        raise typer.Exit(130) from None
    rows, paths = run.rows, run.paths
    console.print(leaderboard_table(leaderboard(rows), f"{suite}{setting}: {len(instances)} instances"))
    if run.skipped:
        console.print(f"resumed: {run.skipped} rows kept, {run.ran} run")
    console.print(f"wrote {paths['csv']}, {paths['json']} and {paths['summary']}")
    from hulk_cli.report import SETTINGS_FILE, evaluation_settings, write_report
    from hulk_env.files import atomic_write_text

    policies = {f"policy:{Path(p).name}": str(p) for p in policy or []}
    chosen = evaluation_settings(suite, names, policies, seed, budget, limit, overrides, None if hulk_data is None else str(hulk_data))
    atomic_write_text(out / SETTINGS_FILE, json.dumps(chosen, indent=2) + "\n")
    console.print(f"report: {write_report(out)}")


@clean_errors
def bench_evaluate_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Ray workers (a local Ray with this many CPUs).")] = 2,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N instances of the suite.")] = None,
    budget: Annotated[int | None, typer.Option("--budget", min=1, max=limits.MAX_BUDGET, help="Evaluation budget of each search task.")] = None,
) -> None:
    """The same evaluation serially and on a local Ray, in one run: speed-up and equal rows."""
    from hulk_env.evaluation.distributed import BENCH_BUDGET, bench_evaluate, import_ray

    import_ray()
    print_figures(bench_evaluate(workers=workers, limit=limit, budget=budget or BENCH_BUDGET), as_json)
