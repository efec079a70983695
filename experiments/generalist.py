"""The shipped generalist policy (``gnn-ppo``): train it, draw its learning curves, ship it.

One command reproduces the policy in ``agents/pretrained/gnn-ppo/`` (seeded: same command, same
weights on the same machine and versions):

    python -m experiments.generalist --ship          # train, plot, copy into the package
    python -m experiments.generalist --reuse --ship  # reuse a finished run in OUT/policy

Training is ``hulk train --config generalist`` (``agents/configs/generalist.yaml``: imitation
of the strongest fast baselines on the training distribution, then masked PPO, checkpoints
chosen on ``val-v0``). The figure ``curves.png`` (behaviour cloning per epoch, validation
speed-up and training episodes per PPO step) and copies of the run's logs go to
``experiments/results/gnn-ppo/``; ``--ship`` copies the best policy (weights and
``policy.json``), the resolved config and a ``TRAINING.md`` (the command, the figures) into
``agents/pretrained/gnn-ppo/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.common import REPO_ROOT, prepare_out_dir, run_cli, write_run_info

NAME = "generalist"
RESULTS = REPO_ROOT / "experiments" / "results" / "gnn-ppo"
COMMAND = "python -m experiments.generalist --ship"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"Output directory (default runs/experiments/{NAME}).")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="Training config override section.key=value (repeatable).")
    parser.add_argument("--reuse", action="store_true", help="Reuse a finished training run in OUT/policy.")
    parser.add_argument("--ship", action="store_true", help="Copy the best policy into agents/pretrained/gnn-ppo.")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where the figure and logs go.")
    return parser.parse_args(argv)


def read_rows(path: Path) -> list[dict[str, float]]:
    """A numeric CSV as rows (``[]`` when the file is missing)."""
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def curves_figure(run_dir: Path):
    """Behaviour cloning (cross-entropy, accuracy per epoch), then PPO (validation and training
    episodes' geometric-mean speed-up over naive per step)."""
    from hulk_env.render import pyplot

    plt = pyplot()
    bc = read_rows(run_dir / "eval" / "imitation.csv")
    val = read_rows(run_dir / "eval" / "evaluations.csv")
    fig, (ax_bc, ax_ppo) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=100)
    if bc:
        epochs = list(range(1, len(bc) + 1))  # cumulative over the DAgger rounds
        ax_bc.plot(epochs, [r["cross_entropy"] for r in bc], "o-", ms=3, label="cross-entropy of the demonstrated machine")
        ax_acc = ax_bc.twinx()
        ax_acc.plot(epochs, [r["accuracy"] for r in bc], "s-", ms=3, color="C1", label="accuracy (masked argmax)")
        ax_acc.set_ylabel("accuracy")
        handles = ax_bc.get_legend_handles_labels()[0] + ax_acc.get_legend_handles_labels()[0]
        ax_bc.legend(handles, [h.get_label() for h in handles], loc="upper center", bbox_to_anchor=(0.5, -0.16),
                     ncol=2, fontsize=8)  # fmt: skip
    for i in range(1, len(bc)):
        if bc[i].get("round", 0) != bc[i - 1].get("round", 0):
            ax_bc.axvline(i + 0.5, color="0.7", ls="--", lw=0.8)  # a DAgger round starts
    ax_bc.set_xlabel("behaviour-cloning epoch (dashed: DAgger round)")
    ax_bc.set_ylabel("cross-entropy")
    ax_bc.set_title("1. imitation of the best fast baseline", fontsize=9)
    if val:
        ax_ppo.plot([r["timesteps"] for r in val], [r["mean_speedup"] for r in val], "o-", label="val-v0 (greedy decision)")
        if "rollout_speedup" in val[0]:  # runs before the column existed have only the decision
            ax_ppo.plot([r["timesteps"] for r in val], [r["rollout_speedup"] for r in val], "s--", ms=3,
                        label="val-v0 (the network's own greedy rollout)")  # fmt: skip
    try:
        from agents.training.tb_curves import read_curves

        for c in read_curves(run_dir):
            if c.tag == "placement/speedup_vs_naive":
                ax_ppo.plot(c.steps, c.values, alpha=0.6, label="training episodes (sampled)")
    except Exception:  # noqa: BLE001 - a run without TensorBoard logs still gets the validation curve
        pass
    ax_ppo.set_xlabel("PPO steps (0 = after imitation)")
    ax_ppo.set_ylabel("geometric-mean speed-up over naive")
    ax_ppo.set_yscale("log")
    ax_ppo.legend(fontsize=8)
    ax_ppo.set_title("2. masked PPO fine-tuning; checkpoints chosen on val-v0", fontsize=9)
    fig.tight_layout()
    return fig


def train_run(args: argparse.Namespace, out: Path) -> Path:
    from agents.training.config import load_config
    from agents.training.train import train

    config = load_config("generalist", [*args.overrides, f"train.out={out}", "train.name=policy"])
    return train(config, label=NAME)


def ship(run_dir: Path, target: Path, summary: dict[str, Any]) -> Path:
    """Copy the run's best policy, config and provenance into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("policy.json", "weights.pt"):
        shutil.copyfile(run_dir / "best_policy" / name, target / name)
    shutil.copyfile(run_dir / "config.yaml", target / "config.yaml")
    lines = [
        "# gnn-ppo: the pretrained generalist placement policy",
        "",
        f"Produced by `{COMMAND}` (training: `hulk train --config generalist`, seed 0).",
        "",
        "```json",
        json.dumps(summary, indent=2),
        "```",
        "",
        "Files: `policy.json` + `weights.pt` (weights only, loaded with `torch.load(weights_only=True)`),",
        "`config.yaml` (the resolved training config). Learning curves: `experiments/results/gnn-ppo/curves.png`.",
    ]
    (target / "TRAINING.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> Path:
    """Train (or reuse), plot, and optionally ship; returns the results directory."""
    started = time.perf_counter()
    args = parse_args(argv)
    out = prepare_out_dir(args.out, NAME)
    run_dir = out / "policy"
    if not (args.reuse and (run_dir / "best_policy" / "policy.json").is_file()):
        run_dir = train_run(args, out)
    from hulk_env.render import save_figure

    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    save_figure(curves_figure(run_dir), results / "curves.png")
    for name in ("evaluations.csv", "imitation.csv", "imitation.json"):
        if (run_dir / "eval" / name).is_file():
            shutil.copyfile(run_dir / "eval" / name, results / name)
    best = json.loads((run_dir / "best_policy" / "policy.json").read_text())
    imitation = run_dir / "eval" / "imitation.json"
    summary = {
        "best_policy_steps": best.get("num_timesteps"),
        "val_v0_geomean_speedup_vs_naive": round(math.exp(float(best.get("mean_reward", 0.0))), 4),
        "imitation": json.loads(imitation.read_text()) if imitation.is_file() else None,
        # from the run's first file to its final policy (the run may come from --reuse)
        "training_wall_s": round((run_dir / "policy" / "policy.json").stat().st_mtime
                                 - (run_dir / "config.yaml").stat().st_mtime, 1),
    }  # fmt: skip
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.ship:
        from agents.decision.methods import PRETRAINED_DIR

        ship(run_dir, PRETRAINED_DIR, summary)
    write_run_info(results, NAME, argv if argv is not None else [], {"overrides": args.overrides}, started)
    return results


if __name__ == "__main__":
    import sys

    run_cli(main, sys.argv[1:])
