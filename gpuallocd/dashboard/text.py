"""Numbers as a page shows them: sizes, durations, times of day, escaped for HTML."""

from __future__ import annotations

import time
from html import escape

from gpuallocd.model.durations import format_duration

__all__ = ["clock_time", "duration", "esc", "gib", "user_of"]


def esc(value: object) -> str:
    return escape("" if value is None else str(value))


def gib(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**30:.1f} GiB"


def duration(seconds: float | None) -> str:
    """`45s`, `12m00s`, `3h05m`, `2d04h` as the command line writes them; `-` for none."""
    return "-" if seconds is None else format_duration(seconds)


def clock_time(at: float | None) -> str:
    """A moment as `2026-05-01 14:03:07` (local time)."""
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def user_of(holder: dict[str, object] | None) -> str:
    return "" if holder is None else str(holder["user"])
