"""Time and sizes as people type and read them: `90s`, `30m`, `8h`, `2d`, `1h30m`, `20G`.

A plain number of seconds (`3600`, `0.5`) is accepted wherever a duration is; tables show
durations the same way back (`59m`, `2h05m`, `3d04h`).
"""

from __future__ import annotations

import re
from typing import Any

import click

__all__ = [
    "ByteSize",
    "Duration",
    "Watts",
    "energy_text",
    "format_duration",
    "format_left",
    "parse_duration",
    "typed_duration",
]

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds from `90s`, `30m`, `8h`, `2d`, `1w`, `1h30m`, `1.5h` or a plain `3600`."""
    cleaned = text.strip().lower().replace(" ", "")
    try:
        return float(cleaned)
    except ValueError:
        pass
    parts = _PART.findall(cleaned)
    if not parts or "".join(number + unit for number, unit in parts) != cleaned:
        raise ValueError(f"{text!r} is not a duration: give e.g. 90s, 30m, 8h, 2d or seconds")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def format_duration(seconds: float) -> str:
    """`42s`, `7m05s`, `2h05m`, `3d04h` (`gpuallocd.model.durations`, loaded when first
    needed: `run` starts without the model package)."""
    from gpuallocd.model.durations import format_duration as shared

    return shared(seconds)


def typed_duration(seconds: float) -> str:
    """`10d`, `2h`, `1h30m`: as an option would be typed (`gpuallocd.model.durations`)."""
    from gpuallocd.model.durations import typed_duration as shared

    return shared(seconds)


def format_left(until: float | None, now: float) -> str | None:
    """Time left until `until` (`59m12s`), `due` once past; None where there is no time."""
    if until is None:
        return None
    return "due" if until - now < 1 else format_duration(until - now)


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.4
    """A click type for durations, in seconds; refuses values under `minimum`."""

    name = "duration"

    def __init__(self, minimum: float = 0.0, *, why_minimum: str = "") -> None:
        self.minimum = minimum
        self.why_minimum = why_minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(str(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if seconds <= 0 or seconds < self.minimum:
            self.fail(self._too_short(str(value), seconds), param, ctx)
        return seconds

    def _too_short(self, text: str, seconds: float) -> str:
        shortest = format_duration(self.minimum) if self.minimum else "more than 0s"
        hint = f"; did you mean {text}h or {text}m?" if _is_number(text) else ""
        why = f" ({self.why_minimum})" if self.why_minimum else ""
        return f"{text} is {seconds:g} s, too short{why}: the shortest is {shortest}{hint}"


class ByteSize(click.ParamType):  # type: ignore[type-arg]
    """A click type for memory sizes, in bytes (`20G` is 20 GiB)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        from gpulease.sizes import parse_size  # the client's: one reading of sizes everywhere

        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Watts(click.ParamType):  # type: ignore[type-arg]
    """A click type for power limits, in whole watts (`250W` or `250`)."""

    name = "watts"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        from gpulease.sizes import parse_watts  # the client's reading of power limits

        try:
            return parse_watts(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def energy_text(kwh: float, estimate: bool) -> str:
    """kWh as shown everywhere: an estimate says so (docs/accounting.md)."""
    return f"{kwh:.3f} (estimate)" if estimate else f"{kwh:.3f}"
