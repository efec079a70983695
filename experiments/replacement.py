"""Re-placement after failures: a region outage end to end, then a failure trace over a run.

1. Place the model with ``latency-chain-dp`` (what ``hulk place`` does), take the region
   holding most of it down, and answer with every re-placement method (``scratch``,
   ``repair``, ``search``, ``agent``): iteration time, moved bytes, migration seconds, total over
   the horizon, decision time; before/after maps of the agent's answer.
2. Replay a seeded random trace of machine failures and region outages over a training run
   with each method: wall time, time lost (migrating, redoing iterations after a checkpoint
   restore, running slower), and the timeline plot.

Writes ``outage.md``, ``outage.json``, ``outage-before.png``, ``outage-after.png``,
``trace.md``, ``trace.json``, ``timeline.png`` and ``run.json`` into the output directory.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.common import load_config, markdown_table, prepare_out_dir, run_cli, write_run_info

NAME = "replacement"
DEFAULTS = {
    "cluster": "hulk-paper", "model": "gpt3-13b", "data_parallel": 1, "horizon": 1000, "search_budget": 20_000,
    "trace_iterations": 10_000, "trace_rate": 0.5, "trace_region_rate": 0.1, "trace_repair_h": 1.0,
    "trace_outage_h": 1.0, "trace_checkpoint_every": 500, "trace_search_budget": 5000, "seed": 0,
}  # fmt: skip
METHODS = ("scratch", "repair", "search", "agent")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"Output directory (default runs/experiments/{NAME}).")
    parser.add_argument("--config", type=Path, default=None, help="Another YAML config.")
    parser.add_argument("--quick", action="store_true", help="A small cloud cluster and model (seconds).")
    return parser.parse_args(argv)


def outage(config: dict, out: Path) -> dict:
    """Part 1: the region holding most of the placement fails; every method answers."""
    from hulk_env import cost
    from hulk_env.baselines import get_method
    from hulk_env.generators import fixed_instance
    from hulk_env.render import save_figure
    from hulk_env.replacement import ReplacementProblem, standard_scenarios
    from hulk_env.replacement.methods import run_method
    from hulk_env.replacement.plots import before_after_figures

    inst = fixed_instance(config["cluster"], config["model"], data_parallel=config["data_parallel"])
    old = get_method("latency-chain-dp")(inst, config["seed"], None).placement
    region = standard_scenarios(inst.cluster, old, config["seed"])[1]
    problem = ReplacementProblem(inst, old, list(region.failed), config["horizon"], label=region.label)
    results = {
        m: run_method(problem, m, config["seed"], config["search_budget"] if m == "search" else None) for m in METHODS
    }
    best = min(r.outcome.total_s for r in results.values() if r.feasible)
    rows = [
        {"method": m, **r.outcome.to_dict(), "moved_gb": r.outcome.moved_bytes / 1e9, "vs_best": r.outcome.total_s / best,
         "decision_s": r.decision_s, "cost_evals": r.cost_evals}
        for m, r in results.items() if r.feasible
    ]
    before, after = before_after_figures(problem, results["agent"])
    save_figure(before, out / "outage-before.png")
    save_figure(after, out / "outage-after.png")
    summary = {
        "instance": inst.instance_id, "failed": region.label, "failed_machines": len(region.failed),
        "displaced_slots": int(problem.displaced.sum()), "slots": int(problem.old.size),
        "old_iteration_time_s": cost.iteration_time(inst.cluster, inst.workload, old),
        "rows": rows,
    }
    intro = (f"{inst.instance_id}: {region.label} fails ({len(region.failed)} machines, {summary['displaced_slots']} of "
             f"{summary['slots']} slots displaced); before: {summary['old_iteration_time_s']:.3f} s per iteration.")
    write_report(out, "outage", summary, intro, [
        ("method", "method", ""), ("iteration_time_s", "iteration s", ".3f"), ("moved_gb", "moved GB", ".1f"),
        ("migration_s", "migration s", ".1f"), ("total_s", f"total s ({config['horizon']:,} it.)", ",.0f"),
        ("vs_best", "/ best", ".3f"), ("decision_s", "decision s", ".2f"), ("cost_evals", "cost evals", ","),
    ])
    return summary


def write_report(out: Path, name: str, summary: dict, intro: str, columns: list[tuple[str, str, str]]) -> None:
    """``NAME.json`` (the summary) and ``NAME.md`` (the intro and a table of its rows)."""
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(f"{intro}\n\n{markdown_table(summary['rows'], columns)}", encoding="utf-8")


def trace(config: dict, out: Path) -> dict:
    """Part 2: a seeded random trace over a run, replayed with every method."""
    from hulk_env import cost
    from hulk_env.baselines import get_method
    from hulk_env.generators import fixed_instance
    from hulk_env.render import save_figure
    from hulk_env.replacement.methods import get_replace_method
    from hulk_env.replacement.plots import timeline_figure
    from hulk_env.replacement.traces import compare_methods, random_trace

    inst = fixed_instance(config["cluster"], config["model"], data_parallel=config["data_parallel"])
    start = get_method("latency-chain-dp")(inst, config["seed"], None).placement
    iterations = config["trace_iterations"]
    t0 = cost.iteration_time(inst.cluster, inst.workload, start)
    events = random_trace(
        inst.cluster, 4 * iterations * t0, config["trace_rate"], config["seed"],
        region_outage_per_hour=config["trace_region_rate"], mean_repair_h=config["trace_repair_h"],
        mean_outage_h=config["trace_outage_h"], checkpoint_every=config["trace_checkpoint_every"],
    )
    started = time.perf_counter()
    results = compare_methods(
        inst, start, events, iterations, {m: get_replace_method(m) for m in METHODS}, seed=config["seed"],
        budget=config["trace_search_budget"],
    )
    replay_s = time.perf_counter() - started
    best = min(results, key=lambda r: (not r.finished, r.wall_s))
    title = (f"{inst.workload.name} on {inst.cluster.name}: {iterations:,} iterations, {events.failures} failures "
             f"({events.name}); least time lost: {best.method}")
    save_figure(timeline_figure(results, events, title), out / "timeline.png")
    rows = [{**r.to_dict(with_timeline=False), "wall_h": r.wall_s / 3600, "lost_min": r.lost_s / 60,
             "migration_min": r.migration_s / 60, "rollback_min": r.rollback_s / 60, "slowdown_min": r.slowdown_s / 60}
            for r in results]
    summary = {"instance": inst.instance_id, "failures": events.failures, "events": len(events.events),
               "replay_s": replay_s, "least_time_lost": best.method, "rows": rows}
    intro = (f"{inst.instance_id}, {iterations:,} iterations ({iterations * t0 / 3600:.2f} h without failures), "
             f"{events.failures} failures ({events.name}); replayed for all methods in {replay_s:.0f} s.")
    write_report(out, "trace", summary, intro, [
        ("method", "method", ""), ("wall_h", "wall h", ".2f"), ("lost_min", "lost min", ".1f"),
        ("migration_min", "migrating min", ".1f"), ("rollback_min", "redone min", ".1f"),
        ("slowdown_min", "slower min", ".1f"), ("decisions", "decisions", ""), ("decision_s", "decision s", ".1f"),
    ])
    return summary


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    started = time.perf_counter()
    config = load_config(NAME, args.config, DEFAULTS)
    if args.quick:
        config.update(cluster="cloud-3region", model="gpt3-1.3b", data_parallel=2, search_budget=1000,
                      trace_iterations=2000, trace_rate=1.0, trace_search_budget=500)
    out = prepare_out_dir(args.out, NAME)
    outage(config, out)
    trace(config, out)
    write_run_info(out, NAME, list(argv or []), config, started)
    return out


if __name__ == "__main__":  # pragma: no cover
    run_cli(main)
