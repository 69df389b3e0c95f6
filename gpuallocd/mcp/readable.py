"""Times, durations and figures as a model reads them: dates with their zone and a duration
from now in the text (`2026-11-28 14:03 CET (in 1h58m)`), ISO 8601 in the JSON, figures
rounded with their unit, never `None` nor a 16-digit float. Durations and significant digits
are the project's own formatters, as the command line shows them."""

from __future__ import annotations

import datetime
import time

from gpuallocd.model.durations import format_duration
from gpuallocd.model.figures import significant

__all__ = ["amount", "at_text", "iso", "span", "when"]


def iso(at: float | None) -> str | None:
    """A moment for the JSON: ISO 8601 in the machine's zone, with its offset."""
    if at is None:
        return None
    return datetime.datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def at_text(at: float) -> str:
    """A moment for the text: `2026-11-28 14:03 CET`."""
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(at)).strip()


def span(seconds: float) -> str:
    """A duration: `42s`, `7m05s`, `1h58m`, `3d04h`."""
    return format_duration(max(0.0, seconds))


def when(at: float, now: float) -> str:
    """A moment and how far it is from now: `2026-11-28 14:03 CET (in 1h58m)`, or
    `... (5m00s ago)`."""
    if at >= now:
        return f"{at_text(at)} (in {span(at - now)})"
    return f"{at_text(at)} ({span(now - at)} ago)"


def amount(value: float, unit: str) -> str:
    """A figure to three significant digits with its unit: `0.0123 kWh`, `1,600 W`."""
    return f"{significant(value)} {unit}".strip()
