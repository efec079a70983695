"""Generalisation: one policy, trained on small random instances, placed on unseen ones.

Trains a policy with the agent's API (:func:`agents.training.train.train`, config ``train_config`` of
``experiments/configs/generalization.yaml``) on random geo clusters and random GPT-style models,
then, without retraining, places held-out instances -- clusters of 8 to 128 machines (the
training clusters have at most 12) and catalog models up to 13B parameters (the training models
are far smaller and shallower) -- plus a few fresh draws of the training distribution as a
control. Each instance is also solved by the best per-instance search (``genetic`` and
``anneal`` with a large budget; the better one is the reference) and by ``latency-chain-dp``.

The policy network is size-agnostic (:mod:`agents.network.gnn`): it reads every instance at its own
size, whatever the training run's padding (``tests/test_agent_any_size.py``).

Reported per instance and as geometric means: the gap ``T_policy / T_best - 1`` and the decision
time (wall seconds of one placement) of the policy against the searches.

    python -m experiments.generalization [--out DIR] [--timesteps N] [--policy RUN_DIR]
        [--search-budget N] [--reuse] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.training.tb_curves import read_curves
from experiments.common import (
    load_config,
    markdown_table,
    prepare_out_dir,
    run_cli,
    write_run_info,
)
from hulk_env import cost, render
from hulk_env.baselines import get_method
from hulk_env.baselines.naive import naive
from hulk_env.cluster import geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import geometric_mean, write_csv
from hulk_env.generators import DEFAULT_GPU_MIX, RandomGeoGenerator
from hulk_env.hardware import geo
from hulk_env.instance import Instance
from hulk_env.workload import catalog

NAME = "generalization"
DEFAULTS: dict[str, Any] = {
    "train_config": {},
    "heldout": {"machines": [8], "models": ["gpt3-1.3b"], "data_parallel": [1], "seed": 7},
    "in_distribution": 0,
    "search_methods": ["genetic", "anneal"],
    "search_budget": 50_000,
    "reference_methods": ["naive", "latency-chain-dp"],
    "policy_samples": 16,
    "untrained_control": True,
}
QUICK: dict[str, Any] = {
    "heldout": {"machines": [8, 16], "models": ["gpt3-350m"], "data_parallel": [1], "seed": 7},
    "in_distribution": 1,
    "search_budget": 300,
    "policy_samples": 2,
}
QUICK_TRAIN = [
    "train.total_timesteps=512", "train.n_envs=2", "ppo.n_steps=128", "ppo.batch_size=128", "ppo.n_epochs=1",
    "eval.eval_every=256", "eval.n_eval_episodes=1", "eval.heldout_instances=1", "train.checkpoint_every=0",
    "train.progress_bar=false",
]  # fmt: skip
IN_DISTRIBUTION_SEED = 424_242  # fresh draws of the training generator, never its training seeds

RESULT_COLUMNS = (
    "instance", "split", "machines", "regions", "model", "data_parallel", "layers", "method", "feasible",
    "iteration_time_s", "speedup_vs_naive", "gap_to_best_search", "decision_s", "cost_evals", "reason",
)  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"Output directory (default runs/experiments/{NAME}).")
    parser.add_argument("--config", type=Path, default=None, help="Another YAML config.")
    parser.add_argument("--policy", type=Path, default=None, help="Evaluate this trained run instead of training one.")
    parser.add_argument("--timesteps", type=int, default=None, help="Training steps (overrides the config).")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="Training config override section.key=value (repeatable).")
    parser.add_argument("--search-budget", type=int, default=None, help="Budget of genetic/anneal.")
    parser.add_argument("--reuse", action="store_true", help="Reuse a finished training run in OUT/policy.")
    parser.add_argument("--quick", action="store_true", help="Tiny training and instances (seconds).")
    return parser.parse_args(argv)


# ---- instances -------------------------------------------------------------------------------


def regions_for(machines: int) -> int:
    """Cities in a held-out cluster: about sqrt(machines), between 2 and 12."""
    return int(np.clip(round(math.sqrt(machines)), 2, 12))


def heldout_instances(spec: dict[str, Any], training_cities: Sequence[str] = ()) -> tuple[list[Instance], list[str]]:
    """Held-out clusters x catalog models (see the config); returns ``(instances, notes)``.

    Clusters are drawn from the cities the policy never trained on (all cities when the
    training run used every one).
    """
    rng = np.random.default_rng(int(spec.get("seed", 0)))
    seen = {geo.get_city(c).name for c in training_cities}
    cities = sorted(c for c in geo.CITIES if geo.get_city(c).name not in seen)
    d_cycle = [int(d) for d in spec.get("data_parallel", [1])]
    out, notes, k = [], [], 0
    for m in spec["machines"]:
        m = int(m)
        regions = min(regions_for(m), m)
        chosen = [str(c) for c in rng.choice(cities, regions, replace=False)]
        counts = 1 + rng.multinomial(m - regions, np.full(regions, 1.0 / regions))
        cluster = geo_cluster(chosen, [int(c) for c in counts], DEFAULT_GPU_MIX, seed=int(rng.integers(2**31)),
                              name=f"heldout-{m}", link_noise=0.1)  # fmt: skip
        for model in spec["models"]:
            d = d_cycle[k % len(d_cycle)]
            k += 1
            for dp in dict.fromkeys((d, 1)):
                inst = Instance(cluster, catalog.get_model(str(model), data_parallel=dp), f"heldout/{m}m/{model}/D{dp}")
                if naive(inst).feasible:
                    out.append(inst)
                    break
            else:
                notes.append(f"{model} on {m} machines does not fit (naive placement infeasible): skipped")
    return out, notes


def in_distribution_instances(count: int) -> list[Instance]:
    """Fresh draws of the training generator (RandomGeoGenerator defaults)."""
    gen = RandomGeoGenerator()
    rng = np.random.default_rng(IN_DISTRIBUTION_SEED)
    return [gen(rng) for _ in range(count)]


# ---- the policy ------------------------------------------------------------------------------


def train_policy(config: dict[str, Any], args: argparse.Namespace, out: Path, name: str = "policy",
                 timesteps: int | None = None) -> Path:
    """Train with the agent's API; returns the run directory (``OUT/<name>``)."""
    from agents.training.config import TrainSettings, config_from_dict
    from agents.training.train import train

    settings = TrainSettings(
        config=config_from_dict(config["train_config"], source="generalization.yaml:train_config"),
        overrides=(*(QUICK_TRAIN if args.quick else ()), *args.overrides),
        total_timesteps=timesteps if timesteps is not None else args.timesteps,
        out=out, name=name,
    )  # fmt: skip
    return train(settings)


def untrained_control(config: dict[str, Any], args: argparse.Namespace, out: Path) -> Path:
    """The same network and config with zero training steps (its initial weights): what the
    architecture, the stay prior and the lookahead feature give before any learning."""
    done = out / "untrained"
    if (done / "policy" / "policy.json").is_file():
        return done
    return train_policy(config, args, out, name="untrained", timesteps=0)


# ---- evaluation ------------------------------------------------------------------------------


class PolicyPlacer:
    """A saved policy placing instances of any size (the network reads each at its own size)."""

    def __init__(self, run_dir: Path) -> None:
        from agents.network.saved_policy import load_policy

        self.loaded = load_policy(run_dir)

    def place(self, inst: Instance, seed: int, samples: int):
        from agents.decision.inference import policy_placement

        return policy_placement(self.loaded, inst, seed=seed, samples=samples, name="policy")


def evaluate_instance(
    inst: Instance, split: str, policy: Any, config: dict[str, Any], untrained: Any = None
) -> list[dict[str, Any]]:
    """Policy (greedy and sampled), the untrained control, the searches and the references on
    one instance."""
    c, w = inst.cluster, inst.workload
    t_naive = cost.iteration_time(c, w, naive(inst).placement)
    runs: list[tuple[str, Any, float, str]] = []

    def timed(name: str, call) -> None:
        start = time.perf_counter()
        try:
            result, reason = call(), ""
        except HulkInputError as exc:
            result, reason = None, exc.one_line()
        runs.append((name, result, time.perf_counter() - start, reason or (result.reason if result else "")))

    samples = int(config["policy_samples"])
    timed("policy", lambda: policy.place(inst, 0, 0))
    if samples > 0:
        timed(f"policy+{samples}", lambda: policy.place(inst, 0, samples))
    if untrained is not None:
        timed("untrained", lambda: untrained.place(inst, 0, 0))
    for name in config["search_methods"]:
        timed(name, lambda name=name: get_method(name)(inst, 0, int(config["search_budget"])))
    for name in config["reference_methods"]:
        timed(name, lambda name=name: get_method(name)(inst, 0, None))

    times = {}
    for name, result, _, _ in runs:
        if result is not None and result.feasible:
            b = cost.evaluate(c, w, result.placement)
            if b.memory_feasible:
                times[name] = float(b.iteration_time_s)
    searched = [times[n] for n in config["search_methods"] if n in times]
    best = min(searched) if searched else math.nan
    rows = []
    for name, result, wall, reason in runs:
        t = times.get(name, math.nan)
        rows.append({
            "instance": inst.instance_id, "split": split, "machines": inst.num_machines,
            "regions": len(c.regions), "model": w.name, "data_parallel": w.data_parallel, "layers": w.num_layers,
            "method": name, "feasible": name in times, "iteration_time_s": t, "speedup_vs_naive": t_naive / t,
            "gap_to_best_search": t / best - 1.0, "decision_s": wall,
            "cost_evals": result.cost_evals if result is not None else 0,
            "reason": reason if name not in times else "",
        })  # fmt: skip
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per split and method: geometric-mean gap to the best search, decision time, failures."""
    out = []
    for split in dict.fromkeys(r["split"] for r in rows):
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["split"] == split and r["method"] == method]
            ok = [r for r in mine if r["feasible"]]
            ratio = geometric_mean([1.0 + r["gap_to_best_search"] for r in ok])
            out.append({
                "split": split, "method": method, "instances": len(mine), "solved": len(ok),
                "geomean_gap_to_best_search": ratio - 1.0,
                "worst_gap": max((r["gap_to_best_search"] for r in ok), default=math.nan),
                "geomean_speedup_vs_naive": geometric_mean([r["speedup_vs_naive"] for r in ok]),
                "median_decision_s": float(np.median([r["decision_s"] for r in mine])) if mine else math.nan,
                "max_decision_s": max((r["decision_s"] for r in mine), default=math.nan),
            })  # fmt: skip
    return out


def gap_figure(rows: list[dict[str, Any]], methods: Sequence[str]):
    """Gap to the best search vs cluster size, one marker per method (held-out split)."""
    plt = render.pyplot()
    fig, (ax_gap, ax_time) = plt.subplots(1, 2, figsize=(13, 4.6), dpi=100)
    colours = plt.get_cmap("tab10")
    for k, method in enumerate(methods):
        mine = [r for r in rows if r["method"] == method and r["feasible"]]
        if not mine:
            continue
        jitter = 1.0 + 0.04 * (k - len(methods) / 2)
        xs = [r["machines"] * jitter for r in mine]
        ax_gap.scatter(xs, [100 * r["gap_to_best_search"] for r in mine], color=colours(k % 10), label=method, s=22)
        ax_time.scatter(xs, [r["decision_s"] for r in mine], color=colours(k % 10), label=method, s=22)
    for ax in (ax_gap, ax_time):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("machines in the cluster (training: 4-12)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_gap.set_ylabel("gap to best search (%)")
    ax_gap.set_yscale("symlog", linthresh=1.0)
    ax_gap.set_title("iteration time vs the best of genetic/anneal (0 = as good)", fontsize=9)
    ax_time.set_yscale("log")
    ax_time.set_ylabel("decision time (s)")
    ax_time.set_title("wall seconds to produce one placement", fontsize=9)
    fig.tight_layout()
    return fig


def summary_markdown(
    config: dict[str, Any], run_dir: Path, summary: list[dict[str, Any]], rows: list[dict[str, Any]],
    notes: list[str], wall_s: float,
) -> str:
    """The tables as Markdown."""
    per_instance = [r for r in rows if r["method"] == "policy"]
    best_rows = {}
    for r in rows:
        if r["method"] in config["search_methods"] and r["feasible"]:
            key = r["instance"]
            if key not in best_rows or r["iteration_time_s"] < best_rows[key]["iteration_time_s"]:
                best_rows[key] = r
    table = []
    for r in per_instance:
        b = best_rows.get(r["instance"], {})
        sampled = [x for x in rows if x["instance"] == r["instance"] and x["method"].startswith("policy+")]
        control = [x for x in rows if x["instance"] == r["instance"] and x["method"] == "untrained"]
        table.append({
            "instance": r["instance"], "split": r["split"], "policy_gap": r["gap_to_best_search"],
            "sampled_gap": sampled[0]["gap_to_best_search"] if sampled else None,
            "untrained_gap": control[0]["gap_to_best_search"] if control else None,
            "policy_s": r["decision_s"], "best": b.get("method"), "best_s": b.get("decision_s"),
            "speedup": r["speedup_vs_naive"], "best_speedup": b.get("speedup_vs_naive"),
        })  # fmt: skip
    lines = [
        "# Generalisation: one policy on unseen clusters and models",
        "",
        f"Policy: `{run_dir}`. Search reference: best of {', '.join(config['search_methods'])} with "
        f"{config['search_budget']:,} cost-model evaluations each. Wall time {wall_s / 60:.1f} min.",
        "",
        "## Summary (geometric means over instances)",
        "",
        markdown_table(summary, [
            ("split", "split", ""), ("method", "method", ""), ("solved", "solved", "d"), ("instances", "of", "d"),
            ("geomean_gap_to_best_search", "gap to best search", "%"), ("worst_gap", "worst gap", "%"),
            ("geomean_speedup_vs_naive", "speed-up vs naive", "x"), ("median_decision_s", "median decision s", ".3f"),
            ("max_decision_s", "max decision s", ".3f"),
        ]),  # fmt: skip
        "## Per instance",
        "",
        markdown_table(table, [
            ("instance", "instance", ""), ("split", "split", ""), ("policy_gap", "policy gap", "%"),
            ("sampled_gap", "policy+samples gap", "%"), ("untrained_gap", "untrained gap", "%"),
            ("speedup", "policy speed-up", "x"),
            ("best", "best search", ""), ("best_speedup", "search speed-up", "x"),
            ("policy_s", "policy s", ".3f"), ("best_s", "search s", ".2f"),
        ]),  # fmt: skip
    ]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    """Run the experiment; returns the output directory."""
    started = time.perf_counter()
    args = parse_args(argv)
    config = load_config(NAME, args.config, DEFAULTS)
    if args.quick:
        config.update(QUICK)
    if args.search_budget is not None:
        config["search_budget"] = args.search_budget
    out = prepare_out_dir(args.out, NAME)
    if args.policy is not None:
        run_dir = args.policy
    elif args.reuse and (out / "policy" / "policy" / "policy.json").is_file():
        run_dir = out / "policy"
    else:
        run_dir = train_policy(config, args, out)
    policy = PolicyPlacer(run_dir)
    untrained = PolicyPlacer(untrained_control(config, args, out)) if config["untrained_control"] else None

    training_cities = config["train_config"].get("env", {}).get("cities", [])
    heldout, notes = heldout_instances(config["heldout"], training_cities)
    control = in_distribution_instances(int(config["in_distribution"]))
    rows: list[dict[str, Any]] = []
    for split, instances in (("held-out", heldout), ("training distribution", control)):
        for inst in instances:
            rows += evaluate_instance(inst, split, policy, config, untrained)
            print(f"{inst.instance_id}: done ({time.perf_counter() - started:.0f} s)", flush=True)

    summary = summarise(rows)
    write_csv(out / "results.csv", rows, RESULT_COLUMNS)
    write_csv(out / "summary.csv", summary)
    methods = list(dict.fromkeys(r["method"] for r in rows if r["method"] != "naive"))
    render.save_figure(gap_figure([r for r in rows if r["split"] == "held-out"], methods), out / "gap_and_time.png")
    render.save_figure(render.leaderboard_figure([r for r in rows if r["split"] == "held-out"],
                                                 title="held-out instances: speed-up over naive"), out / "leaderboard.png")
    try:
        render.save_figure(render.curves_figure({"policy": read_curves(run_dir)}, title="training curves"),
                           out / "curves.png")
    except HulkInputError as exc:  # a run without logs (e.g. --policy of a copied policy directory)
        notes.append(f"no training curves: {exc.one_line()}")
    wall = time.perf_counter() - started
    (out / "summary.md").write_text(summary_markdown(config, run_dir, summary, rows, notes, wall), encoding="utf-8")
    write_run_info(out, NAME, argv if argv is not None else [], config, started)
    return out


if __name__ == "__main__":
    import sys

    run_cli(main, sys.argv[1:])
