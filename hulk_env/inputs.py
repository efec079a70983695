"""Checks every file loader shares on the values it has parsed: keys, numbers, locations.

Every problem becomes one :class:`~hulk_env.errors.HulkInputError` naming the file, the row
and the field at fault. The cluster loaders (YAML/JSON and the paper's CSV) and the workload
file loader all check through here, so an unknown key or a bad number reads the same in each.
Reading the bytes and parsing YAML/JSON is :mod:`hulk_env.validation.reading`.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

from hulk_env.errors import HulkInputError
from hulk_env.validation.numbers import NumberProblem, parse_number_value


def check_keys(
    mapping: Mapping,
    allowed: Collection[str],
    source: str,
    row: int | str | None = None,
    *,
    what: str | None = None,
    ignore: Collection[str] = (),
) -> None:
    """Reject the first key of ``mapping`` not in ``allowed``, suggesting the closest one.

    Args:
        mapping: the parsed mapping.
        allowed: its valid keys.
        source, row: where the mapping is, for the message.
        what: a label such as ``"a machine"`` (``"unknown key in a machine"``).
        ignore: keys a reader added itself (e.g. the line key of
            :func:`hulk_env.validation.reading.read_mapping`).

    Raises:
        HulkInputError: naming the unknown key as the field.
    """
    for key in mapping:
        if key in ignore or key in allowed:
            continue
        close = difflib.get_close_matches(str(key), list(allowed), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(allowed)}"
        where = f" in {what}" if what else ""
        raise HulkInputError(f"unknown key{where}; {hint}", source=source, row=row, field=str(key))


def parse_number(
    value: object,
    source: str,
    row: int | str | None,
    field: str,
    *,
    minimum: float | None = None,
    positive: bool = False,
    integer: bool = False,
    maximum: float | None = None,
    limit: str | None = None,
) -> float:
    """A finite number from a file cell or a YAML/JSON scalar (numeric strings accepted).

    The rule is :func:`hulk_env.validation.numbers.parse_number_value` (the one the file
    schemas use); ``maximum`` comes from ``limit`` in :mod:`hulk_env.validation.limits`.

    Raises:
        HulkInputError: not a number, NaN or infinite, not an integer where one is needed,
            not positive, below ``minimum`` or above ``maximum``; located at ``source``,
            ``row`` and ``field``.
    """
    try:
        return float(
            parse_number_value(
                value, integer=integer, ge=minimum, le=maximum, positive=positive, limit_high=limit
            )
        )
    except NumberProblem as problem:
        raise HulkInputError(str(problem), source=source, row=row, field=field) from None


def relocate(
    err: HulkInputError, source: str, row: int | str | None = None, field: str | None = None
) -> HulkInputError:
    """The same error placed in a file, row and field (the caller knows where the value came from)."""
    return HulkInputError(
        err.message,
        source=source,
        row=row if row is not None else err.row,
        field=field or err.field,
    )
