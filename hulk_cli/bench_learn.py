"""``hulk bench learn``: PPO from scratch on fixed instances -- when does the network's own
greedy rollout reach ``latency-chain-dp``'s speed-up?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hulk_cli.output import clean_errors, console, print_json, require_agent
from hulk_env.errors import HulkInputError
from hulk_env.validation import limits


@clean_errors
def bench_learn_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    timesteps: Annotated[int, typer.Option("--timesteps", min=1, max=limits.MAX_TIMESTEPS, help="PPO steps per run.")] = 100_000,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds per instance: a count N (seeds 0 .. N-1) or a comma-separated list.")] = "3",
    instances: Annotated[str, typer.Option("--instances", help="Comma-separated: default, multi-replica, 128-machines, memory-tight (default: all).")] = "",
    eval_every: Annotated[int, typer.Option("--eval-every", min=1, help="Steps between greedy evaluations.")] = 2_048,
    config: Annotated[str | None, typer.Option("--config", help="Training config (default: the main job's).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config key: section.key=value (repeatable).")] = None,
    stop: Annotated[bool, typer.Option("--stop-at-chain-dp", help="End a run at its first evaluation that reaches chain-dp (its final gap is then that one's).")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write each finished run with its curve (JSON lines) and the summary here.")] = None,
    from_runs: Annotated[list[Path] | None, typer.Option("--from-runs", help="Train nothing: summarise runs saved by --out (a folder or its runs.jsonl; repeatable, e.g. seeds run in parallel).")] = None,
) -> None:
    """Train the main job's config from scratch on each instance and seed; per run, the steps
    at which the greedy policy first reaches latency-chain-dp's speed-up (null if never) and
    its final gap; the fraction of runs that reached it and the median steps."""
    require_agent("hulk bench learn")
    import json
    import sys

    from agents.benchmarks.bench_learn import BENCH_INSTANCES, bench_learn
    from hulk_env.files import atomic_write_text

    names = tuple(n.strip() for n in instances.split(",") if n.strip()) or BENCH_INSTANCES
    unknown = [n for n in names if n not in BENCH_INSTANCES]
    if unknown:
        raise HulkInputError(f"unknown instance '{unknown[0]}'; choose from {', '.join(BENCH_INSTANCES)}", field="--instances")
    if from_runs:
        result = summarise_saved(from_runs)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / "summary.json", json.dumps(result, indent=2) + "\n")
        print_json(result) if as_json else console.print_json(data=result)
        return
    seed_arg = parse_seeds(seeds)
    rows: list[str] = []

    def on_run(run) -> None:
        if out is not None:  # the row and its learning curve: [steps, gap] at every evaluation
            rows.append(json.dumps(run.saved_row()))
            atomic_write_text(out / "runs.jsonl", "\n".join(rows) + "\n")

    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    # With --json, stdout is the JSON alone: the progress lines go to stderr.
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if as_json else (lambda line: console.print(line, highlight=False))
    result = bench_learn(timesteps=timesteps, seeds=seed_arg, instances=names, config=config,
                         overrides=tuple(set_ or ()), eval_every=eval_every, log=log, on_run=on_run, stop_at_chain_dp=stop)  # fmt: skip
    if out is not None:
        atomic_write_text(out / "summary.json", json.dumps(result, indent=2) + "\n")
    print_json(result) if as_json else console.print_json(data=result)


def parse_seeds(text: str) -> int | list[int]:
    """``--seeds``: ``"3"`` (seeds 0, 1, 2) or ``"4,7"`` (those seeds)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise HulkInputError(f"--seeds must be a count or a comma-separated list of integers, got '{text}'", field="--seeds") from None
    if not values or min(values) < 0 or ("," not in text and not 1 <= values[0] <= 100):
        raise HulkInputError(f"--seeds must be a count 1-100 or non-negative seeds, got '{text}'", field="--seeds")
    return values if "," in text else values[0]


def summarise_saved(paths: list[Path]) -> dict:
    """``--from-runs``: the summary of the runs saved in ``paths`` (folders written by ``--out``
    or their ``runs.jsonl``), in the order given; a run saved twice is an error."""
    from agents.benchmarks.bench_learn import run_from_row, summary
    from hulk_env.validation.reading import load_json, read_text

    runs = []
    for path in paths:
        file = path / "runs.jsonl" if path.is_dir() else path
        if not file.is_file():
            raise HulkInputError(f"no saved runs at '{file}': give a folder written by --out or its runs.jsonl", field="--from-runs")
        for number, line in enumerate(read_text(file, what="saved runs").splitlines(), 1):
            if line.strip():
                row = load_json(line, f"{file}, line {number}")
                if not isinstance(row, dict):
                    raise HulkInputError("a saved run is a JSON object", source=f"{file}, line {number}")
                runs.append(run_from_row(row))
    if not runs:
        raise HulkInputError("the saved runs are empty", field="--from-runs")
    return summary(runs)
