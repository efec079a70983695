"""Leaderboard figures: speed-up over naive per method, and per instance and method."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.evaluation.stats import geometric_summary
from hulk_env.render.common import log_speedup_axis, pyplot


def _row_value(row, key: str):
    """A field of a result row (object or mapping); a missing speed-up counts as undefined."""
    if isinstance(row, Mapping):
        return row.get(key, math.nan) if key == "speedup_vs_naive" else row[key]
    return getattr(row, key)


def speedup_summary(rows: Sequence) -> list[dict]:
    """Per method, most instances solved first, then best geometric mean: ``method``,
    ``geomean``, ``low``, ``high`` (one geometric standard error either side), ``speedups``
    (finite positive values), ``n`` (how many: the instances solved), ``instances``.

    ``rows`` are :class:`hulk_env.evaluation.ResultRow` or mappings with ``instance``,
    ``method`` and ``speedup_vs_naive`` (e.g. from :func:`hulk_env.evaluation.read_results_csv`).
    """
    by_method: dict[str, list[float]] = {}
    for row in rows:
        by_method.setdefault(str(_row_value(row, "method")), []).append(float(_row_value(row, "speedup_vs_naive")))
    out = []
    for method, values in by_method.items():
        solved = [v for v in values if math.isfinite(v) and v > 0]
        g = geometric_summary(solved)
        out.append({"method": method, "geomean": g.geomean, "low": g.low, "high": g.high, "speedups": solved,
                    "n": g.n, "instances": len(values)})
    out.sort(key=lambda e: (-e["n"], -(e["geomean"] if math.isfinite(e["geomean"]) else -math.inf), e["method"]))
    return out


def leaderboard_figure(rows: Sequence, title: str | None = None, reference: float | None = None):
    """Geometric-mean speed-up over naive per method: bars, one-standard-error whiskers (in log
    space) and one dot per instance, on a log axis (speed-ups are ratios).

    Methods are ordered as :func:`speedup_summary` ranks them; a method that did not solve every
    instance says how many it solved under its name (one that solved none has no bar).

    Args:
        rows: result rows (see :func:`speedup_summary`).
        title: the figure title.
        reference: draw a dashed line at this speed-up too (e.g. 1.25 for "20% shorter").

    Raises:
        HulkInputError: no method has a finite speed-up.
    """
    plt = pyplot()
    summary = speedup_summary(rows)
    if not any(e["n"] for e in summary):
        raise HulkInputError("no finite speed-ups to plot (every method infeasible?)")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(summary) + 2.5), 4.8), dpi=100)
    rng = np.random.default_rng(0)  # jitter of the dots only
    for i, e in enumerate(summary):
        if e["n"] == 0:
            continue
        # Bars start at 1 (= naive): up for faster, down for slower (a log axis has no zero).
        ax.bar(i, e["geomean"] - 1.0, bottom=1.0, width=0.65, color="tab:blue" if e["geomean"] >= 1 else "tab:gray",
               alpha=0.75, zorder=2)
        ax.errorbar(i, e["geomean"], yerr=[[e["geomean"] - e["low"]], [e["high"] - e["geomean"]]], color="black",
                    capsize=4, lw=1.2, zorder=4)
        jitter = rng.uniform(-0.2, 0.2, e["n"])
        ax.scatter(i + jitter, e["speedups"], s=12, color="black", alpha=0.55, zorder=3, edgecolors="none")
        ax.annotate(f"\u00d7{e['geomean']:.2f}", (i, e["high"]), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, weight="bold", zorder=5)
    log_speedup_axis(ax, reference)
    if reference is not None:
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xticks(range(len(summary)))
    ax.set_xticklabels(
        [e["method"] + (f"\n{e['n']}/{e['instances']} solved" if e["n"] < e["instances"] else "") for e in summary],
        rotation=30, ha="right", fontsize=9,
    )
    ax.set_ylabel("speed-up vs naive (naive time / method time)")
    n_instances = len({str(_row_value(r, "instance")) for r in rows})
    ax.set_title(title or f"geometric-mean speed-up over naive, {n_instances} instance(s); "
                 "whiskers: \u00b11 geometric s.e., dots: instances", fontsize=9)
    fig.tight_layout()
    return fig


def speedup_bars_figure(
    rows: Sequence,
    methods: Sequence[str] | None = None,
    reference: float | None = None,
    title: str | None = None,
):
    """Speed-up over naive per instance (groups) and method (bars): the median of repeated rows
    (seeds) with min-max whiskers, on a log axis; bars start at 1 (= naive). An instance a
    method did not solve has no bar for it.

    Args:
        rows: result rows (see :func:`speedup_summary`); rows repeated for one instance and
            method (several seeds) are summarised.
        methods: the methods to show, in this order (default: all but ``naive``, in first-seen
            order).
        reference: draw a dashed line at this speed-up too.
        title: the figure title.
    """
    plt = pyplot()
    values: dict[tuple[str, str], list[float]] = {}
    instances: list[str] = []
    seen: list[str] = []
    for row in rows:
        inst, method = str(_row_value(row, "instance")), str(_row_value(row, "method"))
        if inst not in instances:
            instances.append(inst)
        if method not in seen:
            seen.append(method)
        value = float(_row_value(row, "speedup_vs_naive"))
        values.setdefault((inst, method), [])
        if math.isfinite(value) and value > 0:
            values[(inst, method)].append(value)
    shown = list(methods) if methods else [m for m in seen if m != "naive"]
    if not shown or not instances:
        raise HulkInputError("nothing to plot: no methods or instances in the rows")
    fig, ax = plt.subplots(figsize=(min(15.0, max(8.0, 0.16 * len(shown) * len(instances) + 3.0)), 5.4), dpi=100,
                           layout="constrained")
    width = 0.8 / len(shown)
    colours = plt.get_cmap("tab10")
    for k, method in enumerate(shown):
        xs, med, lo, hi = [], [], [], []
        for i, inst in enumerate(instances):
            v = values.get((inst, method), [])
            if v:
                xs.append(i - 0.4 + (k + 0.5) * width)
                med.append(float(np.median(v)))
                lo.append(min(v))
                hi.append(max(v))
        if not xs:
            continue
        med_a = np.asarray(med)
        ax.bar(xs, med_a - 1.0, bottom=1.0, width=width * 0.92, color=colours(k % 10), label=method, zorder=2)
        ax.errorbar(xs, med_a, yerr=[med_a - np.asarray(lo), np.asarray(hi) - med_a], fmt="none", ecolor="black",
                    elinewidth=0.8, capsize=1.5, zorder=3)
    log_speedup_axis(ax, reference)
    ax.set_xticks(range(len(instances)))
    ax.set_xticklabels(instances, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(instances) - 0.4)
    ax.set_ylabel("speed-up vs naive (log scale)")
    fig.legend(fontsize=8, ncols=min(9, len(shown) + (reference is not None)), loc="outside lower center",
               frameon=False)
    ax.set_title(title or "speed-up over naive per instance (median over seeds, whiskers: min-max)", fontsize=10)
    return fig
