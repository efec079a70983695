"""Where the shipped policy's decision should start: every start's plan, the settings, a ranker.

    python -m experiments.start_ranker            # label, compare start settings, train a ranker
    python -m experiments.start_ranker --ship     # ... and ship the ranker if it beat the policy

1. Labels (:mod:`agents.decision.start_ranker`): the plan time from every allowed first-slot machine of
   ``--instances`` draws of the training distribution (training cities only), and of the
   validation suites ``val-v0``, ``val-x-v0`` and ``val-xl-v0`` (validation cities, 100
   instances). Cached as JSON in ``OUT`` (``--reuse`` reads them back, one file per suite):
   labelling is most of the time.
2. Start settings (``settings.csv``): for the policy's own first-slot ranking, how far the
   best plan among the decision's starts is from the best of every start's (geometric mean of
   the ratio), for several first-round counts, second rounds in the best region and starts by
   the bottleneck bound (:func:`agents.decision.inference.choose_starts`), on training and validation
   labels (all 100, the first 34 alone, ``val-xl-v0`` alone). What chose
   :data:`agents.decision.inference.REFINE_STARTS`.
3. A ranker: a copy of the shipped policy's network, its first-slot logits fine-tuned with
   ListNet's loss for ``--epochs`` epochs; the epoch with the least validation regret of the
   decision's starts is kept (epoch 0 -- the policy's own ranking -- included).
4. ``--ship``: the ranker goes into the package beside the policy, with ``TRAINING.json`` --
   only when a trained epoch beat the policy's own ranking on validation by
   :data:`SHIP_MIN_GAIN` (so far none has).

Figures and logs: ``experiments/results/gnn-ppo/start_ranker/`` (``settings.csv``,
``history.csv``, ``curves.png``, ``summary.json``). ``unseen-v0`` is never read here.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.common import REPO_ROOT, prepare_out_dir, run_cli, write_run_info

NAME = "start_ranker"
RESULTS = REPO_ROOT / "experiments" / "results" / "gnn-ppo" / "start_ranker"
COMMAND = "python -m experiments.start_ranker --ship"
VALIDATION_SUITES = ("val-v0", "val-x-v0", "val-xl-v0")
# The start-settings table also reports the first two alone (34 instances: what chose the
# settings before val-xl-v0) and val-xl-v0 alone (66), to show how far such small sets agree.
FIRST_VALIDATION = ("val-v0", "val-x-v0")
# A ranker ships only if its validation regret of the decision's starts is this much below the
# policy's own (a mean log ratio: 0.5%); smaller differences are within an epoch's noise here.
SHIP_MIN_GAIN = 0.005
# (the network's starts, second-round starts in the best region, starts by the bottleneck bound)
# compared in settings.csv
SETTINGS = (
    (4, 0, 0), (6, 0, 0), (8, 0, 0), (12, 0, 0), (4, 1, 0), (4, 2, 0), (4, 4, 0), (6, 2, 0),
    (0, 0, 6), (2, 0, 4), (3, 0, 3), (4, 0, 2), (3, 2, 3), (4, 0, 4),
)  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"Output directory (default runs/experiments/{NAME}).")
    parser.add_argument("--instances", type=int, default=300, help="Training instances to label (default 300).")
    parser.add_argument("--epochs", type=int, default=20, help="Training epochs (default 20).")
    parser.add_argument("--lr", type=float, default=3e-4, help="Adam learning rate (default 3e-4).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the instance draws and the training order.")
    parser.add_argument("--workers", type=int, default=2, help="Labelling processes (default 2).")
    parser.add_argument("--reuse", action="store_true", help="Reuse the labels cached in OUT.")
    parser.add_argument("--ship", action="store_true", help="Copy the ranker into agents/pretrained/gnn-ppo/start_ranker.")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where the figure and logs go.")
    return parser.parse_args(argv)


def cached_labels(path: Path, reuse: bool, make) -> list:
    """Labels from ``path`` when reusing and present, else made and written there."""
    from agents.decision.start_ranker import labels_from_json, labels_to_json

    if reuse and path.is_file():
        return labels_from_json(json.loads(path.read_text(encoding="utf-8")))
    labels = make()
    path.write_text(json.dumps(labels_to_json(labels)) + "\n", encoding="utf-8")
    return labels


def settings_rows(network, samples_by_set: dict[str, list]) -> list[dict[str, Any]]:
    """Per start setting and label set: the geometric-mean ratio of the best chosen start's plan
    to the best of every start's, and the mean number of starts (plans) it builds."""
    import math

    import numpy as np
    import torch

    from agents.decision.start_ranker import regret, start_scores, top_starts

    rows = []
    for name, samples in samples_by_set.items():
        with torch.no_grad():
            scored = [(start_scores(network, s.obs, s.mask).numpy(), s) for s in samples]
        for k, refine, bound in SETTINGS:
            regrets = [regret(sc, s.times_s, s.regions, k, refine, s.bounded, bound) for sc, s in scored]
            plans = [len(top_starts(sc, s.regions, k, refine, s.times_s, s.bounded, bound)) for sc, s in scored]
            rows.append({"labels": name, "starts": k, "refine": refine, "bound_starts": bound, "instances": len(samples),
                         "ratio_to_every_start_geomean": round(math.exp(float(np.mean(regrets))), 4),
                         "plans_mean": round(float(np.mean(plans)), 2)})  # fmt: skip
    return rows


def curves_figure(history: list[dict[str, Any]], best_epoch: int):
    """Training loss and validation regrets per epoch."""
    from hulk_env.render import pyplot

    plt = pyplot()
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 3.6))
    epochs = [r["epoch"] for r in history]
    ax_loss.plot(epochs[1:], [r["train_loss"] for r in history[1:]], "o-")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("ListNet cross-entropy (training)")
    for key in [k for k in history[0] if k.startswith("val_regret_")]:
        ax_val.plot(epochs, [r[key] for r in history], "o-", label=key.replace("val_regret_", ""))
    ax_val.axvline(best_epoch, color="grey", linestyle=":", label=f"kept: epoch {best_epoch}")
    ax_val.set_xlabel("epoch (0: the policy's own logits)")
    ax_val.set_ylabel("mean log(best top-k plan / best plan)")
    ax_val.set_title("validation (val-v0 + val-x-v0)", fontsize=9)
    ax_val.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> Path:
    """Label, train and optionally ship; returns the results directory."""
    started = time.perf_counter()
    args = parse_args(argv)
    out = prepare_out_dir(args.out, NAME)

    from agents.decision.methods import PRETRAINED_DIR, pretrained_policy
    from agents.decision.start_ranker import (
        collect_labels,
        ranker_sample,
        suite_labels,
        train_ranker,
    )
    from agents.network.saved_policy import RANKER_DIR, lookahead_of, plan_of, save_policy
    from agents.training.distribution import GeneralistGenerator
    from hulk_env.evaluation.suites import load_suite
    from hulk_env.feasibility import Padding
    from hulk_env.render import save_figure

    def log(line: str) -> None:
        print(line, flush=True)

    t0 = time.perf_counter()
    train_labels = cached_labels(
        out / "train_labels.json", args.reuse, lambda: collect_labels(args.instances, args.seed, args.workers, log=log)
    )
    validation = [inst for suite in VALIDATION_SUITES for inst in load_suite(suite)]
    val_labels = [
        lab
        for suite in VALIDATION_SUITES
        for lab in cached_labels(out / f"val_labels_{suite}.json", args.reuse, lambda suite=suite: suite_labels(suite, args.workers))
    ]
    labelling_s = time.perf_counter() - t0
    log(f"labels: {len(train_labels)} training, {len(val_labels)} validation instances ({labelling_s:.0f} s)")

    loaded = pretrained_policy()
    look, plan = lookahead_of(loaded.meta), plan_of(loaded.meta)
    generator = GeneralistGenerator()
    train = [ranker_sample(generator.instance(lab.key), lab, plan, look) for lab in train_labels]
    val = [ranker_sample(inst, lab, plan, look) for inst, lab in zip(validation, val_labels, strict=True)]
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    first = [v for v in val if v.instance_id.split("/")[0] in FIRST_VALIDATION]
    later = [v for v in val if v.instance_id.split("/")[0] not in FIRST_VALIDATION]
    settings = settings_rows(loaded.policy, {"training": train, "validation": val, "validation-34": first, "val-xl-v0": later})
    with open(results / "settings.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(settings[0]))
        writer.writeheader()
        writer.writerows(settings)
    for row in settings:
        log(f"{row['labels']}: {row['starts']} starts + {row['bound_starts']} by the bound + {row['refine']} in the best region: "
            f"{row['ratio_to_every_start_geomean']:.4f} of every start's best, {row['plans_mean']:.1f} plans")  # fmt: skip

    t0 = time.perf_counter()
    trained = train_ranker(loaded.policy, train, val, epochs=args.epochs, lr=args.lr, seed=args.seed, log=log)
    training_s = time.perf_counter() - t0

    with open(results / "history.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(trained.history[0]))
        writer.writeheader()
        writer.writerows(trained.history)
    save_figure(curves_figure(trained.history, trained.best_epoch), results / "curves.png")
    gain = trained.history[0]["val_regret_decision"] - trained.history[trained.best_epoch]["val_regret_decision"]
    summary = {
        "command": COMMAND,
        "training_instances": len(train),
        "validation_instances": len(val),
        "validation_suites": list(VALIDATION_SUITES),
        "epochs": args.epochs,
        "lr": args.lr,
        "seed": args.seed,
        "best_epoch": trained.best_epoch,
        "validation_gain": gain,
        "shipped": bool(args.ship and gain >= SHIP_MIN_GAIN),
        "validation_at_best": trained.history[trained.best_epoch],
        "validation_before": trained.history[0],
        "labelling_s": round(labelling_s, 1),
        "training_s": round(training_s, 1),
    }
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    saved = save_policy(
        trained.network, out / RANKER_DIR, policy_config=loaded.meta["policy"],
        padding=Padding(**loaded.meta["padding"]), lookahead=look, plan=plan,
    )  # fmt: skip
    (saved / "TRAINING.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.ship and gain < SHIP_MIN_GAIN:
        log(f"not shipped: the best epoch's validation regret is {gain:.4f} below the policy's own (< {SHIP_MIN_GAIN})")
    elif args.ship:
        target = PRETRAINED_DIR / RANKER_DIR
        target.mkdir(parents=True, exist_ok=True)
        for name in ("weights.pt", "TRAINING.json", "policy.json"):  # policy.json last: complete weights first
            shutil.copyfile(saved / name, target / name)
    write_run_info(results, NAME, argv if argv is not None else [], vars(args) | {"out": str(out), "results": str(results)}, started)
    return results


if __name__ == "__main__":
    import sys

    run_cli(main, sys.argv[1:])
