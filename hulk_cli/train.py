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
    from agents.training.config import TrainSettings
    from agents.training.train import train

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
    """The main job's ending: one table of the trained policy against the run's baselines,
    one sentence on what happened, then where the report page is."""
    from agents.benchmarks.compare import POLICY_METHOD, evaluate_run

    rows, paths = evaluate_run(run_dir)
    print_whole(comparison_table(rows, title=f"trained policy vs baselines ({run_dir.name})"))
    console.print(outcome_sentence(rows, POLICY_METHOD), soft_wrap=True)
    console.print(f"results: {paths['csv']}", soft_wrap=True)
    report = write_run_report(run_dir)
    if report:
        console.print(report, soft_wrap=True)


def comparison_table(rows: list, title: str) -> Table:
    """One row per method, ranked as the leaderboard ranks them; with one instance its
    iteration time too. Method names fold rather than being cut (see :func:`print_whole`)."""
    from hulk_env.evaluation import leaderboard

    instances = list(dict.fromkeys(r.instance for r in rows))
    single = len(instances) == 1
    headers = ["#", "method", *(["iteration s"] if single else []), "speed-up", "gap to best", "solved", "cost evals", "wall s"]
    by_method = {r.method: r for r in rows}
    body = []
    for e in leaderboard(rows):
        solved = e["solved"] > 0
        cells = [str(e["rank"]), e["method"]]
        if single:
            r = by_method[e["method"]]
            cells.append(f"{r.iteration_time_s:.4f}" if r.feasible else "infeasible")
        cells += [
            f"x{e['geomean_speedup_vs_naive']:.3f}" if solved else "-",
            f"{100 * e['mean_gap_to_best']:.2f}%" if solved else "-",
            f"{e['solved']}/{e['instances']}",
            f"{e['mean_cost_evals']:,.0f}",
            f"{e['total_wall_s']:.2f}",
        ]
        body.append(cells)
    table = Table(title=title, caption="speed-up over naive (geometric mean); gap to the best (mean per instance)")
    for k, header in enumerate(headers):
        if header == "method":  # the one column that gives way: it folds, never cuts
            table.add_column(header, overflow="fold", min_width=6)
        else:  # figures keep their width
            width = max(len(header), *(len(cells[k]) for cells in body)) if body else len(header)
            table.add_column(header, justify="left" if k == 0 else "right", no_wrap=True, min_width=width)
    for cells in body:
        table.add_row(*cells)
    return table


def print_whole(table: Table) -> None:
    """Print ``table`` with no cell cut. In a terminal where the figures fit, at the terminal's
    width (a long method name folds onto more lines); elsewhere (a log file, CI) or where even
    the figures do not fit, as wide as the table needs (never narrower than 80)."""
    from rich.console import Console
    from rich.measure import Measurement

    if console.is_terminal:
        borders = 3 * len(table.columns) + 1
        figures = sum(c.min_width or 0 for c in table.columns if c.header != "method")
        if console.width - borders - figures >= 8:
            console.print(table)
            return
    wide = Console(file=console.file, width=10_000, color_system=None, highlight=False)
    need = Measurement.get(wide, wide.options, table).maximum
    Console(file=console.file, width=max(need, 80), color_system=None, highlight=False).print(table)


def outcome_sentence(rows: list, policy: str) -> str:
    """What happened, in one sentence computed from the figures: the trained policy (the greedy
    ``policy`` row) against the best baseline -- ahead, level, or behind and by how much -- and
    which baseline's iteration time it reached when it reached one exactly."""
    import math

    from hulk_env.evaluation import leaderboard

    entries = {e["method"]: e for e in leaderboard(rows)}
    if policy not in entries:
        return f"No '{policy}' row: the trained policy was not evaluated."
    mine = entries[policy]
    baselines = [e for name, e in entries.items() if not name.startswith(policy)]
    solved = [e for e in baselines if e["solved"] > 0]
    if mine["solved"] == 0:
        best = max(solved, key=lambda e: e["geomean_speedup_vs_naive"], default=None)
        tail = f"; the best baseline, {best['method']}, reached x{best['geomean_speedup_vs_naive']:.2f} over naive" if best else ""
        return f"The trained policy found no feasible placement on any of {mine['instances']} instance(s){tail}."
    if not solved:
        return f"The trained policy reached x{mine['geomean_speedup_vs_naive']:.2f} over naive; no baseline found a feasible placement."
    best = max(solved, key=lambda e: (e["solved"], e["geomean_speedup_vs_naive"]))
    ratio = mine["geomean_speedup_vs_naive"] / best["geomean_speedup_vs_naive"]
    tied = [e["method"] for e in solved if e["solved"] == best["solved"]
            and math.isclose(e["geomean_speedup_vs_naive"], best["geomean_speedup_vs_naive"], rel_tol=1e-9)]
    best_names = _names(tied)
    the_best = f"the best baseline, {best_names}" if len(tied) == 1 else f"the best baselines, {best_names}"
    same = _same_times(rows, policy)
    unsolved = f" (no feasible placement on {mine['instances'] - mine['solved']} of {mine['instances']} instances)" if mine["solved"] < mine["instances"] else ""
    figures = f"x{mine['geomean_speedup_vs_naive']:.2f} over naive{unsolved}"
    if abs(ratio - 1.0) <= 1e-9 or best["method"] in same:
        return f"The trained policy matched {the_best}: {figures}."
    if ratio > 1.0:
        return (f"The trained policy beat every baseline: {figures}, {100 * (1 - 1 / ratio):.1f}% less time per iteration "
                f"than {the_best} (x{best['geomean_speedup_vs_naive']:.2f}).")
    beaten = sum(1 for e in solved if e["geomean_speedup_vs_naive"] < mine["geomean_speedup_vs_naive"] * (1 - 1e-9))
    stayed = f"stayed at {same[0]}'s iteration time ({figures})" if same else f"reached {figures}"
    return (f"The trained policy {stayed}, {100 * (1 / ratio - 1):.1f}% more time per iteration than {the_best} "
            f"(x{best['geomean_speedup_vs_naive']:.2f}); it beat {beaten} of {len(baselines)} baselines.")


def _names(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``; past four, ``a, b, c and N others``."""
    if len(names) > 4:
        names = [*names[:3], f"{len(names) - 3} others"]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _same_times(rows: list, policy: str) -> list[str]:
    """The baselines whose iteration time equals the policy's on every instance (relative 1e-9)."""
    import math

    mine = {r.instance: r.iteration_time_s for r in rows if r.method == policy and r.feasible}
    if not mine:
        return []
    methods = dict.fromkeys(r.method for r in rows if not r.method.startswith(policy))
    same = []
    for m in methods:
        theirs = {r.instance: r.iteration_time_s for r in rows if r.method == m and r.feasible}
        if theirs.keys() == mine.keys() and all(math.isclose(theirs[i], t, rel_tol=1e-9) for i, t in mine.items()):
            same.append(m)
    return same


def write_run_report(run_dir: Path) -> str:
    """``report: PATH`` once the run's report page is written (``hulk report``, where this
    version has it), the reason in one line where it could not be, or nothing without it."""
    try:
        from hulk_cli.report import write_report
    except ImportError:  # a version without `hulk report`
        return ""
    try:
        return f"report: {write_report(run_dir)}"
    except (HulkInputError, OSError, ImportError) as exc:  # the run and its results are saved: say why, go on
        message = exc.one_line() if isinstance(exc, HulkInputError) else str(exc)
        return f"report: not written ({message})"


@clean_errors
def bench_train_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Timed rollout+update slices per model.")] = 4,
) -> None:
    """PPO steps per second with the GNN policy vs SB3's default MLP policy (same env, same run)."""
    require_agent("hulk bench train")
    from agents.training.config import TrainSettings
    from agents.training.train import bench_train

    settings = TrainSettings(config=config, overrides=tuple(set_ or ()))
    print_figures(bench_train(settings.resolve(), rounds=rounds), as_json)
