"""``hulk tune``: a hyper-parameter sweep of the agent on Ray Tune (:mod:`agents.training.tune`).

Needs the agent stack and Ray (``pip install 'hulk-env[agent,ray]'``); without either it says in
one line how to install it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hulk_cli.output import clean_errors, console, print_json, require_agent

RayOpt = Annotated[
    str,
    typer.Option("--ray", help="Where trials run: local (a Ray started here), auto (the cluster of `ray start` here) or a cluster address."),
]


@clean_errors
def tune_command(
    config: Annotated[str, typer.Option("--config", help="The base config: a YAML file or the name of one in agents/configs/.")],
    space: Annotated[Path, typer.Option("--space", help="The search space: dotted config keys -> distributions (YAML).")],
    trials: Annotated[int, typer.Option("--trials", min=1, help="Samples of the space.")] = 4,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a base config key: section.key=value (repeatable).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The sweep directory (one run directory per trial under trials/).")] = Path("runs/tune"),
    ray: RayOpt = "local",
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Trials at a time (default: one per CPU).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the sampling of the space.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON only.")] = False,
) -> None:
    """Sweep the agent's config with Ray Tune (ASHA on the validation speed-up); write the best config."""
    require_agent("hulk tune")
    from agents.training.tune import METRIC, TuneSettings, tune

    result = tune(TuneSettings(
        config=config, space=space, trials=trials, out=out, overrides=tuple(set_ or ()),
        ray=ray, workers=workers, seed=seed, verbose=0 if as_json else 1,
    ))  # fmt: skip
    if as_json:
        print_json({
            "sweep_dir": str(result.sweep_dir),
            "best_config": str(result.best_config) if result.best_config else None,
            "best": asdict(result.best) if result.best else None,
            "trials": [asdict(t) for t in result.trials],
        })  # fmt: skip
        return
    keys = list(result.trials[0].params) if result.trials else []
    table = Table("trial", *keys, "val speed-up", "steps", "status", title=f"{len(result.trials)} trials")
    for t in result.trials:
        speedup = f"x{t.val_speedup:.3f}" if math.isfinite(t.val_speedup) else "-"
        table.add_row(t.trial, *(_short(t.params[k]) for k in keys), speedup, f"{t.timesteps:,}", t.status)
    console.print(table)
    if result.best is None:
        console.print(f"no trial reported a validation speed-up; see {result.sweep_dir / 'trials.csv'}")
        raise typer.Exit(1)
    console.print(
        f"best: {result.best.trial} ({METRIC} x{result.best.val_speedup:.3f}); "
        f"config: {result.best_config} (hulk train --config {result.best_config})"
    )


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
