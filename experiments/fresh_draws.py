"""Held-out judgement on fresh draws: does the shipped agent do on new draws of the unseen cities
what it does on the two test suites in the repository?

``hulk bench agent`` reports gaps to cached 50,000-evaluation searches, which exist only for
``unseen-v0`` and ``unseen-v1``. Here every suite is measured against ``latency-chain-dp`` (run
here, a few seconds per instance), so suites drawn now -- ``unseen-v0``'s 22 cases over the
unseen cities again, from seeds that are not in the repository -- can be compared with the
repository's two on the same footing:

* ``decision_gap``: ``gnn-ppo``'s greedy decision (geometric mean of ``T / T_chain_dp``, minus 1);
* ``rollout_gap``: the network's own greedy rollout, the same way;
* ``heuristic_starts_gap``: the decision with starts ranked by peak FLOP/s (no network).

A failed placement counts as the naive placement. Nothing here chooses a setting: it only
measures.

    python -m experiments.fresh_draws --seeds 20301 20302

Writes ``OUT/fresh_draws.json`` (per suite: the three gaps and per-instance figures).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import REPO_ROOT

NAME = "fresh_draws"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "experiments" / NAME)
    p.add_argument("--seeds", type=int, nargs="+", default=[20301, 20302], help="Seeds of the fresh draws (not the suites').")
    p.add_argument("--max-machines", type=int, default=512, help="Leave out cases above this size (faster runs).")
    return p.parse_args(argv)


def fresh_suite(seed: int, max_machines: int) -> list[Any]:
    """``unseen-v0``'s cases drawn over the unseen cities from ``seed``."""
    from hulk_env.evaluation.suites import UNSEEN_CITIES, UNSEEN_V0_CASES, _heldout_suite

    cases = tuple(c for c in UNSEEN_V0_CASES if c[0] <= max_machines)
    return _heldout_suite(cases, seed, UNSEEN_CITIES, f"fresh-{seed}")


def time_or_naive(instance: Any, placement: Any) -> float:
    """The cost model's iteration time of ``placement``, the naive placement's where it is ``None``."""
    from hulk_env import cost
    from hulk_env.reference import naive_placement

    p = naive_placement(instance) if placement is None else placement
    return float(cost.iteration_time(instance.cluster, instance.workload, p))


def measure(instances: list[Any]) -> dict[str, Any]:
    """The three gaps to ``latency-chain-dp`` over ``instances`` (see the module docstring)."""
    from agents.decision.inference import policy_placement, single_thread
    from agents.decision.methods import pretrained_policy
    from agents.decision.start_ranker import PeakFlopsRanker
    from hulk_env.baselines import get_method

    loaded = pretrained_policy()
    flops = loaded._replace(ranker=PeakFlopsRanker())
    logs: dict[str, list[float]] = {"decision_gap": [], "rollout_gap": [], "heuristic_starts_gap": []}
    per: dict[str, dict[str, float]] = {}
    for inst in instances:
        with single_thread():
            ref = time_or_naive(inst, get_method("latency-chain-dp")(inst, 0, None).placement)
            times = {
                "decision_gap": time_or_naive(inst, policy_placement(loaded, inst).placement),
                "rollout_gap": time_or_naive(inst, policy_placement(loaded, inst, rollout_only=True).placement),
                "heuristic_starts_gap": time_or_naive(inst, policy_placement(flops, inst).placement),
            }
        for key, t in times.items():
            logs[key].append(math.log(t / ref))
        per[inst.instance_id] = {k: round(t / ref - 1, 4) for k, t in times.items()}
        print(f"{inst.instance_id} ({inst.num_machines} machines, D={inst.data_parallel}): "
              + ", ".join(f"{k} {v:+.3f}" for k, v in per[inst.instance_id].items()), flush=True)  # fmt: skip
    gaps = {k: round(math.exp(float(np.mean(v))) - 1, 4) for k, v in logs.items()}
    return {**gaps, "instances": len(instances), "per_instance": per}


def main(argv: list[str] | None = None) -> Path:
    from hulk_env.evaluation.suites import load_suite
    from hulk_env.files import atomic_write_text

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    suites = {name: [i for i in load_suite(name) if i.num_machines <= args.max_machines] for name in ("unseen-v0", "unseen-v1")}
    suites |= {f"fresh-{s}": fresh_suite(s, args.max_machines) for s in args.seeds}
    out: dict[str, Any] = {}
    for name, instances in suites.items():
        out[name] = measure(instances)
        print(f"{name}: " + ", ".join(f"{k} {out[name][k]:+.4f}" for k in ("decision_gap", "rollout_gap", "heuristic_starts_gap")), flush=True)
        atomic_write_text(args.out / "fresh_draws.json", json.dumps(out, indent=1) + "\n")
    out["wall_s"] = round(time.perf_counter() - started, 1)
    atomic_write_text(args.out / "fresh_draws.json", json.dumps(out, indent=1) + "\n")
    return args.out


if __name__ == "__main__":
    main()
