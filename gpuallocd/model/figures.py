"""Figures as people read them: a few significant digits, never a 16-digit float nor a
budget of 0.05 shown as `0.05` beside a use of `0.00`. One formatter for the command line's
tables and the MCP server's answers (durations have theirs in `durations`)."""

from __future__ import annotations

import math

__all__ = ["significant"]

MAX_DECIMALS = 6  # below a millionth a figure reads as 0


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, without an exponent or trailing zeros:
    0.05 -> `0.05`, 0.012345 -> `0.0123`, 12.345 -> `12.3`, 2.0 -> `2`; a figure of
    `digits` whole digits or more is rounded to a whole number (`1,235`)."""
    if not math.isfinite(value):
        return str(value)
    if value == 0 or abs(value) >= 10 ** (digits - 1):
        return f"{round(value):,}"
    decimals = min(MAX_DECIMALS, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text in ("-0", "") else text
