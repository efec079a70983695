"""The leaderboard: methods ranked by instances solved, then by geometric-mean speed-up."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hulk_env.evaluation.results import ResultRow
from hulk_env.evaluation.stats import geometric_mean


def leaderboard(rows: Sequence[ResultRow]) -> list[dict]:
    """One entry per method: most instances solved first, then best geometric-mean speed-up.

    A method that fails an instance ranks below every method that solved more, whatever its
    speed-ups on the rest; the instances it did not solve are listed, never dropped.

    Keys: ``rank``, ``method``, ``geomean_speedup_vs_naive`` (over the instances both it and
    naive solved), ``mean_gap_to_best``, ``best_on`` (instances where it matched the best within
    1e-9), ``solved``, ``instances``, ``unsolved`` (ids of the instances it did not solve),
    ``mean_cost_evals``, ``total_wall_s``.
    """
    by_method: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_method.setdefault(r.method, []).append(r)
    entries = []
    for name, rs in by_method.items():
        gaps = [r.gap_to_best for r in rs if r.feasible]
        entries.append(
            {
                "method": name,
                "geomean_speedup_vs_naive": geometric_mean([r.speedup_vs_naive for r in rs]),
                "mean_gap_to_best": float(np.mean(gaps)) if gaps else math.nan,
                "best_on": sum(1 for g in gaps if g <= 1e-9),
                "solved": len(gaps),
                "instances": len(rs),
                "unsolved": [r.instance for r in rs if not r.feasible],
                "mean_cost_evals": float(np.mean([r.cost_evals for r in rs])),
                "total_wall_s": float(sum(r.wall_s for r in rs)),
            }
        )
    entries.sort(key=lambda e: (-e["solved"], -_or(e["geomean_speedup_vs_naive"], -math.inf), e["method"]))
    return [{"rank": i, **e} for i, e in enumerate(entries, 1)]


def _or(value: float, default: float) -> float:
    return default if math.isnan(value) else value


def summary_markdown(rows: Sequence[ResultRow], title: str = "Leaderboard") -> str:
    """The leaderboard as a Markdown table (CompilerGym style), then every unsolved instance."""
    board = leaderboard(rows)
    n_instances = len({r.instance for r in rows})
    lines = [
        f"# {title}",
        "",
        f"{n_instances} instance(s). Ranked by instances solved, then by speed-up = naive iteration "
        "time / method iteration time (geometric mean over the instances both solved); gap = time / "
        "best method's time - 1.",
        "",
        "| Rank | Method | Geomean speed-up vs naive | Mean gap to best | Best on | Solved | Mean cost evals | Wall time (s) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for e in board:
        lines.append(
            f"| {e['rank']} | {e['method']} | {_fmt(e['geomean_speedup_vs_naive'], '.3f')}x | "
            f"{_fmt(100 * e['mean_gap_to_best'], '.2f')}% | {e['best_on']} | {e['solved']}/{e['instances']} | "
            f"{e['mean_cost_evals']:,.0f} | {e['total_wall_s']:.1f} |"
        )
    failed = [r for r in rows if not r.feasible]
    if failed:
        lines += ["", "Not solved (no speed-up counted for these):", ""]
        lines += [f"- {r.method} on {r.instance}: {r.reason or 'no feasible placement'}" for r in failed]
    return "\n".join(lines) + "\n"


def _fmt(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)
