"""The one rule for numbers in files and settings, without pydantic (loaders import it early).

``bool`` and ``None`` are not numbers; numeric strings are (PyYAML reads ``1e9`` without a dot
as a string; CSV cells are strings); NaN and infinities are refused; integers of any size are
compared exactly, never converted to ``float`` first, so a 400-digit integer is "must be <=
...", not an OverflowError; each bound may name its limit in :mod:`hulk_env.validation.limits`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from hulk_env.validation import limits
from hulk_env.validation.reading import safe_repr

_INT_TEXT = re.compile(r"[+-]?\d+")
MAX_EXACT_INT = 2**53  # integers with no bound of their own stay exact in float64


class NumberProblem(ValueError):
    """What is wrong with a number, in the words every message uses."""


def parse_number_value(
    value: Any,
    *,
    integer: bool = False,
    ge: float | None = None,
    le: float | None = None,
    positive: bool = False,
    limit_low: str | None = None,
    limit_high: str | None = None,
    unit: str = "",
) -> int | float:
    """The one rule for numbers in files and settings (see the module docstring).

    Returns:
        An ``int`` when ``integer`` (else a finite ``float``), within the bounds.

    Raises:
        NumberProblem: with the message to show (no location: the caller knows it).
    """
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise NumberProblem(f"expected {kind}, got {safe_repr(value)}")
    number: int | float = value
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            number = int(text) if _INT_TEXT.fullmatch(text) else float(text)
        except ValueError:
            raise NumberProblem(f"expected {kind}, got {safe_repr(value)}") from None
    if isinstance(number, float):
        if not math.isfinite(number):
            raise NumberProblem(f"must be a finite number, got {safe_repr(value)}")
        if integer:
            if not number.is_integer():
                raise NumberProblem(f"expected {kind}, got {safe_repr(value)}")
            number = int(number)
    if integer and le is None:
        le = MAX_EXACT_INT
    suffix = f" {unit}" if unit else ""
    if positive and number <= 0:
        raise NumberProblem(f"must be positive, got {safe_repr(value)}")
    if ge is not None and number < ge:
        why = f" ({limits.cite(limit_low)})" if limit_low else ""
        raise NumberProblem(f"must be >= {format_bound(ge)}{suffix}{why}, got {safe_repr(value)}")
    if le is not None and number > le:
        why = f" ({limits.cite(limit_high)})" if limit_high else ""
        raise NumberProblem(f"must be <= {format_bound(le)}{suffix}{why}, got {safe_repr(value)}")
    if integer:
        return number
    try:
        return float(number)
    except OverflowError:  # an integer beyond float64, with no upper bound given
        raise NumberProblem(f"must be a finite number, got {safe_repr(value)}") from None


def format_bound(bound: float | None) -> str:
    """``4,096``, ``1,048,576``, ``1e+24``, ``0.5``: bounds as people read them."""
    if bound is None:
        return ""
    round_power = bound != 0 and abs(bound) >= 1e6 and math.log10(abs(bound)).is_integer()
    if float(bound).is_integer() and abs(bound) < 1e15 and not round_power:
        return f"{int(bound):,}"
    return f"{bound:g}"
