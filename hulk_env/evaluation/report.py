"""The files of one evaluation: ``results.csv``, ``results.json`` and ``summary.md``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from hulk_env.evaluation.leaderboard import leaderboard, summary_markdown
from hulk_env.evaluation.results import RESULT_COLUMNS, ResultRow, write_csv
from hulk_env.files import atomic_write_text


def write_results(rows: Sequence[ResultRow], out_dir: str | Path, title: str = "Leaderboard") -> dict[str, Path]:
    """Write ``results.csv``, ``results.json`` and ``summary.md`` into ``out_dir`` (created).

    ``results.csv`` has exactly the columns of :data:`RESULT_COLUMNS`; undefined numbers
    (infeasible runs) are empty cells. ``results.json`` holds every row (with ``reason``) and
    the leaderboard.

    Returns:
        The paths written, keyed ``csv``, ``json``, ``summary``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "json": out / "results.json", "summary": out / "summary.md"}
    write_csv(paths["csv"], [asdict(r) for r in rows], RESULT_COLUMNS)
    payload = {
        "columns": list(RESULT_COLUMNS),
        "rows": [{k: _json_value(v) for k, v in asdict(r).items()} for r in rows],
        "leaderboard": [{k: _json_value(v) for k, v in e.items()} for e in leaderboard(rows)],
    }
    atomic_write_text(paths["json"], json.dumps(payload, indent=2) + "\n")
    atomic_write_text(paths["summary"], summary_markdown(rows, title))
    return paths


def _json_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
