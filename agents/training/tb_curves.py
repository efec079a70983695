"""Learning curves of training runs: TensorBoard event files and run directories -> Curve lists.

The figures (:func:`hulk_env.render.curves_figure`) take :class:`hulk_env.render.Curve` lists and
know nothing of TensorBoard; this module reads what ``hulk train`` logs (``tb/`` event files,
``eval/evaluations.csv``). It needs ``tensorboard`` (installed with the agent).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.render.curves import Curve, read_csv_curves

EVENT_GLOB = "events.out.tfevents.*"
EVALUATIONS_CSV = Path("eval") / "evaluations.csv"


def read_curves(path: str | Path) -> list[Curve]:
    """Scalar series from a run directory, a TensorBoard event file or a CSV file.

    * CSV: :func:`hulk_env.render.read_csv_curves`.
    * TensorBoard: every scalar tag of every event file (:func:`read_event_curves`).
    * A directory: all event files below it, plus ``eval/evaluations.csv`` when there (its
      columns prefixed ``eval/``, tags the event files already have left out); without event
      files, the CSV files directly in it.

    Raises:
        HulkInputError: the path does not exist or holds no scalar series.
    """
    src = Path(path)
    if not src.exists():
        raise HulkInputError("no such file or run directory", source=str(src))
    if src.is_file():
        curves = read_csv_curves(src) if src.suffix.lower() == ".csv" else read_event_curves([src])
    else:
        curves = read_event_curves(sorted(src.rglob(EVENT_GLOB)))
        evaluations = src / EVALUATIONS_CSV
        if evaluations.is_file():
            known = {c.tag for c in curves}
            curves += [c for c in read_csv_curves(evaluations, prefix="eval/") if c.tag not in known]
        if not curves:
            curves = [c for f in sorted(src.glob("*.csv")) for c in read_csv_curves(f)]
    if not curves:
        raise HulkInputError(
            "no learning curves here: expected TensorBoard event files (tb/) or a CSV with a step column",
            source=str(src),
        )
    return curves


def read_event_curves(files: Sequence[Path]) -> list[Curve]:
    """Every scalar tag of the event files (tensorboard's ``EventAccumulator``); series of one
    tag from several files (a resumed run) are merged in step order.

    Raises:
        HulkInputError: a file is truncated or not an event file.
    """
    if not files:
        return []
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[tuple[float, float]]] = {}
    for f in files:
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        try:
            acc.Reload()
        except Exception as exc:  # a truncated or foreign file: say which one
            raise HulkInputError(f"not a readable TensorBoard event file ({type(exc).__name__})", source=str(f)) from None
        for tag in acc.Tags().get("scalars", []):
            series.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    out = []
    for tag, points in series.items():
        points.sort()
        arr = np.asarray(points, dtype=float)
        out.append(Curve(tag, arr[:, 0], arr[:, 1]))
    return out
