"""``hulk bench cost|env``: throughput figures and ratios against a reference measured in the
same run (``hulk bench train``, which needs the agent stack, lives in :mod:`hulk_cli.train`)."""

from __future__ import annotations

from typing import Annotated

import typer

from hulk_cli.output import clean_errors, print_figures

app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures and ratios, as JSON).")


@app.command("cost")
@clean_errors
def bench_cost_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    placements: Annotated[int, typer.Option("--placements", min=100)] = 20_000,
    sim_cases: Annotated[int, typer.Option("--sim-cases", min=10)] = 500,
) -> None:
    """Cost-model throughput (batch vs one call at a time) and error against the simulator."""
    from hulk_env.bench import bench_cost

    print_figures(bench_cost(num_placements=placements, sim_cases=sim_cases), as_json)


@app.command("env")
@clean_errors
def bench_env_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    seconds: Annotated[float, typer.Option("--seconds", min=0.5)] = 3.0,
) -> None:
    """Env steps per second (random masked actions) against CartPole-v1 in the same run."""
    from hulk_env.bench import bench_env

    print_figures(bench_env(seconds=seconds), as_json)
