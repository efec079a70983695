"""Paper reproduction: the Hulk paper's 47 machines x models from 1.3B to 176B parameters.

The paper reports training iterations more than 20% shorter with its placement than without
(arXiv 2302.13741). This experiment loads the paper's own cluster data (shipped in the package, or ``--hulk-data``), places
every model of ``experiments/configs/paper_reproduction.yaml`` with every method -- the
baselines, ``hulk-gcn`` when the agent registers it, and trained policies given with
``--policy`` (run on every case at its own size: the network is size-agnostic, :mod:`agents.network.gnn`)
-- and measures the iteration time with the cost model and with the discrete-event simulator.
Speed-up = naive time / method time; the claim holds for a case when the iteration is at least
20% shorter (speed-up >= 1.25).

    python -m experiments.paper_reproduction [--hulk-data DIR] [--out DIR]
        [--policy RUN_DIR ...] [--seeds 0,1,2] [--budget N] [--quick]

Writes into the output directory: ``results.csv`` (one row per case, method and seed),
``speedups.csv`` (median over seeds per case and method), ``claim.csv`` (per case), ``methods.csv``
(per method), ``summary.md`` (all tables), ``speedups.png``, ``leaderboard.png``, placement maps
and Gantt charts of ``figure_cases``, and ``run.json`` (command, config, versions).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import (
    default_hulk_data,
    load_config,
    markdown_table,
    prepare_out_dir,
    run_cli,
    write_run_info,
)
from hulk_env import cost, render
from hulk_env.baselines import PlacementResult, get_method
from hulk_env.baselines.naive import naive
from hulk_env.cluster import Cluster, load_hulk_dir
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import geometric_mean, write_csv
from hulk_env.feasibility import capacity_reason
from hulk_env.instance import Instance
from hulk_env.simulate import simulate
from hulk_env.workload import catalog

NAME = "paper_reproduction"
MethodFn = Callable[[Instance, int, "int | None"], PlacementResult]

DEFAULTS: dict[str, Any] = {
    "cases": [{"model": "gpt3-1.3b", "data_parallel": 1}],
    "methods": ["naive", "compute-greedy", "latency-chain-dp", "anneal"],
    "seeds": [0],
    "budget": None,
    "claim_reduction": 0.2,
    "include_hulk_gcn": True,
    "policy_samples": 0,
    "figure_cases": [],
}
# --quick: two cases, four methods, a small budget (seconds; for tests and smoke runs).
QUICK: dict[str, Any] = {
    "cases": [{"model": "gpt3-1.3b", "data_parallel": 1}, {"model": "gpt3-175b", "data_parallel": 1}],
    "methods": ["naive", "compute-greedy", "latency-chain-dp", "anneal"],
    "seeds": [0],
    "budget": 300,
    "include_hulk_gcn": False,
    "figure_cases": ["gpt3-1.3b/D1"],
}

RESULT_COLUMNS = (
    "instance", "model", "data_parallel", "layers", "method", "seed", "feasible", "iteration_time_s",
    "speedup_vs_naive", "reduction_vs_naive", "simulated_time_s", "simulated_speedup_vs_naive",
    "machines_used", "regions_used", "wan_share", "cost_evals", "wall_s", "reason",
)  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--hulk-data", type=Path, default=None,
                        help="The paper's data directory (node_feature.csv, edge.txt); default: the copy in the package.")
    parser.add_argument("--out", type=Path, default=None, help=f"Output directory (default runs/experiments/{NAME}).")
    parser.add_argument("--config", type=Path, default=None, help="Another YAML config.")
    parser.add_argument("--policy", type=Path, action="append", default=[], help="A trained policy's run directory (repeatable).")
    parser.add_argument("--methods", default=None, help="Comma-separated methods (overrides the config).")
    parser.add_argument("--seeds", default=None, help="Comma-separated seeds (overrides the config).")
    parser.add_argument("--budget", type=int, default=None, help="Search budget in cost-model evaluations.")
    parser.add_argument("--no-figures", action="store_true", help="Skip placement maps and Gantt charts.")
    parser.add_argument("--quick", action="store_true", help="Two cases, four methods, small budget (seconds).")
    return parser.parse_args(argv)


def resolve_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config file, then ``--quick``, then the flags."""
    config = load_config(NAME, args.config, DEFAULTS)
    if args.quick:
        config.update(QUICK)
    if args.methods:
        config["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.seeds:
        try:
            config["seeds"] = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise HulkInputError(f"--seeds must be comma-separated integers, got {args.seeds!r}", field="seeds") from None
    if args.budget is not None:
        config["budget"] = args.budget
    if "naive" not in config["methods"]:
        config["methods"] = ["naive", *config["methods"]]
    return config


def case_id(model: str, data_parallel: int) -> str:
    return f"{model}/D{data_parallel}"


def build_methods(config: dict[str, Any], policies: Sequence[Path]) -> tuple[dict[str, MethodFn], list[str]]:
    """``(methods by name, notes)``: registered baselines, ``hulk-gcn`` if the agent has it,
    and trained policies (these import torch, so only when asked for)."""
    methods: dict[str, MethodFn] = {name: get_method(name) for name in config["methods"]}
    notes: list[str] = []
    if config["include_hulk_gcn"]:
        try:
            from agents.decision.methods import agent_methods

            methods.update(agent_methods())
        except ImportError as exc:
            notes.append(f"hulk-gcn not run: it is not registered yet ({exc}).")
    for run_dir in policies:
        from agents.decision.methods import load_policy_method

        # Same weights on every case: the network reads each case at its own size.
        methods[f"policy:{Path(run_dir).name}"] = load_policy_method(Path(run_dir), samples=int(config["policy_samples"]))
    return methods, notes


def run_case(
    inst: Instance, methods: dict[str, MethodFn], seeds: Sequence[int], budget: int | None
) -> tuple[list[dict[str, Any]], dict[tuple[str, int], np.ndarray]]:
    """Every method and seed on one instance: rows and the placements found."""
    c, w = inst.cluster, inst.workload
    reference = naive(inst)
    # Without a naive placement there is no speed-up to report, only which methods fit at all.
    t_naive = cost.iteration_time(c, w, reference.placement) if reference.feasible else math.nan
    sim_naive = simulate(c, w, reference.placement, record=False).iteration_time_s if reference.feasible else math.nan
    rows, placements = [], {}
    for seed in seeds:
        for name, fn in methods.items():
            start = time.perf_counter()
            try:
                result = fn(inst, seed, budget)
                reason = result.reason
            except HulkInputError as exc:  # e.g. a policy whose padding is too small
                result, reason = PlacementResult(name, None), exc.one_line()
            wall = time.perf_counter() - start
            row = {"instance": inst.instance_id, "model": w.name, "data_parallel": w.data_parallel,
                   "layers": w.num_layers, "method": name, "seed": seed, "cost_evals": result.cost_evals,
                   "wall_s": wall, "reason": reason}  # fmt: skip
            breakdown = cost.evaluate(c, w, result.placement) if result.feasible else None
            if breakdown is None or not breakdown.memory_feasible:
                row.update(feasible=False, reason=reason or "placement does not fit in memory",
                           iteration_time_s=math.nan, speedup_vs_naive=math.nan)
                rows.append(row)
                continue
            t = float(breakdown.iteration_time_s)
            t_sim = simulate(c, w, result.placement, record=False).iteration_time_s
            used = np.unique(result.placement)
            row.update(
                feasible=True, iteration_time_s=t, speedup_vs_naive=t_naive / t, reduction_vs_naive=1.0 - t / t_naive,
                simulated_time_s=t_sim, simulated_speedup_vs_naive=sim_naive / t_sim, machines_used=len(used),
                regions_used=len(set(c.region_index[used].tolist())), wan_share=render.wan_share(inst, result.placement),
            )
            rows.append(row)
            placements[(name, seed)] = np.asarray(result.placement)
    return rows, placements


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case and method: median, min and max over seeds (feasible runs only)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["instance"], r["method"]), []).append(r)
    out = []
    for (inst, method), rs in groups.items():
        ok = [r for r in rs if r.get("feasible")]
        speed = [r["speedup_vs_naive"] for r in ok]
        sim = [r["simulated_speedup_vs_naive"] for r in ok]
        out.append({
            "instance": inst, "method": method, "runs": len(rs), "feasible_runs": len(ok),
            "speedup_median": float(np.median(speed)) if speed else math.nan,
            "speedup_min": min(speed) if speed else math.nan, "speedup_max": max(speed) if speed else math.nan,
            "simulated_speedup_median": float(np.median(sim)) if sim else math.nan,
            "iteration_time_s_median": float(np.median([r["iteration_time_s"] for r in ok])) if ok else math.nan,
            "wall_s_median": float(np.median([r["wall_s"] for r in rs])),
        })  # fmt: skip
    return out


def claim_rows(
    cases: list[dict[str, Any]], agg: list[dict[str, Any]], placements: dict[str, dict], target: float
) -> list[dict[str, Any]]:
    """Per case: does the best method give iterations ``target`` shorter than naive?"""
    out = []
    for case in cases:
        cid = case["instance"]
        entry = dict(case)
        if not case["fits"]:
            entry.update(distinct_feasible_placements=0, claim="n/a: naive does not fit")
            out.append(entry)
            continue
        distinct = {p.tobytes() for p in placements[cid].values()}
        mine = [a for a in agg if a["instance"] == cid and a["method"] != "naive" and a["feasible_runs"]]
        best = max(mine, key=lambda a: a["speedup_median"])
        reduction = 1.0 - 1.0 / best["speedup_median"]
        sim_reduction = 1.0 - 1.0 / best["simulated_speedup_median"]
        entry.update(
            distinct_feasible_placements=len(distinct), best_method=best["method"],
            best_speedup=best["speedup_median"], best_reduction=reduction, simulated_reduction=sim_reduction,
            claim=("holds" if reduction >= target else "not met") if len(distinct) > 1 else "n/a: one placement",
        )  # fmt: skip
        out.append(entry)
    return out


def method_rows(agg: list[dict[str, Any]], claims: list[dict[str, Any]], target: float) -> list[dict[str, Any]]:
    """Per method: geometric-mean speed-up over the cases that fit and how often it meets the claim."""
    eligible = {c["instance"] for c in claims if str(c["claim"]) in ("holds", "not met")}
    out = []
    for method in dict.fromkeys(a["method"] for a in agg):
        mine = [a for a in agg if a["method"] == method and a["instance"] in eligible]
        meets = [a for a in mine if a["feasible_runs"] and 1.0 - 1.0 / a["speedup_median"] >= target]
        misses = sorted(a["instance"] for a in mine if a not in meets)
        out.append({
            "method": method,
            "geomean_speedup": geometric_mean([a["speedup_median"] for a in mine]),
            "geomean_simulated_speedup": geometric_mean([a["simulated_speedup_median"] for a in mine]),
            "claim_met": f"{len(meets)}/{len(mine)}",
            "misses": ", ".join(misses) if method != "naive" else "(reference)",
            "median_wall_s": float(np.median([a["wall_s_median"] for a in mine])) if mine else math.nan,
        })  # fmt: skip
    out.sort(key=lambda r: -r["geomean_speedup"] if math.isfinite(r["geomean_speedup"]) else math.inf)
    return out


def draw_case(out: Path, inst: Instance, placements: dict[tuple[str, int], np.ndarray], best_method: str) -> list[Path]:
    """Placement map and Gantt chart of the best method and of naive for one case."""
    paths = []
    slug = inst.instance_id.replace("/", "_").lower()
    for method in dict.fromkeys((best_method, "naive")):
        placement = placements[(method, min(s for m, s in placements if m == method))]
        tag = method.replace(":", "-").replace("/", "_")
        paths.append(render.save_figure(render.placement_figure(inst, placement), out / f"placement_{slug}_{tag}.png"))
        sim = simulate(inst.cluster, inst.workload, placement)
        paths.append(render.save_figure(render.gantt_figure(sim, inst), out / f"gantt_{slug}_{tag}.png"))
    return paths


def summary_markdown(
    cluster: Cluster, config: dict[str, Any], agg: list[dict[str, Any]], claims: list[dict[str, Any]],
    per_method: list[dict[str, Any]], notes: list[str], wall_s: float,
) -> str:
    """All tables of the experiment as Markdown."""
    methods = list(dict.fromkeys(a["method"] for a in agg))
    table = []
    for c in claims:
        row = {"case": c["instance"], "layers": c["layers"]}
        for m in methods:
            hit = [a for a in agg if a["instance"] == c["instance"] and a["method"] == m]
            row[m] = hit[0]["speedup_median"] if hit and hit[0]["feasible_runs"] else None
        table.append(row)
    target = config["claim_reduction"]
    budget = config["budget"] or "each method's default"
    lines = [
        "# Paper reproduction: the paper's 47 machines",
        "",
        f"The paper's cluster: {cluster.num_machines} machines in {len(cluster.regions)} cities. "
        f"Methods: {', '.join(methods)}; seeds {config['seeds']}; search budget {budget}. "
        f"Wall time {wall_s / 60:.1f} min.",
        "",
        "## Speed-up over naive (cost model; median over seeds)",
        "",
        markdown_table(table, [("case", "case", ""), ("layers", "layers", "d")] + [(m, m, "x") for m in methods]),
        f"## The claim: iterations at least {100 * target:.0f}% shorter than naive",
        "",
        markdown_table(claims, [
            ("instance", "case", ""), ("naive_time_s", "naive s", ".3f"), ("best_method", "best method", ""),
            ("best_speedup", "speed-up", "x"), ("best_reduction", "shorter by", "%"),
            ("simulated_reduction", "shorter (simulator)", "%"), ("distinct_feasible_placements", "distinct placements found", "d"),
            ("claim", "claim", ""),
        ]),  # fmt: skip
        "## Per method",
        "",
        markdown_table(per_method, [
            ("method", "method", ""), ("geomean_speedup", "geomean speed-up", "x"),
            ("geomean_simulated_speedup", "geomean (simulator)", "x"), ("claim_met", "cases >= 20% shorter", ""),
            ("misses", "cases below", ""), ("median_wall_s", "median s per case", ".2f"),
        ]),  # fmt: skip
    ]
    for c in claims:
        if not c["fits"]:
            lines.append(f"- {c['instance']}: {c['reason']}")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    """Run the experiment; returns the output directory."""
    started = time.perf_counter()
    args = parse_args(argv)
    config = resolve_config(args)
    hulk_data = args.hulk_data or default_hulk_data()
    cluster, _ = load_hulk_dir(hulk_data)
    methods, notes = build_methods(config, args.policy)
    out = prepare_out_dir(args.out, NAME)
    seeds, budget = [int(s) for s in config["seeds"]], config["budget"]

    rows: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    placements: dict[str, dict[tuple[str, int], np.ndarray]] = {}
    instances: dict[str, Instance] = {}
    for spec in config["cases"]:
        d = int(spec.get("data_parallel", 1))
        workload = catalog.get_model(str(spec["model"]), data_parallel=d)
        inst = Instance(cluster, workload, case_id(str(spec["model"]), d))
        instances[inst.instance_id] = inst
        fits = naive(inst).feasible
        case = {"instance": inst.instance_id, "model": workload.name, "data_parallel": d, "layers": workload.num_layers,
                "fits": fits, "reason": "" if fits else capacity_reason(inst)}  # fmt: skip
        if fits:
            case["naive_time_s"] = cost.iteration_time(cluster, workload, naive(inst).placement)
            case_rows, placements[inst.instance_id] = run_case(inst, methods, seeds, budget)
            rows += case_rows
        else:  # does any other method fit it? (one seed: this is only a feasibility check)
            case_rows, found = run_case(inst, methods, seeds[:1], budget)
            rows += case_rows
            fitted = sorted({name for name, _ in found})
            case["reason"] = (
                f"naive does not fit, but {', '.join(fitted)} do (no speed-up without the naive reference)"
                if fitted else f"no method found a memory-feasible placement; {case['reason']}"
            )
        cases.append(case)
        print(f"{inst.instance_id}: {'done' if fits else 'naive does not fit'} ({time.perf_counter() - started:.0f} s)", flush=True)

    agg = aggregate(rows)
    target = float(config["claim_reduction"])
    claims = claim_rows(cases, agg, placements, target)
    per_method = method_rows(agg, claims, target)
    write_csv(out / "results.csv", rows, RESULT_COLUMNS)
    write_csv(out / "speedups.csv", agg)
    write_csv(out / "claim.csv", claims, ["instance", "model", "data_parallel", "layers", "fits", "naive_time_s",
                                          "best_method", "best_speedup", "best_reduction", "simulated_reduction",
                                          "distinct_feasible_placements", "claim", "reason"])  # fmt: skip
    write_csv(out / "methods.csv", per_method)
    if rows:
        render.save_figure(render.speedup_bars_figure(rows, reference=1.0 / (1.0 - target),
                                                      title=f"the paper's {cluster.num_machines} machines: speed-up over "
                                                      "naive per model (median over seeds; dashed: 20% shorter)"),
                           out / "speedups.png")  # fmt: skip
        render.save_figure(render.leaderboard_figure([r for r in rows if r["seed"] == seeds[0]],
                                                     reference=1.0 / (1.0 - target)), out / "leaderboard.png")
    if not args.no_figures:
        for cid in config["figure_cases"]:
            claim = next((c for c in claims if c["instance"] == cid and c.get("best_method")), None)
            if claim is not None:
                draw_case(out, instances[cid], placements[cid], claim["best_method"])
    wall = time.perf_counter() - started
    (out / "summary.md").write_text(summary_markdown(cluster, config, agg, claims, per_method, notes, wall), encoding="utf-8")
    write_run_info(out, NAME, argv if argv is not None else [], config, started)
    return out


if __name__ == "__main__":
    import sys

    run_cli(main, sys.argv[1:])
