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
    env: Annotated[str, typer.Option("--env", help="Env id to measure.")] = "hulk/Placement-v1",
    large: Annotated[str, typer.Option("--large", help="Machines of the large-cluster cases, comma-separated ('' for none).")] = "128,2048",
) -> None:
    """Env steps per second (random masked actions) against CartPole-v1 in the same run, on the
    default instance and on large clusters."""
    from hulk_env.bench import bench_env
    from hulk_env.errors import HulkInputError

    if env not in ("hulk/Placement-v0", "hulk/Placement-v1"):
        raise HulkInputError(f"--env must be hulk/Placement-v0 or hulk/Placement-v1, got {env!r}", field="env")
    try:
        sizes = tuple(int(x) for x in large.split(",") if x.strip())
    except ValueError:
        raise HulkInputError(f"--large must be comma-separated machine counts, got {large!r}", field="large") from None
    print_figures(bench_env(seconds=seconds, env_id=env, large=sizes), as_json)
