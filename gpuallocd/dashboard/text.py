"""Numbers as a page shows them: sizes, durations, times of day, escaped for HTML."""

from __future__ import annotations

import time
from html import escape

__all__ = ["clock_time", "duration", "esc", "gib", "user_of"]


def esc(value: object) -> str:
    return escape("" if value is None else str(value))


def gib(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**30:.1f} GiB"


def duration(seconds: float | None) -> str:
    """`45 s`, `12 min`, `3 h 05 min`, `2 d 4 h`; `-` for none."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"


def clock_time(at: float | None) -> str:
    """A moment as `2026-05-01 14:03:07` (local time)."""
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def user_of(holder: dict[str, object] | None) -> str:
    return "" if holder is None else str(holder["user"])
