"""Result rows and CSV files: the one CSV writer (:func:`write_csv`, :func:`append_csv` for rows
saved as they finish) and reading results back.

CSV cells: floats in full precision (``repr``), undefined numbers (``nan``, infeasible runs) as
empty cells, booleans as ``true``/``false``. :func:`read_results_csv` reads them back.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.files import atomic_write_text

RESULT_COLUMNS = (
    "instance",
    "method",
    "iteration_time_s",
    "speedup_vs_naive",
    "gap_to_best",
    "cost_evals",
    "wall_s",
    "feasible",
)
LEADERBOARD_COLUMNS = ("instance", "method", "speedup_vs_naive")  # what a leaderboard figure needs
# What makes a saved row comparable with a rerun: `hulk evaluate`'s results.csv
# carries them after the result columns, and `--resume` keeps a row only when they match.
# settings: a fingerprint of the instance, method, budget and seed; checksum: of every other
# cell as written, so a cut, padded or edited row is found.
PROVENANCE_COLUMNS = ("seed", "budget", "settings", "checksum")
JOURNAL_COLUMNS = RESULT_COLUMNS + PROVENANCE_COLUMNS
CHECKSUM_CHARS = 16  # hex digits of SHA-256 kept: 64 bits, against edits, not forgery
_NUMBER_COLUMNS = ("speedup_vs_naive", "iteration_time_s", "gap_to_best", "wall_s", "cost_evals")


@dataclass(frozen=True)
class ResultRow:
    """One method on one instance.

    Attributes:
        instance: the instance id.
        method: the method name.
        iteration_time_s: the placement's iteration time (``nan`` when infeasible).
        speedup_vs_naive: ``T_naive / T_method`` (``nan`` when either is infeasible).
        gap_to_best: ``T_method / T_best - 1``, ``T_best`` the fastest method on this instance.
        cost_evals: cost-model evaluations the method used.
        wall_s: the method's wall-clock seconds.
        feasible: whether it returned a memory-feasible placement.
        reason: why not, when not feasible (not a CSV column).
    """

    instance: str
    method: str
    iteration_time_s: float
    speedup_vs_naive: float
    gap_to_best: float
    cost_evals: int
    wall_s: float
    feasible: bool
    reason: str = ""


def csv_cell(value: Any) -> str:
    """One CSV cell (see the module docstring)."""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, float | np.floating):
        return repr(float(value)) if math.isfinite(value) else ""
    return str(value)


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> Path:
    """Write dict rows as CSV (``columns``: default the first row's keys; a missing key is an
    empty cell). Atomic: readers see the old file or the new one, never half of it."""
    columns = list(columns or (rows[0].keys() if rows else []))
    return atomic_write_text(Path(path), _csv_text(rows, columns, header=True))


def append_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Path:
    """Append whole rows to a CSV file (the header first when the file is new or empty), in one
    write, flushed to disk: a run killed between two calls leaves whole rows only."""
    out = Path(path)
    new = not out.exists() or out.stat().st_size == 0
    data = _csv_text(rows, list(columns), header=new).encode("utf-8")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return out


def _csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], header: bool) -> str:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    if header:
        writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c, "")) for c in columns])
    return buffer.getvalue()


def read_results_csv(path: str | Path) -> list[dict]:
    """Rows of a ``results.csv`` (``hulk evaluate``, the experiments) as dicts.

    Needs the columns ``instance``, ``method`` and ``speedup_vs_naive``; numbers become floats
    (an empty cell is ``nan``), ``feasible`` a bool when present; other columns stay strings.

    Read through :func:`hulk_env.validation.reading.read_csv_rows` (regular file, size, UTF-8,
    row and cell limits); every row has exactly the header's cells.

    Raises:
        HulkInputError: a missing file or column, a row of another length, or a number cell
            that is not a number.
    """
    from hulk_env.validation.reading import read_csv_rows

    src = Path(path)
    table = read_csv_rows(src, what="results file")
    header = table[0] if table else []
    missing = [c for c in LEADERBOARD_COLUMNS if c not in header]
    if missing:
        raise HulkInputError(
            f"missing column(s) {', '.join(missing)}; a results.csv from `hulk evaluate` has "
            f"{', '.join(LEADERBOARD_COLUMNS)}",
            source=str(src),
        )
    if len(set(header)) != len(header):
        raise HulkInputError("a column name is given twice in the header", source=str(src), row=1)
    rows = []
    for n, cells in enumerate(table[1:], start=2):
        if not cells:
            continue  # a blank line
        if len(cells) != len(header):
            raise HulkInputError(
                f"{len(cells)} cells, the header has {len(header)} (a cut or edited row?)", source=str(src), row=n
            )
        row: dict = dict(zip(header, cells, strict=True))
        for key in _NUMBER_COLUMNS:
            if key in row:
                row[key] = _float_cell(row[key], src, n, key)
        if "feasible" in row:
            row["feasible"] = str(row["feasible"]).strip().lower() == "true"
        rows.append(row)
    if not rows:
        raise HulkInputError("no result rows", source=str(src))
    return rows


def row_checksum(cells: Sequence[str]) -> str:
    """SHA-256 (first :data:`CHECKSUM_CHARS` hex digits) of a row's cells as written."""
    return hashlib.sha256("\x1f".join(cells).encode("utf-8")).hexdigest()[:CHECKSUM_CHARS]


def with_checksum(row: Mapping[str, Any]) -> dict:
    """``row`` (every :data:`JOURNAL_COLUMNS` but ``checksum``) with its checksum cell added."""
    cells = [csv_cell(row.get(c, "")) for c in JOURNAL_COLUMNS[:-1]]
    return {**row, "checksum": row_checksum(cells)}


def _float_cell(value: str | None, src: Path, row: int, key: str) -> float:
    text = (value or "").strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise HulkInputError(f"not a number: {text!r}", source=str(src), row=row, field=key) from None
