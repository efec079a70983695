"""``hulk train`` and ``hulk bench train``: the agent's commands (they need the agent stack,
imported only here, inside the commands; without it they say in one line how to install it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hulk_cli.output import (
    clean_errors,
    console,
    err_console,
    leaderboard_table,
    print_figures,
    require_agent,
)
from hulk_env.errors import HulkInputError
from hulk_env.validation import limits

ConfigOpt = Annotated[str | None, typer.Option("--config", help="A YAML config file or the name of one shipped in agents/configs/ (default: default).")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a config key: section.key=value (repeatable).")]


@clean_errors
def train_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    timesteps: Annotated[int | None, typer.Option("--timesteps", min=1, max=limits.MAX_TIMESTEPS, help="train.total_timesteps.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Directory under which the run directory is created (train.out).")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue an interrupted run from its checkpoint.")] = None,
    compare: Annotated[bool, typer.Option("--compare/--no-compare", help="Afterwards, run the policy against the baselines.")] = True,
) -> None:
    """Train the GNN policy with masked PPO; then compare it with the baselines.

    With no options this is the main job: the built-in default instance (the paper's 47
    machines x GPT-3 1.3B) for a few minutes on 2 CPU cores.
    """
    if resume is not None and (config or set_ or timesteps or out):
        raise HulkInputError("--resume continues a run with its own config.yaml: drop --config, --set, --timesteps and --out")
    require_agent("hulk train")
    from agents.config import TrainSettings
    from agents.train import train

    if resume is not None:
        run_dir = train(resume=resume)
    else:
        settings = TrainSettings(config=config, overrides=tuple(set_ or ()), total_timesteps=timesteps, out=out)
        cfg = settings.resolve()
        source = {
            "fixed": f"cluster {cfg.env.cluster} x model {cfg.env.model}",
            "suite": f"suite {cfg.env.suite}",
        }.get(cfg.env.generator, f"fresh {cfg.env.generator} instances")
        err_console.print(f"training the {cfg.policy.extractor} policy for {cfg.train.total_timesteps:,} steps on {source}")
        run_dir = train(settings)  # resolved again there: errors keep naming --set
    console.print(f"run directory: {run_dir}")
    if compare:
        print_comparison(run_dir)


def print_comparison(run_dir: Path) -> None:
    """The trained policy against the run's baselines: per instance (few) and the leaderboard."""
    from agents.compare import evaluate_run
    from hulk_env.evaluation import leaderboard

    rows, paths = evaluate_run(run_dir)
    instances = list(dict.fromkeys(r.instance for r in rows))
    for instance in instances if len(instances) <= 3 else ():
        table = Table("method", "iteration s", "speed-up", "gap to best", "cost evals", "wall s",
                      title=f"trained policy vs baselines on {instance}")
        for r in (r for r in rows if r.instance == instance):
            feasible = r.feasible
            table.add_row(
                r.method,
                f"{r.iteration_time_s:.4f}" if feasible else "infeasible",
                f"x{r.speedup_vs_naive:.3f}" if feasible else "-",
                f"{100 * r.gap_to_best:.2f}%" if feasible else "-",
                str(r.cost_evals), f"{r.wall_s:.2f}",
            )
        console.print(table)
    console.print(leaderboard_table(leaderboard(rows), f"leaderboard over {len(instances)} instance(s)"))
    console.print(f"wrote {paths['csv']} and {paths['summary']}")


@clean_errors
def bench_train_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Timed rollout+update slices per model.")] = 4,
) -> None:
    """PPO steps per second with the GNN policy vs SB3's default MLP policy (same env, same run)."""
    require_agent("hulk bench train")
    from agents.config import TrainSettings
    from agents.train import bench_train

    settings = TrainSettings(config=config, overrides=tuple(set_ or ()))
    print_figures(bench_train(settings.resolve(), rounds=rounds), as_json)
