"""``hulk evaluate``: methods on a benchmark suite; the leaderboard, CSV, JSON and Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hulk_cli.methods import policy_method, resolve_method
from hulk_cli.output import clean_errors, console, leaderboard_table

DEFAULT_METHODS = "naive,random,compute-greedy,latency-chain-dp,partition,genetic,anneal"


@clean_errors
def evaluate(
    suite: Annotated[str, typer.Option("--suite", "-s", help="tiny-v0, geo-v0, hard-v0 or paper-v0.")] = "tiny-v0",
    methods: Annotated[str, typer.Option("--methods", help="Comma-separated method names (or run directories).")] = DEFAULT_METHODS,
    policy: Annotated[list[Path] | None, typer.Option("--policy", help="A trained policy's run directory (repeatable).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for results.csv, results.json, summary.md.")] = Path("runs/evaluate"),
    hulk_data: Annotated[Path | None, typer.Option("--hulk-data", help="The paper's data directory (paper-v0).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Evaluation budget of every search method.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N instances.")] = None,
) -> None:
    """Run methods on a benchmark suite; print the leaderboard and write CSV/JSON/Markdown."""
    from hulk_env.baselines import METHODS
    from hulk_env.evaluation import leaderboard, load_suite, run_methods, write_results

    instances = load_suite(suite, hulk_data=hulk_data)[:limit]
    names = [m.strip() for m in methods.split(",") if m.strip()]
    extra = {n: resolve_method(n) for n in names if n not in METHODS}
    extra.update({f"policy:{Path(p).name}": policy_method(p) for p in policy or []})
    budgets = {n: budget for n in names} if budget else None
    rows = run_methods(instances, names, seed=seed, budgets=budgets, progress=True, extra_methods=extra)
    paths = write_results(rows, out, title=f"{suite} leaderboard")
    console.print(leaderboard_table(leaderboard(rows), f"{suite}: {len(instances)} instances"))
    console.print(f"wrote {paths['csv']}, {paths['json']} and {paths['summary']}")
