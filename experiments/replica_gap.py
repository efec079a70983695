"""Where chain layouts fall behind a search on multi-replica validation instances.

    python -m experiments.replica_gap                  # the 100 validation instances' D > 1 ones
    python -m experiments.replica_gap --evals 20000    # anneal's budget (default 20,000)

On every instance of the validation suites (``val-v0``, ``val-x-v0``, ``val-xl-v0``: validation
cities, never trained or tested on) with 4 replicas, or 2 replicas and a model that needs at
least :data:`TIGHT` of the cluster's memory, three placements are timed by the cost model:
``anneal`` at ``--evals`` evaluations (seed 0), ``latency-chain-dp`` and the shipped policy's
greedy decision (``gnn-ppo``). ``gaps.csv`` has one row each (the ratios to anneal's time; below
1 where the method beats it), ``summary.json`` the geometric means.

Why: on memory-tight 4-replica instances every chain layout (shared, blocks, interleaved,
replica groups, mirrored) can fall far behind genetic and anneal. A new layout family must be
designed on validation cases that show that weakness, never on the test suites; this finds them
(``unseen-v0`` and ``unseen-v1`` are never read here).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.common import REPO_ROOT, run_cli, write_run_info

NAME = "replica_gap"
RESULTS = REPO_ROOT / "experiments" / "results" / "gnn-ppo" / "replica_gap"
VALIDATION_SUITES = ("val-v0", "val-x-v0", "val-xl-v0")
TIGHT = 0.3  # memory tightness (model memory / cluster memory) that makes a 2-replica instance count
COLUMNS = ("instance", "machines", "replicas", "model", "memory_tightness", "anneal_s", "chain_dp_s", "decision_s",
           "chain_dp_over_anneal", "decision_over_anneal")  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=20_000, help="anneal's cost evaluations (default 20,000).")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where gaps.csv and summary.json go.")
    return parser.parse_args(argv)


def selected(instance) -> bool:
    """The multi-replica instances this experiment looks at."""
    from hulk_env.feasibility import memory_tightness

    d = instance.data_parallel
    return d >= 4 or (d >= 2 and memory_tightness(instance) >= TIGHT)


def gap_row(instance, evals: int) -> dict:
    """anneal, ``latency-chain-dp`` and the shipped decision on one instance, timed by the cost model."""
    from agents.decision.methods import gnn_ppo
    from hulk_env import cost
    from hulk_env.baselines.anneal import anneal
    from hulk_env.baselines.chain_dp import latency_chain_dp
    from hulk_env.feasibility import memory_tightness

    def time_of(result) -> float:
        return math.inf if result.placement is None else cost.iteration_time(instance.cluster, instance.workload, result.placement)

    searched, chain, decided = time_of(anneal(instance, 0, evals)), time_of(latency_chain_dp(instance)), time_of(gnn_ppo(instance))
    return {
        "instance": instance.instance_id, "machines": instance.num_machines, "replicas": instance.data_parallel,
        "model": instance.workload.name, "memory_tightness": round(float(memory_tightness(instance)), 3),
        "anneal_s": searched, "chain_dp_s": chain, "decision_s": decided,
        "chain_dp_over_anneal": chain / searched, "decision_over_anneal": decided / searched,
    }  # fmt: skip


def geomean(values: list[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def main(argv: list[str] | None = None) -> Path:
    """Time the three placements on every selected validation instance; returns the results dir."""
    started = time.perf_counter()
    args = parse_args(argv)
    from hulk_env.evaluation.suites import load_suite

    rows = []
    for suite in VALIDATION_SUITES:
        for instance in filter(selected, load_suite(suite)):
            rows.append(gap_row(instance, args.evals))
            r = rows[-1]
            print(f"{r['instance']} ({r['machines']} machines, D={r['replicas']}, {r['model']}, tightness {r['memory_tightness']}): "
                  f"chain-dp {r['chain_dp_over_anneal']:.3f}, decision {r['decision_over_anneal']:.3f} of anneal", flush=True)  # fmt: skip
    results = args.results
    results.mkdir(parents=True, exist_ok=True)
    with (results / "gaps.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    summary = {
        "instances": len(rows), "anneal_evals": args.evals,
        "chain_dp_over_anneal_geomean": geomean([r["chain_dp_over_anneal"] for r in rows]),
        "decision_over_anneal_geomean": geomean([r["decision_over_anneal"] for r in rows]),
        "chain_dp_behind_5pct": [r["instance"] for r in rows if r["chain_dp_over_anneal"] > 1.05],
        "decision_behind_chain_dp_5pct": [r["instance"] for r in rows if r["decision_s"] > 1.05 * r["chain_dp_s"]],
    }  # fmt: skip
    (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_run_info(results, NAME, argv if argv is not None else [], vars(args) | {"results": str(results)}, started)
    return results


if __name__ == "__main__":
    import sys

    run_cli(main, sys.argv[1:])
