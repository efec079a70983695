"""``hulk bench settings``: the value of the plan settings and analytic-vs-simulator agreement on them."""

from __future__ import annotations

from typing import Annotated

import typer

from hulk_cli.output import clean_errors, console, print_json


@clean_errors
def bench_settings_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    small: Annotated[bool, typer.Option("--small", help="The first two cases only (a quick check).")] = False,
    method: Annotated[str, typer.Option("--method", help="The placement method the planner runs.")] = "latency-chain-dp",
) -> None:
    """On multi-GPU clusters (8-GPU A100/H100 machines over 2-4 regions, models 7B-70B):
    joint_vs_pp_dp_geomean, analytic_vs_sim_median / _p95 on plans using each new setting,
    settings_used (hulk_env/bench_settings.py)."""
    from hulk_env.bench_settings import bench_settings

    result = bench_settings(small=small, method=method)
    if as_json:
        print_json(result)
        return
    for row in result["rows"]:
        if "error" in row:
            console.print(f"{row['case']}: {row['error']}")
            continue
        pp = f"{row['pp_dp_s']:.3f} s" if row.get("pp_dp_s") else "does not fit"
        shown = ", ".join(f"{k} {v}" for k, v in row["settings"].items())
        console.print(f"{row['case']}: joint {row['joint_s']:.3f} s ({shown}); PP+DP only {pp}; "
                      f"worst sim error {max(row['sim_errors'].values()):.1%}")
    console.print(
        f"joint_vs_pp_dp_geomean {result['joint_vs_pp_dp_geomean']:.3f} (PP+DP only fits nowhere on "
        f"{result['pp_dp_unfit']}); analytic_vs_sim median {result['analytic_vs_sim_median']:.2%}, "
        f"p95 {result['analytic_vs_sim_p95']:.2%}; settings_used {result['settings_used']}"
    )
