"""``hulk bench scale``: show, place (latency-chain-dp) and env steps at 128 to 2,048 machines."""

from __future__ import annotations

from typing import Annotated

import typer

from hulk_cli.output import clean_errors, console, print_json
from hulk_env.errors import HulkInputError
from hulk_env.validation import limits


@clean_errors
def bench_scale_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    sizes: Annotated[str, typer.Option("--sizes", help="Machine counts, comma-separated.")] = "128,512,2048",
    env_seconds: Annotated[float, typer.Option("--env-seconds", min=0.1, max=600.0, help="Seconds of env stepping per size.")] = 3.0,
) -> None:
    """Per size (GPT-3 13B on a cluster file of that many machines over 32 cities, each size in a
    fresh process): show_s, place_chain_dp_s, env_steps_per_s, peak_rss_mb; and the growth
    exponent of place_chain_dp_s (log-log slope)."""
    from hulk_env.bench_scale import bench_scale

    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise HulkInputError(f"must be comma-separated machine counts, got {sizes!r}", field="--sizes") from None
    if not counts or any(not 2 <= n <= limits.MAX_MACHINES for n in counts):
        raise HulkInputError(
            f"each size must be 2..{limits.MAX_MACHINES} machines ({limits.cite('MAX_MACHINES')}), got {sizes!r}",
            field="--sizes",
        )
    result = bench_scale(counts, env_seconds=env_seconds)
    if as_json:
        print_json(result)
        return
    for row in result["sizes"]:
        if "error" in row:
            console.print(f"{row['machines']:>6,} machines: failed: {row['error']}")
            continue
        console.print(
            f"{row['machines']:>6,} machines: show {row['show_s']:.2f} s, latency-chain-dp "
            f"{row['place_chain_dp_s']:.1f} s, env {row['env_steps_per_s']:,.0f} steps/s, "
            f"peak {row['peak_rss_mb']:,.0f} MB"
        )
    console.print(f"growth exponent of latency-chain-dp: {result['growth_exponent']:.2f}")
