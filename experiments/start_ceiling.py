"""How much can any start ranking win? The decision from the network's, the FLOP/s and every start.

``hulk bench agent`` compares the shipped decision (stage-DP plans from the network's 8 + 4 start
machines) with the same decision from starts ranked by peak FLOP/s. The decision's candidates
are a union over its starts, so the decision from *every* allowed start bounds what any ranking
can reach (:func:`agents.benchmarks.bench_agent.every_start`). On the validation suites
(``val-v0``, ``val-x-v0``, ``val-xl-v0``: 100 instances over the validation cities; never the
unseen ones) this measures, per instance, ``latency-chain-dp``'s time and those three decisions'
times, and their geometric-mean gaps to ``latency-chain-dp``::

    python -m experiments.start_ceiling --out runs/experiments/start_ceiling [--part 0 --parts 2]

``--part K --parts N`` measures every N-th instance from the K-th (to spread the work over
processes); ``--summarize`` prints the gaps of all ``rows-*.jsonl`` in ``OUT``. Rows:
``OUT/rows-<K>-of-<N>.jsonl`` (a rerun skips the instances already there). Figures:
``experiments/results/gnn-ppo/start_ceiling/``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.common import REPO_ROOT
from experiments.expert_iteration import geomean_gap

NAME = "start_ceiling"
SUITES = ("val-v0", "val-x-v0", "val-xl-v0")
DECISIONS = ("network", "flops", "every_start")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "experiments" / NAME)
    p.add_argument("--part", type=int, default=0)
    p.add_argument("--parts", type=int, default=1)
    p.add_argument("--summarize", action="store_true", help="Only print the gaps of the rows in OUT.")
    return p.parse_args(argv)


def measure(instance: Any) -> dict[str, Any]:
    """One instance's row: ``latency-chain-dp``'s time and the three decisions' (seconds; ``inf``
    where a method found no placement) and wall seconds."""
    from agents.benchmarks.bench_agent import every_start, flops_starts
    from agents.decision.inference import policy_placement
    from agents.decision.methods import pretrained_policy
    from hulk_env import cost
    from hulk_env.baselines import get_method

    shipped = pretrained_policy()
    runs = {
        "chain_dp": lambda: get_method("latency-chain-dp")(instance, 0, None),
        "network": lambda: policy_placement(shipped, instance),
        "flops": lambda: policy_placement(flops_starts(shipped), instance),
        "every_start": lambda: every_start(shipped, instance),
    }
    row: dict[str, Any] = {"id": instance.instance_id, "machines": instance.num_machines, "replicas": instance.data_parallel}
    for name, run in runs.items():
        t0 = time.perf_counter()
        result = run()
        row[f"{name}_wall_s"] = round(time.perf_counter() - t0, 3)
        placed = result.placement is not None
        row[name] = float(cost.iteration_time(instance.cluster, instance.workload, result.placement)) if placed else math.inf
    return row


def gaps(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each decision's geometric-mean gap to ``latency-chain-dp`` over ``rows``."""
    return {d: geomean_gap([r[d] for r in rows], [r["chain_dp"] for r in rows]) for d in DECISIONS}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per suite and over all rows: the gaps, the ceiling's lead over the FLOP/s starts and the
    network's (points of gap)."""
    out: dict[str, Any] = {}
    for suite in (*SUITES, "all"):
        chosen = [r for r in rows if suite == "all" or r["id"].rsplit("/", 1)[0] == suite]
        if not chosen:
            continue
        g = gaps(chosen)
        out[suite] = {
            "instances": len(chosen),
            **{f"{d}_gap_geomean": round(v, 5) for d, v in g.items()},
            "ceiling_points_below_flops": round(100 * (g["flops"] - g["every_start"]), 2),
            "network_points_below_flops": round(100 * (g["flops"] - g["network"]), 2),
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from hulk_env.evaluation.suites import load_suite

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.summarize:
        path = args.out / f"rows-{args.part}-of-{args.parts}.jsonl"
        done = {json.loads(line)["id"] for line in path.read_text().splitlines()} if path.is_file() else set()
        instances = [i for s in SUITES for i in load_suite(s)]
        with path.open("a") as f:
            for k, inst in enumerate(instances):
                if k % args.parts != args.part or inst.instance_id in done:
                    continue
                row = measure(inst)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps(row), flush=True)
    rows = [json.loads(line) for p in sorted(args.out.glob("rows-*.jsonl")) for line in p.read_text().splitlines()]
    result = summary(rows)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
