"""Durations as every part of gpuallocd writes them: `42s`, `7m05s`, `2h05m`, `3d04h` (the
two largest units), the way `--ttl` and `--timeout` take them; one formatter for the
command line's tables, the daemon's messages and the dashboard."""

from __future__ import annotations

__all__ = ["format_duration", "typed_duration"]


def _units(seconds: int) -> tuple[int, int, int, int]:
    days, rest = divmod(max(0, seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return days, hours, minutes, secs


def format_duration(seconds: float) -> str:
    """`42s`, `7m05s`, `2h05m`, `3d04h`: the two largest units, as people read them (what is
    left is counted down: a part of a second does not round up)."""
    days, hours, minutes, secs = _units(int(seconds))
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def typed_duration(seconds: float) -> str:
    """As an option would be typed, for messages: `10d`, `2h`, `1h30m`, `90s` (a second
    unit only where it is not zero)."""
    shown = format_duration(round(seconds))
    for zero in ("00h", "00m", "00s"):
        shown = shown.removesuffix(zero)
    return shown
