"""``hulk plot placement|gantt|leaderboard|curves``: pictures as PNG files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hulk_cli.methods import PlacementRequest, with_placement_options
from hulk_cli.output import AGENT_MODULES, clean_errors, console, require_agent

app = typer.Typer(no_args_is_help=True, help="Pictures as PNG: placement map, schedule, leaderboard, curves.")

OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The PNG file to write.")]


@app.command("placement")
@clean_errors
@with_placement_options
def plot_placement(
    request: PlacementRequest,
    out: OutOpt,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
) -> None:
    """Placement on a world map: machines at their cities coloured by pipeline stage, links by traffic."""
    from hulk_env.render import placement_figure, save_figure

    instance, _, placed, _ = request.place()
    console.print(f"wrote {save_figure(placement_figure(instance, placed.placement, title=title), out)}")


@app.command("gantt")
@clean_errors
@with_placement_options
def plot_gantt(
    request: PlacementRequest,
    out: OutOpt,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="Rows shown (machines first, then the busiest links).")] = 40,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
) -> None:
    """The simulated schedule of one iteration as a Gantt chart (machines and links as rows)."""
    from hulk_env.render import gantt_figure, save_figure
    from hulk_env.simulate import simulate

    instance, _, placed, _ = request.place()
    simulated = simulate(instance.cluster, instance.workload, placed.placement)
    fig = gantt_figure(simulated, instance, max_rows=max_rows, title=title)
    console.print(f"wrote {save_figure(fig, out)} (simulated iteration {simulated.iteration_time_s:.3f} s)")


@app.command("leaderboard")
@clean_errors
def plot_leaderboard(
    results_csv: Annotated[Path, typer.Argument(help="A results.csv from `hulk evaluate` or an experiment.")],
    out: OutOpt,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
    reference: Annotated[float | None, typer.Option("--reference", help="Also draw a line at this speed-up.")] = None,
) -> None:
    """Geometric-mean speed-up over naive per method, with one dot per instance."""
    from hulk_env.evaluation import read_results_csv
    from hulk_env.render import leaderboard_figure, save_figure

    fig = leaderboard_figure(read_results_csv(results_csv), title=title, reference=reference)
    console.print(f"wrote {save_figure(fig, out)}")


@app.command("curves")
@clean_errors
def plot_curves(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (TensorBoard tb/, eval/evaluations.csv) or CSV files.")],
    out: OutOpt,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="Scalar tag to plot (repeatable; default: speed-ups and return).")] = None,
    smoothing: Annotated[float, typer.Option("--smooth", min=0.0, max=0.99, help="EMA weight, as in TensorBoard.")] = 0.6,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
) -> None:
    """Learning curves of one or more training runs, one panel per tag."""
    from hulk_env.render import curves_figure, save_figure

    curves = {_run_label(p, runs): _read_curves(p) for p in runs}
    fig = curves_figure(curves, tags=tag or None, smoothing=smoothing, title=title)
    console.print(f"wrote {save_figure(fig, out)}")


def _read_curves(path: Path) -> list:
    """A run's curves (:mod:`agents.training.tb_curves`); TensorBoard event files need the agent stack."""
    from agents.training.tb_curves import read_curves

    try:
        return read_curves(path)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in AGENT_MODULES:
            raise
        require_agent("reading TensorBoard event files")
        raise


def _run_label(path: Path, everything: list[Path]) -> str:
    """A short, unique legend label for a run path."""
    label = path.stem if path.is_file() else path.name
    clash = sum(1 for p in everything if (p.stem if p.is_file() else p.name) == label) > 1
    return str(path) if clash else label
