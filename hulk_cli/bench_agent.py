"""``hulk bench agent``: the shipped policy against the searches on clusters it never saw."""

from __future__ import annotations

from typing import Annotated

import typer

from hulk_cli.output import clean_errors, console, print_figures, require_agent


@clean_errors
def bench_agent_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    quick: Annotated[bool, typer.Option("--quick", help="Only the instances of at most 64 machines (minutes).")] = False,
    suite: Annotated[str, typer.Option("--suite", help="A suite with a shipped search reference: unseen-v0 or unseen-v1.")] = "unseen-v0",
) -> None:
    """Gaps of the shipped policy (greedy), its search polish and latency-chain-dp to the best of
    genetic and anneal at 50,000 evaluations each (cached), dead ends and decision times."""
    require_agent("hulk bench agent")
    from agents.benchmarks.bench_agent import bench_agent

    log = None if as_json else (lambda line: console.print(line, highlight=False))
    print_figures(bench_agent(suite=suite, quick=quick, log=log), as_json)
