"""The ``hulk`` command: show instances, place, evaluate, benchmark and train.

Every command turns bad input (:class:`hulk_env.errors.HulkInputError`, a malformed placement)
into one line on stderr and exit status 2, never a traceback. Heavy imports (torch, SB3) happen
inside the commands that need them, so ``hulk show`` stays fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from hulk_env.errors import HulkInputError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0])
show_app = typer.Typer(no_args_is_help=True, help="Describe a cluster or a model.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures and ratios, as JSON).")
app.add_typer(show_app, name="show")
app.add_typer(bench_app, name="bench")

console = Console()
err_console = Console(stderr=True)

EXIT_BAD_INPUT = 2


def clean_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Report bad input as one line and exit 2 (typer keeps the signature via ``wraps``)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (HulkInputError, OSError) as exc:
            message = exc.one_line() if isinstance(exc, HulkInputError) else str(exc)
            err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper


def print_json(obj: Any) -> None:
    """JSON on stdout, nothing else (scripts parse it)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# ------------------------------------------------------------------------------------ show
@show_app.command("cluster")
@clean_errors
def show_cluster(
    source: Annotated[str, typer.Argument(help="A built-in name, a paper data directory, or a YAML/JSON file.")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    min_rtt_fraction: Annotated[float, typer.Option(
        "--min-rtt-fraction", min=0.0, max=1.0,
        help="Paper data: drop a measured RTT below this fraction of the light-in-fibre round trip "
        "(1.0 = strict physics; 0.1 keeps all but the grossly impossible Tokyo-Berlin 4 ms).",
    )] = 1.0,
) -> None:
    """Summarise a cluster: machines per region, GPUs, memory, links, and cleaning fixes."""
    from hulk_env.cluster import load_cluster

    cluster, report = load_cluster(source, min_rtt_fraction=min_rtt_fraction)
    summary = cluster.summary()
    if report is not None:
        summary["cleaning"] = report.to_dict()
    if as_json:
        print_json(summary)
        return
    render_cluster_summary(summary)


def render_cluster_summary(summary: dict) -> None:
    """Rich tables for a cluster summary."""
    console.print(
        f"[bold]{summary['name']}[/]: {summary['machines']} machines, {summary['gpus']} GPUs in "
        f"{summary['regions']} regions, {summary['total_memory_bytes'] / 1e9:,.0f} GB, "
        f"{summary['total_flops'] / 1e15:,.2f} PFLOP/s effective; "
        f"{summary['imputed_pairs']} link pairs imputed"
    )
    table = Table("region", "machines", "GPUs", "TFLOP/s", "memory GB")
    for row in summary["by_region"]:
        table.add_row(
            row["region"], str(row["machines"]), str(row["gpus"]),
            f"{row['tflops']:,.0f}", f"{row['memory_gb']:,.0f}",
        )
    console.print(table)
    lat, bw = summary["latency_ms"], summary["bandwidth_gbps"]
    console.print(
        f"one-way latency ms: min {lat['min']:.2f} / median {lat['median']:.2f} / max {lat['max']:.2f}; "
        f"bandwidth Gbps: min {bw['min']:.3g} / median {bw['median']:.3g} / max {bw['max']:.3g}"
    )
    if "cleaning" in summary:
        fixes = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in summary["cleaning"].items())
        console.print(f"cleaning report: {fixes}")


@show_app.command("model")
@clean_errors
def show_model(
    source: Annotated[str, typer.Argument(help="A built-in model name or a YAML/JSON file.")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    layers: Annotated[bool, typer.Option("--layers", help="List every layer.")] = False,
) -> None:
    """Summarise a model's layer graph and training settings."""
    from hulk_env.workload import load_workload

    workload = load_workload(source)
    summary = workload.summary()
    if as_json:
        if layers:
            summary["layer_list"] = layer_rows(workload)
        print_json(summary)
        return
    console.print(
        f"[bold]{summary['name']}[/]: {summary['layers']} layers ({'chain' if summary['is_chain'] else 'DAG'}, "
        f"{summary['edges']} edges), {summary['params'] / 1e9:,.3f} B params, "
        f"{summary['forward_flops_per_micro_batch'] / 1e12:,.1f} TFLOP forward per micro-batch, "
        f"model state {summary['model_state_bytes'] / 1e9:,.1f} GB"
    )
    console.print(
        f"training: micro-batch size {summary['micro_batch_size']}, {summary['num_micro_batches']} "
        f"micro-batches, data-parallel {summary['data_parallel']}, schedule {summary['schedule']}"
    )
    if layers:
        table = Table("#", "layer", "GFLOP", "M params", "act MB", "stash MB")
        for i, row in enumerate(layer_rows(workload)):
            table.add_row(
                str(i), row["name"], f"{row['flops'] / 1e9:,.1f}", f"{row['params'] / 1e6:,.1f}",
                f"{row['activation_bytes'] / 1e6:,.1f}", f"{row['stash_bytes'] / 1e6:,.1f}",
            )
        console.print(table)


def layer_rows(workload) -> list[dict]:
    """One dict per layer, for tables and JSON."""
    return [
        {
            "name": name,
            "flops": float(workload.flops[i]),
            "params": float(workload.params[i]),
            "activation_bytes": float(workload.activation_bytes[i]),
            "stash_bytes": float(workload.stash_bytes[i]),
        }
        for i, name in enumerate(workload.layer_names)
    ]


# ------------------------------------------------------------------------------------ place
@app.command("place")
@clean_errors
def place(
    cluster: Annotated[str, typer.Option("--cluster", "-c", help="Built-in name, paper data directory or YAML/JSON file.")] = "default",
    model: Annotated[str, typer.Option("--model", "-m", help="Built-in model name or YAML/JSON file.")] = "default",
    method: Annotated[str, typer.Option("--method", help="A placement method (see `hulk evaluate --help`).")] = "latency-chain-dp",
    policy: Annotated[Path | None, typer.Option("--policy", help="A trained policy's run directory (replaces --method).")] = None,
    data_parallel: Annotated[int | None, typer.Option("--data-parallel", "-d", min=1, help="Data-parallel replicas D.")] = None,
    micro_batches: Annotated[int | None, typer.Option("--micro-batches", min=1, help="Micro-batches per iteration.")] = None,
    schedule: Annotated[str | None, typer.Option("--schedule", help="gpipe or 1f1b.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of randomised methods.")] = 0,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Cost-model evaluations for search methods.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of the placement here.")] = None,
) -> None:
    """Place a model on a cluster and show the placement with its cost breakdown."""
    import time

    from hulk_env import cost
    from hulk_env.baselines.naive import naive
    from hulk_env.generators import fixed_instance
    from hulk_env.render import placement_figure, placement_rows, save_figure

    instance = fixed_instance(
        cluster, model, data_parallel=data_parallel, num_micro_batches=micro_batches, schedule=schedule
    )
    name, fn = (f"policy:{policy}", _policy_method(policy)) if policy else (method, resolve_method(method))
    start = time.perf_counter()
    result = fn(instance, seed, budget)
    wall_s = time.perf_counter() - start
    if not result.feasible:
        raise HulkInputError(f"{name} found no feasible placement: {result.reason}")
    breakdown = cost.evaluate(instance.cluster, instance.workload, result.placement)
    reference = naive(instance)
    naive_s = (
        cost.evaluate(instance.cluster, instance.workload, reference.placement).iteration_time_s
        if reference.feasible else float("nan")
    )
    rows = placement_rows(instance, result.placement)
    if plot is not None:
        save_figure(placement_figure(instance, result.placement), plot)
    if as_json:
        print_json({
            "instance": instance.instance_id,
            "method": name,
            "placement": result.placement,
            "machines": [row["machine"] for row in rows],
            "rows": rows,
            "cost": breakdown.to_dict(),
            "naive_iteration_time_s": naive_s,
            "speedup_vs_naive": naive_s / breakdown.iteration_time_s,
            "cost_evals": result.cost_evals,
            "wall_s": wall_s,
            "plot": plot,
        })
        return
    table = Table("region", "machine", "GPUs", "layers (replica:range)", "memory GB", "compute s/mb",
                  title=f"{name} on {instance.instance_id}")
    for row in rows:
        table.add_row(row["region"], row["machine"], row["gpu"], row["layers"],
                      f"{row['memory_gb']:,.1f} / {row['memory_limit_gb']:,.0f}", f"{row['compute_s_per_mb']:.3f}")
    console.print(table)
    b = breakdown.to_dict()
    console.print(
        f"iteration [bold]{b['iteration_time_s']:.3f} s[/] = compute {b['compute_s']:.3f} + pipeline comm "
        f"{b['pipeline_comm_s']:.3f} + bubble {b['bubble_s']:.3f} + data-parallel sync {b['dp_sync_s']:.3f}; "
        f"bottleneck: {b['bottleneck_kind']} {b['bottleneck']}; naive {naive_s:.3f} s -> "
        f"speed-up x{naive_s / b['iteration_time_s']:.2f}; {result.cost_evals} cost evaluations in {wall_s:.2f} s"
    )
    if plot is not None:
        console.print(f"plot written to {plot}")


def resolve_method(name: str):
    """A method by name: the env library's baselines, or those that live with the agent (torch)."""
    from hulk_env.baselines import METHODS, get_method

    if name in METHODS:
        return METHODS[name]
    from agents.evaluate import agent_methods

    agent = agent_methods()
    if name in agent:
        return agent[name]
    try:
        return get_method(name)
    except HulkInputError:
        known = ", ".join([*METHODS, *agent])
        raise HulkInputError(f"unknown method '{name}'; choose from {known}", field="method") from None


def _policy_method(run_dir: Path):
    """A trained policy as a placement method (loads weights only, never pickled code)."""
    from agents.evaluate import load_policy_method

    return load_policy_method(run_dir)


# --------------------------------------------------------------------------------- evaluate
@app.command("evaluate")
@clean_errors
def evaluate(
    suite: Annotated[str, typer.Option("--suite", "-s", help="tiny-v0, geo-v0, hard-v0 or paper-v0.")] = "tiny-v0",
    methods: Annotated[str, typer.Option("--methods", help="Comma-separated method names.")] = "naive,random,compute-greedy,latency-chain-dp,partition,genetic,anneal",
    policy: Annotated[list[Path] | None, typer.Option("--policy", help="A trained policy's run directory (repeatable).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for results.csv, results.json, summary.md.")] = Path("runs/evaluate"),
    hulk_data: Annotated[Path | None, typer.Option("--hulk-data", help="The paper's data directory (paper-v0).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Evaluation budget of every search method.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N instances.")] = None,
) -> None:
    """Run methods on a benchmark suite; print the leaderboard and write CSV/JSON/Markdown."""
    from hulk_env.evaluation import leaderboard, load_suite, run_methods, write_results

    instances = load_suite(suite, hulk_data=hulk_data)[:limit]
    names = [m.strip() for m in methods.split(",") if m.strip()]
    from hulk_env.baselines import METHODS

    extra = {n: resolve_method(n) for n in names if n not in METHODS}
    extra.update({f"policy:{Path(p).name}": _policy_method(p) for p in policy or []})
    budgets = {n: budget for n in names} if budget else None
    rows = run_methods(instances, names, seed=seed, budgets=budgets, progress=True, extra_methods=extra)
    paths = write_results(rows, out, title=f"{suite} leaderboard")
    console.print(leaderboard_table(leaderboard(rows), f"{suite}: {len(instances)} instances"))
    console.print(f"wrote {paths['csv']}, {paths['json']} and {paths['summary']}")


def leaderboard_table(entries: list[dict], title: str) -> Table:
    """The leaderboard with short headers, so it stays readable in an 80-column terminal."""
    table = Table("#", "method", "speed-up", "gap", "best", "solved", "evals", "wall s", title=title)
    for e in entries:
        table.add_row(
            str(e["rank"]), e["method"], f"x{e['geomean_speedup_vs_naive']:.2f}",
            f"{100 * e['mean_gap_to_best']:.1f}%", str(e["best_on"]), f"{e['solved']}/{e['instances']}",
            f"{e['mean_cost_evals']:,.0f}", f"{e['total_wall_s']:.2f}",
        )
    table.caption = "speed-up: geometric mean over naive; gap: mean gap to the best method per instance"
    return table


# ------------------------------------------------------------------------------------ bench
@bench_app.command("cost")
@clean_errors
def bench_cost_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    placements: Annotated[int, typer.Option("--placements", min=100)] = 20_000,
    sim_cases: Annotated[int, typer.Option("--sim-cases", min=10)] = 500,
) -> None:
    """Cost-model throughput (batch vs one call at a time) and error against the simulator."""
    from hulk_env.bench import bench_cost

    _print_bench(bench_cost(num_placements=placements, sim_cases=sim_cases), as_json)


@bench_app.command("env")
@clean_errors
def bench_env_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    seconds: Annotated[float, typer.Option("--seconds", min=0.5)] = 3.0,
) -> None:
    """Env steps per second (random masked actions) against CartPole-v1 in the same run."""
    from hulk_env.bench import bench_env

    _print_bench(bench_env(seconds=seconds), as_json)


def _print_bench(result: dict, as_json: bool) -> None:
    if as_json:
        print_json(result)
        return
    table = Table("figure", "value")
    for key, value in result.items():
        table.add_row(key, f"{value:,.4g}" if isinstance(value, float) else str(value))
    console.print(table)


# ---- plot commands ----
plot_app = typer.Typer(no_args_is_help=True, help="Pictures as PNG: placement map, schedule, leaderboard, curves.")
app.add_typer(plot_app, name="plot")


def _placed(
    cluster: str, model: str, method: str, policy: Path | None, data_parallel: int | None,
    micro_batches: int | None, schedule: str | None, seed: int, budget: int | None,
):
    """``(instance, placement, method name)`` for the plot commands (same options as ``place``)."""
    from hulk_env.generators import fixed_instance

    instance = fixed_instance(
        cluster, model, data_parallel=data_parallel, num_micro_batches=micro_batches, schedule=schedule
    )
    name, fn = (f"policy:{policy}", _policy_method(policy)) if policy else (method, resolve_method(method))
    result = fn(instance, seed, budget)
    if not result.feasible:
        raise HulkInputError(f"{name} found no feasible placement: {result.reason}")
    return instance, result.placement, name


ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Built-in name, paper data directory or YAML/JSON file.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Built-in model name or YAML/JSON file.")]
MethodOpt = Annotated[str, typer.Option("--method", help="A placement method (see `hulk evaluate --help`).")]
PolicyOpt = Annotated[Path | None, typer.Option("--policy", help="A trained policy's run directory (replaces --method).")]
DataParallelOpt = Annotated[int | None, typer.Option("--data-parallel", "-d", min=1, help="Data-parallel replicas D.")]
MicroBatchesOpt = Annotated[int | None, typer.Option("--micro-batches", min=1, help="Micro-batches per iteration.")]
ScheduleOpt = Annotated[str | None, typer.Option("--schedule", help="gpipe or 1f1b.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of randomised methods.")]
BudgetOpt = Annotated[int | None, typer.Option("--budget", min=1, help="Cost-model evaluations for search methods.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The PNG file to write.")]


@plot_app.command("placement")
@clean_errors
def plot_placement(
    out: OutOpt,
    cluster: ClusterOpt = "default",
    model: ModelOpt = "default",
    method: MethodOpt = "latency-chain-dp",
    policy: PolicyOpt = None,
    data_parallel: DataParallelOpt = None,
    micro_batches: MicroBatchesOpt = None,
    schedule: ScheduleOpt = None,
    seed: SeedOpt = 0,
    budget: BudgetOpt = None,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
) -> None:
    """Placement on a world map: machines at their cities coloured by pipeline stage, links by traffic."""
    from hulk_env.render import placement_figure, save_figure

    instance, placement, _ = _placed(cluster, model, method, policy, data_parallel, micro_batches, schedule, seed, budget)
    console.print(f"wrote {save_figure(placement_figure(instance, placement, title=title), out)}")


@plot_app.command("gantt")
@clean_errors
def plot_gantt(
    out: OutOpt,
    cluster: ClusterOpt = "default",
    model: ModelOpt = "default",
    method: MethodOpt = "latency-chain-dp",
    policy: PolicyOpt = None,
    data_parallel: DataParallelOpt = None,
    micro_batches: MicroBatchesOpt = None,
    schedule: ScheduleOpt = None,
    seed: SeedOpt = 0,
    budget: BudgetOpt = None,
    max_rows: Annotated[int, typer.Option("--max-rows", min=1, help="Rows shown (machines first, then the busiest links).")] = 40,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
) -> None:
    """The simulated schedule of one iteration as a Gantt chart (machines and links as rows)."""
    from hulk_env.render import gantt_figure, save_figure
    from hulk_env.simulate import simulate

    instance, placement, _ = _placed(cluster, model, method, policy, data_parallel, micro_batches, schedule, seed, budget)
    result = simulate(instance.cluster, instance.workload, placement)
    fig = gantt_figure(result, instance, max_rows=max_rows, title=title)
    console.print(f"wrote {save_figure(fig, out)} (simulated iteration {result.iteration_time_s:.3f} s)")


@plot_app.command("leaderboard")
@clean_errors
def plot_leaderboard(
    results_csv: Annotated[Path, typer.Argument(help="A results.csv from `hulk evaluate` or an experiment.")],
    out: OutOpt,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
    reference: Annotated[float | None, typer.Option("--reference", help="Also draw a line at this speed-up.")] = None,
) -> None:
    """Geometric-mean speed-up over naive per method, with one dot per instance."""
    from hulk_env.render import leaderboard_figure, read_results_csv, save_figure

    fig = leaderboard_figure(read_results_csv(results_csv), title=title, reference=reference)
    console.print(f"wrote {save_figure(fig, out)}")


@plot_app.command("curves")
@clean_errors
def plot_curves(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (TensorBoard tb/, eval/evaluations.csv) or CSV files.")],
    out: OutOpt,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="Scalar tag to plot (repeatable; default: speed-ups and return).")] = None,
    smoothing: Annotated[float, typer.Option("--smooth", min=0.0, max=0.99, help="EMA weight, as in TensorBoard.")] = 0.6,
    title: Annotated[str | None, typer.Option("--title", help="Figure title.")] = None,
) -> None:
    """Learning curves of one or more training runs, one panel per tag."""
    from hulk_env.render import curves_figure, read_curves, save_figure

    curves = {_run_label(p, runs): read_curves(p) for p in runs}
    fig = curves_figure(curves, tags=tag or None, smoothing=smoothing, title=title)
    console.print(f"wrote {save_figure(fig, out)}")


def _run_label(path: Path, everything: list[Path]) -> str:
    """A short, unique legend label for a run path."""
    label = path.stem if path.is_file() else path.name
    clash = sum(1 for p in everything if (p.stem if p.is_file() else p.name) == label) > 1
    return str(path) if clash else label


# ---- agent commands ----
@app.command("train")
@clean_errors
def train_command(
    config: Annotated[str | None, typer.Option("--config", help="A YAML config file or a name under experiments/configs/ (default: default).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config key: section.key=value (repeatable).")] = None,
    timesteps: Annotated[int | None, typer.Option("--timesteps", min=1, help="train.total_timesteps.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Directory under which the run directory is created (train.out).")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue an interrupted run from its checkpoint.")] = None,
    compare: Annotated[bool, typer.Option("--compare/--no-compare", help="Afterwards, run the policy against the baselines.")] = True,
) -> None:
    """Train the GNN policy with masked PPO; then compare it with the baselines.

    With no options this is the main job: the built-in default instance (the paper's 47
    machines x GPT-3 1.3B) for a few minutes on 2 CPU cores.
    """
    from agents.config import load_config
    from agents.train import train

    if resume is not None:
        if config or set_ or timesteps or out:
            raise HulkInputError("--resume continues a run with its own config.yaml: drop --config, --set, --timesteps and --out")
        run_dir = train(resume=resume)
    else:
        cfg = load_config(config, set_ or [])
        if timesteps is not None:
            cfg.train.total_timesteps = timesteps
        if out is not None:
            cfg.train.out = str(out)
        label = Path(config).stem if config else "default"
        source = {
            "fixed": f"cluster {cfg.env.cluster} x model {cfg.env.model}",
            "suite": f"suite {cfg.env.suite}",
        }.get(cfg.env.generator, f"fresh {cfg.env.generator} instances")
        err_console.print(f"training the {cfg.policy.extractor} policy for {cfg.train.total_timesteps:,} steps on {source}")
        run_dir = train(cfg, label=label)
    console.print(f"run directory: {run_dir}")
    if compare:
        _print_comparison(run_dir)


def _print_comparison(run_dir: Path) -> None:
    """The trained policy against the run's baselines: per instance (few) and the leaderboard."""
    from agents.evaluate import evaluate_run
    from hulk_env.evaluation import leaderboard

    rows, paths = evaluate_run(run_dir)
    for instance in dict.fromkeys(r.instance for r in rows) if len({r.instance for r in rows}) <= 3 else ():
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
    console.print(leaderboard_table(leaderboard(rows), f"leaderboard over {len({r.instance for r in rows})} instance(s)"))
    console.print(f"wrote {paths['csv']} and {paths['summary']}")


@bench_app.command("train")
@clean_errors
def bench_train_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    config: Annotated[str | None, typer.Option("--config", help="Config whose env and PPO settings to use (default: default).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config key: section.key=value (repeatable).")] = None,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Timed rollout+update slices per model.")] = 4,
) -> None:
    """PPO steps per second with the GNN policy vs SB3's default MLP policy (same env, same run)."""
    from agents.config import load_config
    from agents.train import bench_train

    _print_bench(bench_train(load_config(config, set_ or []), rounds=rounds), as_json)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
