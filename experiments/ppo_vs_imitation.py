"""Does PPO earn its place after imitation? Every kept checkpoint of one run, judged on validation.

A generalist run with ``eval.keep_policies`` keeps the network of every evaluation as
``RUN/eval/policies/<steps>/`` -- step 0 is imitation alone, the later ones imitation + PPO::

    hulk train --config generalist --set env.completion=split --set train.total_timesteps=24576 \\
        --set eval.eval_every=2048 --set eval.keep_policies=true --set train.name=gen-split
    python -m experiments.ppo_vs_imitation --run runs/gen-split

Each kept network is measured on the 34 validation instances (``val-v0`` and ``val-x-v0``;
never the unseen suites) as :mod:`experiments.expert_iteration` measures its rounds: the
network's own greedy rollout and the shipped decision, each as a geometric-mean gap to
``latency-chain-dp`` (each instance's time measured once, cached in ``OUT/chain_dp.json``; a
failed rollout counts as the naive placement).

Choice rule (declared before the run, the same as expert iteration's): the step with the least
validation rollout gap among those whose decision gap is at most step 0's + ``DECISION_SLACK``.
The issue's bar: PPO cuts the validation rollout gap of imitation alone by at least
``REQUIRED_CUT`` (``ppo_cut`` = 1 - chosen / step 0's).

The least of a noisy curve flatters the step it picks, so step 0 and the chosen step are measured
again on ``--confirm-suite`` (default ``val-xl-v0``: 66 more validation instances that chose
nothing): ``confirmed_cut``. ``cut_met`` needs both cuts at ``REQUIRED_CUT`` or more.
``--fresh-seed N`` also measures them on a draw of ``val-x-v0``'s 22 cases over the validation
cities with seed ``N`` (instances in no suite: a check after settings were compared on the
confirming suite): ``fresh`` and ``fresh_cut`` in the summary.

Writes ``OUT/curve.jsonl`` (one line per step; a rerun measures only the steps not yet in it),
``OUT/summary.json`` (``imitation_rollout_gap``, ``imitation_decision_gap``, ``chosen_steps``,
``chosen_rollout_gap``, ``chosen_decision_gap``, ``ppo_cut``, ``confirm``: the same four gaps on
the confirming suite, ``confirmed_cut``, ``cut_met``) and ``OUT/curves.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.expert_iteration import (
    DECISION_SLACK,
    chain_dp_times,
    choose_round,
    validate,
    validation_instances,
)

NAME = "ppo_vs_imitation"
REQUIRED_CUT = 0.25  # the bar: PPO removes at least this share of imitation's validation rollout gap
CONFIRM_SUITE = "val-xl-v0"  # validation instances the choice never read


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="A run directory trained with eval.keep_policies=true.")
    p.add_argument("--out", type=Path, default=None, help="Output directory (default: RUN/ppo_vs_imitation).")
    p.add_argument("--val-quick", action="store_true", help="Validation instances of at most 128 machines only.")
    p.add_argument("--confirm-suite", default=CONFIRM_SUITE, help="Suite that re-measures step 0 and the chosen step.")
    p.add_argument("--fresh-seed", type=int, default=None, help="Also re-measure on a fresh draw of val-x-v0's cases with this seed.")
    p.add_argument("--steps", type=int, nargs="*", default=None,
                   help="Judge only these kept steps (step 0 always): a coarser curve in less time.")
    return p.parse_args(argv)


def kept_steps(run: Path) -> list[int]:
    """The steps of the policies kept under ``run/eval/policies`` (sorted); one clear error when
    there are none or step 0 (imitation alone) is missing."""
    from agents.training.runs import EVAL_POLICIES_DIR
    from hulk_env.errors import HulkInputError

    folder = run / EVAL_POLICIES_DIR
    steps = sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()) if folder.is_dir() else []
    if not steps or steps[0] != 0:
        raise HulkInputError(
            f"{folder} holds no policy of step 0: train with imitation and eval.keep_policies=true (see this module's doc)",
            field="run",
        )
    return steps


def choose(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """The choice rule of the module docstring: expert iteration's, a step standing for a round
    (ties to the earlier step)."""
    ordered = sorted(curve, key=lambda c: c["steps"])
    steps = choose_round([{"round": c["steps"], "val": c["val"]} for c in ordered])
    return next(c for c in ordered if c["steps"] == steps)


def remeasured(got: dict[str, Any]) -> dict[str, Any]:
    """The summary's record of a :func:`remeasure`: its suite and both steps' two gaps, flat."""
    pairs = {f"{who}_{k}": got[who][k] for who in ("imitation", "chosen") for k in ("rollout_gap", "decision_gap")}
    return {"suite": got["suite"], **pairs}


def cut_of(base: float, got: float) -> float:
    """``1 - got / base``: the share of the rollout gap ``base`` that ``got`` removes (0 when
    there was none to remove)."""
    return 1.0 - got / base if base > 0 else 0.0


def summarize(curve: list[dict[str, Any]], confirm: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summary.json``'s figures (see the module docstring). ``confirm``: ``{"suite",
    "imitation": validate(), "chosen": validate()}`` on the confirming suite, or ``None``
    (then ``cut_met`` rests on the choosing instances alone)."""
    first = min(curve, key=lambda c: c["steps"])
    chosen = choose(curve)
    base, got = first["val"]["rollout_gap"], chosen["val"]["rollout_gap"]
    cut = cut_of(base, got)
    out = {
        "imitation_rollout_gap": base,
        "imitation_decision_gap": first["val"]["decision_gap"],
        "chosen_steps": chosen["steps"],
        "chosen_rollout_gap": got,
        "chosen_decision_gap": chosen["val"]["decision_gap"],
        "ppo_cut": cut,
        "confirm": None,
        "confirmed_cut": None,
        "cut_met": bool(cut >= REQUIRED_CUT),
        "rule": f"least validation rollout gap with decision gap <= step 0's + {DECISION_SLACK}",
    }
    if confirm is not None:
        again = cut_of(confirm["imitation"]["rollout_gap"], confirm["chosen"]["rollout_gap"])
        out["confirm"] = remeasured(confirm)
        out["confirmed_cut"] = again
        out["cut_met"] = bool(cut >= REQUIRED_CUT and again >= REQUIRED_CUT)
    return out


def plot(curve: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["steps"] for c in curve]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(steps, [c["val"]["rollout_gap"] for c in curve], marker="o", label="network's own rollout")
    ax.plot(steps, [c["val"]["decision_gap"] for c in curve], marker="s", label="decision")
    ax.set_xlabel("PPO steps after imitation")
    ax.set_ylabel("gap to latency-chain-dp (geomean)")
    ax.set_title("Validation (val-v0 + val-x-v0)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fresh_instances(seed: int) -> list[Any]:
    """``val-x-v0``'s cases drawn over the validation cities from ``default_rng([seed, i])``,
    named ``val-fresh-<seed>/<i>`` (in no suite)."""
    import numpy as np

    from hulk_env.evaluation.suites import (
        UNSEEN_V0_CASES,
        VALIDATION_CITIES,
        _draw_heldout_instance,
    )

    return [
        _draw_heldout_instance(np.random.default_rng([seed, i]), *case, VALIDATION_CITIES, f"val-fresh-{seed}/{i}")
        for i, case in enumerate(UNSEEN_V0_CASES)
    ]


def remeasure(run: Path, out: Path, name: str, instances: list[Any], steps: tuple[int, int]) -> dict[str, Any]:
    """Step 0 and the chosen step on other ``instances`` (``name``: for the chain-dp cache and
    the log): ``{"suite", "imitation": validate(), "chosen": validate()}``."""
    from agents.decision.inference import single_thread
    from agents.network.saved_policy import load_policy
    from agents.training.runs import EVAL_POLICIES_DIR

    chain = chain_dp_times(instances, out / f"chain_dp-{name}.json")
    got: dict[str, Any] = {"suite": name}
    for who, s in zip(("imitation", "chosen"), steps, strict=True):
        with single_thread():
            got[who] = validate(load_policy(run / EVAL_POLICIES_DIR / str(s)), instances, chain)
        print(f"[{time.strftime('%H:%M:%S')}] {name}, {s} steps: rollout gap {got[who]['rollout_gap']:.4f}, "
              f"decision gap {got[who]['decision_gap']:.4f}", flush=True)  # fmt: skip
    return got


def main(argv: list[str] | None = None) -> Path:
    from agents.decision.inference import single_thread
    from agents.network.saved_policy import load_policy
    from agents.training.runs import EVAL_POLICIES_DIR
    from hulk_env.files import atomic_write_text

    args = parse_args(argv)
    out = args.out or args.run / NAME
    out.mkdir(parents=True, exist_ok=True)
    steps = kept_steps(args.run)
    if args.steps is not None:
        steps = [s for s in steps if s == 0 or s in set(args.steps)]
    val = validation_instances(args.val_quick)
    chain_dp = chain_dp_times(val, out / "chain_dp.json")
    curve_path = out / "curve.jsonl"
    curve = [json.loads(line) for line in curve_path.read_text().splitlines()] if curve_path.is_file() else []
    done = {c["steps"] for c in curve}
    for s in steps:
        if s in done:
            continue
        t0 = time.perf_counter()
        with single_thread():
            v = validate(load_policy(args.run / EVAL_POLICIES_DIR / str(s)), val, chain_dp)
        curve.append({"steps": s, "val": v, "wall_s": round(time.perf_counter() - t0, 1)})
        curve.sort(key=lambda c: c["steps"])
        atomic_write_text(curve_path, "".join(json.dumps(c) + "\n" for c in curve))
        print(f"[{time.strftime('%H:%M:%S')}] {s} steps: val rollout gap {v['rollout_gap']:.4f}, "
              f"decision gap {v['decision_gap']:.4f}", flush=True)  # fmt: skip
    pair = (0, choose(curve)["steps"])
    confirm = None
    if args.confirm_suite:
        from hulk_env.evaluation.suites import load_suite

        confirm = remeasure(args.run, out, args.confirm_suite, load_suite(args.confirm_suite), pair)
    summary = summarize(curve, confirm)
    if args.fresh_seed is not None:
        fresh = remeasure(args.run, out, f"val-fresh-{args.fresh_seed}", fresh_instances(args.fresh_seed), pair)
        summary["fresh"] = remeasured(fresh)
        summary["fresh_cut"] = cut_of(fresh["imitation"]["rollout_gap"], fresh["chosen"]["rollout_gap"])
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    plot(curve, out / "curves.png")
    print(json.dumps(summary, indent=1))
    return out


if __name__ == "__main__":
    main()
