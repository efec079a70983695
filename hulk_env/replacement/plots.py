"""Pictures of re-placement: a failure trace's timeline, and before/after placement maps."""

from __future__ import annotations

import math

import numpy as np

from hulk_env.render import placement_figure, pyplot
from hulk_env.replacement.problem import ReplacementProblem, ReplacementResult
from hulk_env.replacement.traces import FAIL, HOUR_S, Trace, TraceResult

_LABEL_GAP = 0.02  # event labels closer than this share of the time axis are left out
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")


def timeline_figure(results: list[TraceResult], trace: Trace, title: str | None = None):
    """Training progress and iteration time over wall-clock hours, one line per method.

    Top: iterations done (flat during migrations and stalls, drops at checkpoint rollbacks),
    with the failure-free run dashed; failures that hit a method's placement are red lines
    (``x NAME``), the recoveries it acted on green (``+ NAME``); labels that would overlap are
    left out. Bottom: the iteration time each method ran at. The legend
    gives each method's wall time and its time lost to migrations.
    """
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(12, 7.5), dpi=100, sharex=True, gridspec_kw={"height_ratios": [2.2, 1]}
    )
    end_h = max(r.wall_s for r in results) / HOUR_S
    ideal = results[0]
    top.plot([0, ideal.failure_free_s / HOUR_S], [0, ideal.iterations], ls="--", color="grey", lw=1.2,
             label=f"no failures: {ideal.failure_free_s / HOUR_S:.2f} h")
    acted: dict[float, str] = {}
    for i, r in enumerate(results):
        colour = _COLOURS[i % len(_COLOURS)]
        t, it = np.array(r.progress).T
        top.plot(t / HOUR_S, it, color=colour, lw=2,
                 label=f"{r.method}: {_finish(r)}, {r.migration_s / 60:.1f} min migrating, {r.lost_s / 60:.1f} min lost")
        steps = _iteration_steps(r)
        bottom.step(steps[:, 0] / HOUR_S, steps[:, 1], where="post", color=colour, lw=2, label=r.method)
        for e in r.timeline:
            if e.action != "none":
                acted[e.time_s] = ("x " if e.kind == FAIL else "+ ") + e.label
    last_label = -np.inf
    for time_s, label in sorted(acted.items()):
        x = time_s / HOUR_S
        colour = "tab:red" if label.startswith("x") else "tab:green"
        for ax in (top, bottom):
            ax.axvline(x, color=colour, lw=1, ls=":", alpha=0.8)
        if x - last_label < _LABEL_GAP * end_h:  # too close to the last label to read: line only
            continue
        last_label = x
        top.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                     fontsize=8, color=colour, xytext=(-2, -4), textcoords="offset points")
    top.set_ylabel("iterations done")
    top.set_xlim(0, end_h * 1.02)
    top.set_ylim(0, ideal.iterations * 1.05)
    top.legend(loc="lower right", fontsize=9, framealpha=0.9)
    top.grid(alpha=0.3)
    bottom.set_ylabel("iteration time (s)")
    bottom.set_xlabel("wall-clock time (h)")
    bottom.grid(alpha=0.3)
    hits = len({t for t in acted if acted[t].startswith("x")})
    fig.suptitle(
        title or f"{trace.name}: {trace.failures} failures, {hits} hit a running placement; "
        f"checkpoint every {trace.checkpoint_every} iterations",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def _finish(r: TraceResult) -> str:
    if r.finished:
        return f"{r.wall_s / HOUR_S:.2f} h"
    return f"stopped at {r.iterations_done} iterations"


def _iteration_steps(r: TraceResult) -> np.ndarray:
    """``[K, 2]`` (time_s, iteration time) changes of a run (``nan`` while stalled)."""
    first = r.failure_free_s / r.iterations
    rows = [(0.0, first)]
    for e in r.timeline:
        if e.action in ("replaced", "resumed", "stalled"):
            rows.append((e.time_s, e.iteration_time_s))
    rows.append((r.wall_s, rows[-1][1]))
    out = np.array(rows, dtype=float)
    out[~np.isfinite(out[:, 1]), 1] = math.nan
    return out


def before_after_figures(problem: ReplacementProblem, result: ReplacementResult):
    """``(before, after)`` placement maps of a re-placement (``hulk_env.render``'s figure).

    The failed machines show as idle (grey) in the after map; titles give the failure, the
    iteration times, the migration and the horizon totals.
    """
    inst = problem.instance
    c, w = inst.cluster, inst.workload
    failed = [c.machines[i].name for i in np.flatnonzero(problem.failed)]
    what = problem.label or ", ".join(failed)
    before = placement_figure(inst, problem.old, title=f"Before: {w.name} on {c.name} (D={w.data_parallel}); "
                              f"{what} is about to fail ({len(failed)} machine{'s' if len(failed) > 1 else ''})")
    o = result.outcome
    after = placement_figure(
        inst, result.placement,
        title=f"After {what} failed, {result.method}: {o.iteration_time_s:.3f} s per iteration, "
        f"{o.moved_bytes / 1e9:,.0f} GB moved in {o.migration_s:,.0f} s; "
        f"total over {o.horizon_iterations:,} iterations {o.total_s:,.0f} s",
    )
    return before, after
