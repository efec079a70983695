"""Learning curves: scalar series (:class:`Curve`) read from CSV logs, smoothed and plotted.

TensorBoard event files are the agent's business: :mod:`agents.training.tb_curves` reads them (and whole
run directories) into the same :class:`Curve` lists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.render.common import pyplot


class Curve(NamedTuple):
    """One scalar series.

    Attributes:
        tag: its name (a TensorBoard tag like ``placement/speedup_vs_naive`` or a CSV column).
        steps: ``[N]`` environment steps.
        values: ``[N]`` values.
    """

    tag: str
    steps: np.ndarray
    values: np.ndarray


STEP_COLUMNS = ("timesteps", "num_timesteps", "timestep", "step", "steps", "global_step")
DEFAULT_CURVE_TAGS = (
    "placement/speedup_vs_naive",
    "eval/mean_speedup_vs_naive",
    "eval/mean_speedup",
    "rollout/ep_rew_mean",
)


def read_csv_curves(path: str | Path, prefix: str = "") -> list[Curve]:
    """Scalar series from a CSV log: the first column named like a step (:data:`STEP_COLUMNS`;
    else the first column) is the x axis, every other numeric column a curve named
    ``prefix + column`` (empty cells are ``nan``; text columns are left out).

    Raises:
        HulkInputError: the file cannot be read, or its step column holds non-numbers.
    """
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_csv_rows

    path = Path(path)
    rows = read_csv_rows(path, what="CSV log", max_rows=10 * limits.MAX_CSV_ROWS)
    if len(rows) < 2:
        return []
    header, body = rows[0], rows[1:]
    x_col = next((header.index(c) for c in STEP_COLUMNS if c in header), 0)
    columns = list(zip(*[r for r in body if len(r) == len(header)], strict=True)) if body else []
    if not columns:
        return []
    try:
        steps = np.array([float(v) for v in columns[x_col]])
    except ValueError:
        raise HulkInputError(f"step column '{header[x_col]}' holds non-numbers", source=str(path)) from None
    out = []
    for i, name in enumerate(header):
        if i == x_col:
            continue
        try:
            values = np.array([float(v) if v.strip() else math.nan for v in columns[i]])
        except ValueError:
            continue  # a text column (method names, ...)
        out.append(Curve(prefix + name, steps, values))
    return out


def smooth(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's exponential moving average with bias correction (``weight`` in [0, 1))."""
    if weight <= 0 or len(values) == 0:
        return np.asarray(values, dtype=float)
    out, last, debias = np.empty(len(values)), 0.0, 0.0
    for i, v in enumerate(np.asarray(values, dtype=float)):
        last = weight * last + (1 - weight) * v
        debias = weight * debias + (1 - weight)
        out[i] = last / debias
    return out


def curves_figure(
    runs: Mapping[str, Sequence[Curve]],
    tags: Sequence[str] | None = None,
    smoothing: float = 0.6,
    title: str | None = None,
):
    """Learning curves: one panel per tag, one line per run (raw faint, smoothed solid).

    Args:
        runs: ``{label: curves}``, e.g. ``{"gnn": read_csv_curves("gnn.csv")}`` (a training
            run's TensorBoard logs: :func:`agents.training.tb_curves.read_curves`).
        tags: the tags to plot (default: those of :data:`DEFAULT_CURVE_TAGS` that any run has,
            else the first four tags).
        smoothing: EMA weight (0 = raw only).
        title: the figure title.

    Raises:
        HulkInputError: no run has any of the requested tags.
    """
    plt = pyplot()
    available = {c.tag for curves in runs.values() for c in curves}
    if tags:
        chosen = [t for t in tags if t in available]
        if not chosen:
            raise HulkInputError(
                f"none of the tags {', '.join(tags)} is in these runs; available: {', '.join(sorted(available))}",
                field="tag",
            )
    else:
        chosen = [t for t in DEFAULT_CURVE_TAGS if t in available] or sorted(available)[:4]
        if "eval/mean_speedup_vs_naive" in chosen and "eval/mean_speedup" in chosen:
            chosen.remove("eval/mean_speedup")  # the CSV copy of the same evaluations
    cols = min(len(chosen), 2)
    nrows = math.ceil(len(chosen) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.7 * nrows + 0.6), dpi=100, squeeze=False,
                             layout="constrained")
    colours = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    # Runs labelled "<group>/<member>" (e.g. variant/seed) share their group's colour.
    groups = list(dict.fromkeys(label.split("/")[0] for label in runs))
    member: dict[str, int] = {}
    look = {}
    for label in runs:
        group = label.split("/")[0]
        look[label] = (colours(groups.index(group) % 10), styles[member.get(group, 0) % len(styles)])
        member[group] = member.get(group, 0) + 1
    handles: dict[str, object] = {}
    for k, tag in enumerate(chosen):
        ax = axes[k // cols][k % cols]
        for label, curves in runs.items():
            colour, style = look[label]
            for c in curves:
                if c.tag != tag or len(c.steps) == 0:
                    continue
                if smoothing > 0 and len(c.values) > 2:
                    ax.plot(c.steps, c.values, color=colour, alpha=0.2, lw=0.8)
                    (line,) = ax.plot(c.steps, smooth(c.values, smoothing), color=colour, ls=style, lw=1.6)
                else:
                    (line,) = ax.plot(c.steps, c.values, color=colour, ls=style, lw=1.6,
                                      marker="o" if len(c.values) < 30 else None, ms=3)
                handles.setdefault(label, line)
        if "speedup" in tag:
            ax.axhline(1.0, color="black", lw=0.7, ls=":")
        ax.set_title(tag, fontsize=9)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    for k in range(len(chosen), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", fontsize=8,
               ncols=min(6, len(handles)), frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
