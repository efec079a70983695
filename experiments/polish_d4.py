"""`gnn-ppo+search` with and without its multi-replica start families, on validation instances.

    python -m experiments.polish_d4 --reference val-xl-v0/49 ...   # genetic + anneal at 50k (appends)
    python -m experiments.polish_d4 val-xl-v0/49 val-xl-v0/35 ...  # the polish, new vs without the families

The families (chains over the fast machines, ``hulk_env.baselines.fast_chains``; region-aligned
replicas, ``hulk_env.baselines.region_aligned``) are switched off by setting their budget shares
(``agents.decision.methods.FAST_SHARE``, ``REGION_SHARE``) to 0, which is the polish as it was
before them. Only validation instances (``val-*``): the reported suites are never read here.
The reference (best of ``genetic`` and ``anneal`` at 50,000 evaluations, seed 0, as the shipped
search references) goes to ``results/gnn-ppo/polish_d4/reference_*.jsonl``, one line per search.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.common import REPO_ROOT

RESULTS = REPO_ROOT / "experiments" / "results" / "gnn-ppo" / "polish_d4"
REFERENCE_BUDGET = 50_000


def reference(specs: Sequence[str], out: Path) -> None:
    """Append genetic's and anneal's 50k-evaluation results on each instance to ``out``."""
    from hulk_env.evaluation.search_reference import run_search
    from hulk_env.evaluation.suites import suite_instance

    for spec in specs:
        inst = suite_instance(*_split(spec))
        for method in ("anneal", "genetic"):
            start = time.perf_counter()
            r = run_search(inst, method, REFERENCE_BUDGET)
            row = {"instance": spec, "method": method, "iteration_time_s": r.iteration_time_s, "cost_evals": r.cost_evals,
                   "wall_s": time.perf_counter() - start, "placement": r.placement}  # fmt: skip
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(spec, method, r.iteration_time_s, flush=True)


def best_reference() -> dict[str, float]:
    """The fastest reference time per instance over every ``reference_*.jsonl``."""
    best: dict[str, float] = {}
    for path in sorted(RESULTS.glob("reference_*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if math.isfinite(r["iteration_time_s"]):
                best[r["instance"]] = min(best.get(r["instance"], math.inf), r["iteration_time_s"])
    return best


def compare(specs: Sequence[str]) -> list[dict]:
    """The polish's time and evaluations on each instance, with and without the families."""
    import agents.decision.methods as methods
    from hulk_env import cost
    from hulk_env.evaluation.suites import suite_instance

    ref = best_reference()
    shares = {"FAST_SHARE": methods.FAST_SHARE, "REGION_SHARE": methods.REGION_SHARE}
    rows = []
    for spec in specs:
        inst = suite_instance(*_split(spec))
        row: dict = {"instance": spec, "reference_s": ref.get(spec, math.nan)}
        for variant, values in (("without", dict.fromkeys(shares, 0.0)), ("new", shares)):
            for name, value in values.items():
                setattr(methods, name, value)
            r = methods.gnn_ppo_search(inst, 0)
            row[f"{variant}_s"] = cost.iteration_time(inst.cluster, inst.workload, r.placement)
            row[f"{variant}_evals"] = r.cost_evals
        for name, value in shares.items():
            setattr(methods, name, value)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _split(spec: str) -> tuple[str, int]:
    suite, index = spec.rsplit("/", 1)
    if not suite.startswith("val"):
        raise SystemExit(f"{spec}: validation instances only (val-*)")
    return suite, int(index)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.polish_d4", description=__doc__.splitlines()[0])
    parser.add_argument("instances", nargs="+", help="validation instances, e.g. val-xl-v0/49")
    parser.add_argument("--reference", action="store_true", help="compute the 50k-evaluation searches instead")
    parser.add_argument("--out", type=Path, default=RESULTS / "reference_extra.jsonl")
    args = parser.parse_args(argv)
    if args.reference:
        reference(args.instances, args.out)
    else:
        compare(args.instances)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
