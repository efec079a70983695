"""Ablations: GNN vs MLP extractor, per-machine vs fixed-size head, reward shaping, lookahead.

Every variant of ``experiments/configs/ablations.yaml`` trains with the agent's API
(:func:`agents.training.train.train`) from the same base config for the same number of steps, changed only
by its dotted overrides; then its best policy (by the held-out evaluation during training) places
the training instance deterministically. Learning curves come from each run's TensorBoard logs.

    python -m experiments.ablations [--out DIR] [--timesteps N] [--seeds 0,1] [--variants a,b]
        [--reuse] [--quick]

Writes ``results.csv`` (variant x seed), ``summary.csv`` (per variant), ``summary.md``,
``curves.png`` (evaluation speed-up and training-episode speed-up over steps), ``final.png``
and ``run.json``; the training runs live under ``runs/``.
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
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import write_csv

NAME = "ablations"
DEFAULTS: dict[str, Any] = {
    "base_config": "default",
    "timesteps": 40_000,
    "seeds": [0],
    "common_overrides": [],
    "variants": {"gnn-pointer": []},
    "reference_methods": ["naive", "latency-chain-dp"],
}
QUICK_OVERRIDES = [
    "train.n_envs=2", "ppo.n_steps=128", "ppo.batch_size=128", "ppo.n_epochs=1", "eval.eval_every=256",
    "eval.n_eval_episodes=1", "train.checkpoint_every=0", "train.progress_bar=false",
    "env.cluster=cloud-3region", "env.model=gpt3-350m",
]  # fmt: skip
QUICK_TIMESTEPS = 512
CURVE_TAGS = ("eval/mean_speedup_vs_naive", "placement/speedup_vs_naive")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"Output directory (default runs/experiments/{NAME}).")
    parser.add_argument("--config", type=Path, default=None, help="Another YAML config.")
    parser.add_argument("--timesteps", type=int, default=None, help="Steps per variant and seed.")
    parser.add_argument("--seeds", default=None, help="Comma-separated seeds.")
    parser.add_argument("--variants", default=None, help="Comma-separated variant names (default: all).")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="Override for every variant, section.key=value (repeatable).")
    parser.add_argument("--reuse", action="store_true",
                        help="Reuse finished runs under OUT/runs (train wall time then read from file times).")
    parser.add_argument("--quick", action="store_true", help="A small instance and a few hundred steps (seconds).")
    return parser.parse_args(argv)


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Config file, then ``--quick``, then flags."""
    config = load_config(NAME, args.config, DEFAULTS)
    if not isinstance(config["variants"], dict) or not config["variants"]:
        raise HulkInputError("variants must be a mapping name -> list of overrides", field="variants")
    if args.quick:
        config["timesteps"] = QUICK_TIMESTEPS
        config["seeds"] = [0]
        config["common_overrides"] = [*config["common_overrides"], *QUICK_OVERRIDES]
        config["reference_methods"] = ["naive", "latency-chain-dp"]
    if args.timesteps is not None:
        config["timesteps"] = args.timesteps
    if args.seeds:
        config["seeds"] = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.variants:
        wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in wanted if v not in config["variants"]]
        if unknown:
            raise HulkInputError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(config['variants'])}",
                                 field="--variants")
        config["variants"] = {v: config["variants"][v] for v in wanted}
    config["common_overrides"] = [*config["common_overrides"], *args.overrides]
    return config


def train_variant(config: dict[str, Any], name: str, seed: int, runs_dir: Path, reuse: bool = False) -> tuple[Path, float]:
    """Train one variant with one seed; returns ``(run directory, wall seconds)``.

    With ``reuse``, a finished run already in place (``policy/policy.json`` written) is taken as
    it is; its wall time is then the time between its ``config.yaml`` and its final policy.
    """
    from agents.training.config import TrainSettings
    from agents.training.train import train

    done = runs_dir / f"{name}-seed{seed}"
    if reuse and (done / "policy" / "policy.json").is_file():
        return done, (done / "policy" / "policy.json").stat().st_mtime - (done / "config.yaml").stat().st_mtime

    settings = TrainSettings(
        config=config["base_config"], overrides=(*config["common_overrides"], *config["variants"][name]),
        total_timesteps=int(config["timesteps"]), seed=seed, out=runs_dir, name=f"{name}-seed{seed}",
    )  # fmt: skip
    start = time.perf_counter()
    run_dir = train(settings)
    return run_dir, time.perf_counter() - start


def final_row(run_dir: Path, name: str, seed: int, wall_s: float, timesteps: int) -> dict[str, Any]:
    """The best policy of a run placing its training instance (greedy)."""
    from agents.decision.inference import policy_placement
    from agents.network.saved_policy import load_policy
    from agents.training.runs import read_run_config
    from agents.training.sources import training_source

    run_config = read_run_config(run_dir)
    _, heldout = training_source(run_config)
    inst = heldout[0]
    loaded = load_policy(run_dir)
    start = time.perf_counter()
    result = policy_placement(loaded, inst)
    decision = time.perf_counter() - start
    t_naive = cost.iteration_time(inst.cluster, inst.workload, naive(inst).placement)
    t = cost.iteration_time(inst.cluster, inst.workload, result.placement) if result.feasible else math.nan
    return {
        "variant": name, "seed": seed, "instance": inst.instance_id, "timesteps": timesteps,
        "iteration_time_s": t, "speedup_vs_naive": t_naive / t, "train_wall_s": wall_s,
        "steps_per_s": timesteps / wall_s if wall_s > 0 else math.nan, "decision_s": decision,
        "best_eval_at": loaded.meta.get("num_timesteps", ""), "run_dir": str(run_dir),
    }  # fmt: skip


def reference_rows(run_dir: Path, methods: Sequence[str]) -> list[dict[str, Any]]:
    """The reference methods on the same training instance."""
    from agents.training.runs import read_run_config
    from agents.training.sources import training_source

    _, heldout = training_source(read_run_config(run_dir))
    inst = heldout[0]
    t_naive = cost.iteration_time(inst.cluster, inst.workload, naive(inst).placement)
    rows = []
    for m in methods:
        start = time.perf_counter()
        result = get_method(m)(inst, 0, None)
        wall = time.perf_counter() - start
        t = cost.iteration_time(inst.cluster, inst.workload, result.placement) if result.feasible else math.nan
        rows.append({"method": m, "iteration_time_s": t, "speedup_vs_naive": t_naive / t, "decision_s": wall})
    return rows


TRAIN_TAG = "placement/speedup_vs_naive"  # mean speed-up of the training episodes (sampled actions)
REACH_FRACTION = 0.9  # "steps to reach": 90% of the best reference method's speed-up


def curve_metrics(curves: list[render.Curve], target: float) -> dict[str, float]:
    """From a run's training-episode speed-up curve: its mean over the last 10% of steps, and the
    first step at which it reaches ``target`` (``nan``: never)."""
    curve = next((c for c in curves if c.tag == TRAIN_TAG and len(c.steps)), None)
    if curve is None:
        return {"train_speedup_last10": math.nan, "steps_to_target": math.nan}
    last = curve.steps >= curve.steps.max() - 0.1 * (curve.steps.max() - curve.steps.min())
    reached = np.flatnonzero(curve.values >= target)
    return {
        "train_speedup_last10": float(np.mean(curve.values[last])),
        "steps_to_target": float(curve.steps[reached[0]]) if len(reached) else math.nan,
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name]
        speed = [r["speedup_vs_naive"] for r in mine]
        reach = [r["steps_to_target"] for r in mine]
        out.append({
            "variant": name, "seeds": len(mine), "speedup_mean": float(np.mean(speed)),
            "speedup_min": min(speed), "speedup_max": max(speed),
            "train_speedup_last10": float(np.mean([r["train_speedup_last10"] for r in mine])),
            # a seed that never got there counts as the whole run
            "steps_to_target": float(np.mean([x if math.isfinite(x) else r["timesteps"] for x, r in zip(reach, mine, strict=True)])),
            "never_reached": sum(1 for x in reach if not math.isfinite(x)),
            "steps_per_s": float(np.mean([r["steps_per_s"] for r in mine])),
            "train_wall_s": float(np.mean([r["train_wall_s"] for r in mine])),
        })  # fmt: skip
    return out


def final_figure(summary: list[dict[str, Any]], refs: list[dict[str, Any]]):
    """Final speed-up over naive per variant (whiskers: seeds' range) with reference lines."""
    plt = render.pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(summary) + 3), 4.6), dpi=100, layout="constrained")
    xs = np.arange(len(summary))
    mean = np.array([s["speedup_mean"] for s in summary])
    low = mean - np.array([s["speedup_min"] for s in summary])
    high = np.array([s["speedup_max"] for s in summary]) - mean
    ax.bar(xs, mean, color="tab:blue", alpha=0.8, width=0.6, zorder=2)
    ax.errorbar(xs, mean, yerr=[low, high], fmt="none", ecolor="black", capsize=4, zorder=3)
    for x, v in zip(xs, mean, strict=True):
        ax.annotate(f"\u00d7{v:.2f}", (x, v), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    styles = ["--", ":", "-.", (0, (5, 1))]
    for k, r in enumerate(x for x in refs if x["method"] != "naive"):
        ax.axhline(r["speedup_vs_naive"], color="tab:red", ls=styles[k % len(styles)], lw=1,
                   label=f"{r['method']} \u00d7{r['speedup_vs_naive']:.2f}")
    ax.axhline(1.0, color="black", lw=0.8, label="naive")
    ax.set_xticks(xs)
    ax.set_xticklabels([s["variant"] for s in summary], rotation=20, ha="right")
    ax.set_ylabel("speed-up over naive")
    ax.set_ylim(0, 1.15 * max(float((mean + high).max()), *(r["speedup_vs_naive"] for r in refs)))
    ax.set_title("best policy's greedy placement on the training instance (whiskers: seeds' range)", fontsize=9)
    fig.legend(fontsize=7, loc="outside lower center", ncols=4, frameon=False)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    return fig


def main(argv: list[str] | None = None) -> Path:
    """Run the experiment; returns the output directory."""
    started = time.perf_counter()
    args = parse_args(argv)
    config = resolve(args)
    out = prepare_out_dir(args.out, NAME)
    runs_dir = out / "runs"
    rows, curves = [], {}
    for name in config["variants"]:
        for seed in config["seeds"]:
            run_dir, wall = train_variant(config, name, int(seed), runs_dir, reuse=args.reuse)
            rows.append(final_row(run_dir, name, int(seed), wall, int(config["timesteps"])))
            label = name if len(config["seeds"]) == 1 else f"{name}/seed{seed}"
            curves[label] = read_curves(run_dir)
            print(f"{name} seed {seed}: x{rows[-1]['speedup_vs_naive']:.2f} in {wall:.0f} s", flush=True)
    refs = reference_rows(Path(rows[0]["run_dir"]), config["reference_methods"])
    target = REACH_FRACTION * max(r["speedup_vs_naive"] for r in refs if r["method"] != "naive")
    for row, label in zip(rows, curves, strict=True):
        row.update(curve_metrics(curves[label], target))
    summary = summarise(rows)
    write_csv(out / "results.csv", rows)
    write_csv(out / "summary.csv", summary)
    write_csv(out / "references.csv", refs)
    tags = [t for t in CURVE_TAGS if any(c.tag == t for cs in curves.values() for c in cs)]
    render.save_figure(render.curves_figure(curves, tags=tags or None, title="ablations: learning curves"),
                       out / "curves.png")
    render.save_figure(final_figure(summary, refs), out / "final.png")
    lines = [
        "# Ablations",
        "",
        f"Base config `{config['base_config']}`, {config['timesteps']:,} steps per variant, seeds {config['seeds']}, "
        f"instance `{rows[0]['instance']}`. Wall time {(time.perf_counter() - started) / 60:.1f} min"
        + (" (finished runs reused: train s from their file times)." if args.reuse else "."),
        "",
        f"Final: the best policy's greedy placement (mean and range over seeds). Training episodes: "
        f"mean speed-up of the sampled training episodes over the last 10% of steps; steps until they "
        f"first reach {100 * REACH_FRACTION:.0f}% of the best reference (x{target:.2f}; a seed that never "
        "does counts as the whole run).",
        "",
        markdown_table(summary, [
            ("variant", "variant", ""), ("speedup_mean", "final speed-up", "x"), ("speedup_min", "min", "x"),
            ("speedup_max", "max", "x"), ("train_speedup_last10", "training episodes (last 10%)", "x"),
            ("steps_to_target", "steps to reach", ",.0f"), ("never_reached", "seeds never", "d"),
            ("steps_per_s", "steps/s", ".0f"), ("train_wall_s", "train s", ".0f"),
        ]),  # fmt: skip
        "References on the same instance:",
        "",
        markdown_table(refs, [("method", "method", ""), ("speedup_vs_naive", "speed-up vs naive", "x"),
                              ("decision_s", "seconds", ".2f")]),  # fmt: skip
        "Variants: " + "; ".join(f"`{k}`: {', '.join(v) or 'as shipped'}" for k, v in config["variants"].items()),
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_run_info(out, NAME, argv if argv is not None else [], config, started)
    return out


if __name__ == "__main__":
    import sys

    run_cli(main, sys.argv[1:])
