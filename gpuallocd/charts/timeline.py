"""A timeline: one row per GPU, a bar for each lease over a window (the last 24 hours)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from gpuallocd.charts.daily import Interval
from gpuallocd.charts.svg import (
    LEGEND_COLUMNS,
    LEGEND_ROW,
    OTHERS,
    OTHERS_COLOR,
    colors_by_rank,
    document,
    legend,
    line,
    ranked,
    rect,
    text,
)

__all__ = ["timeline"]

LEFT, RIGHT, TOP, ROW, AXIS = 70, 12, 28, 20, 22


def timeline(
    rows: Sequence[tuple[str, Sequence[Interval]]],
    since: float,
    until: float,
    *,
    title: str,
    width: int = 640,
    colors: Mapping[str, str] | None = None,
) -> str:
    """An SVG of each row's intervals clipped to [since, until], hours marked on the axis,
    a colour per user (by rank of time held here, or from `colors`) named in a legend."""
    color = _colors(rows, since, until, colors)
    shown = _legend_names(color)
    legend_rows = (len(shown) + LEGEND_COLUMNS - 1) // LEGEND_COLUMNS
    plot_bottom = TOP + ROW * max(1, len(rows)) + AXIS
    height = plot_bottom + legend_rows * LEGEND_ROW
    plot_w = width - LEFT - RIGHT
    span = max(until - since, 1.0)

    def x_of(at: float) -> float:
        return LEFT + plot_w * (min(max(at, since), until) - since) / span

    body = [text(LEFT, 16, title, weight="bold")]
    body += _hours(since, until, x_of, plot_bottom)
    for i, (name, intervals) in enumerate(rows):
        y = TOP + i * ROW
        body.append(text(LEFT - 6, y + ROW * 0.65, name, anchor="end"))
        body.append(line(LEFT, y + ROW, LEFT + plot_w, y + ROW, "#eeeeee"))
        for it, count in _merged(intervals, since, until, pixel=span / plot_w):
            end = until if it.end is None else it.end
            x = x_of(it.start)
            tip = f"{it.user}{' (' + it.label + ')' if it.label else ''}: {_hm(it.start)}-"
            tip += ("now" if it.end is None else _hm(it.end)) + (
                f", {count} leases" if count > 1 else ""
            )
            body.append(rect(x, y + 3, max(x_of(end) - x, 1.0), ROW - 6, color[it.user], tip))
    if not rows:
        body.append(text(LEFT + plot_w / 2, TOP + ROW * 0.65, "no GPU", anchor="middle"))
    body += legend(shown, color | {OTHERS: OTHERS_COLOR}, LEFT, plot_bottom, width)
    return document(width, height, title, body)


def _colors(
    rows: Sequence[tuple[str, Sequence[Interval]]],
    since: float,
    until: float,
    given: Mapping[str, str] | None,
) -> dict[str, str]:
    """Each user's colour: `given`'s, or by rank of the time held in the window."""
    held: dict[str, float] = {}
    for _, intervals in rows:
        for it in intervals:
            end = until if it.end is None else min(it.end, until)
            held[it.user] = held.get(it.user, 0.0) + max(0.0, end - max(it.start, since))
    if given is None:
        given = colors_by_rank(ranked(held))
    return {user: given.get(user, OTHERS_COLOR) for user in ranked(held)}


def _legend_names(color: Mapping[str, str]) -> list[str]:
    """The users with a colour of their own, then "others" when some share the grey."""
    own = [user for user, c in color.items() if c != OTHERS_COLOR]
    return own + ([OTHERS] if len(own) < len(color) else [])


def _merged(
    intervals: Sequence[Interval], since: float, until: float, pixel: float
) -> list[tuple[Interval, int]]:
    """The intervals inside the window, in order, a user's leases less than a pixel apart
    drawn as one bar (thousands of short leases make a few bars, not thousands), with how
    many each bar stands for."""
    bars: list[tuple[Interval, int]] = []
    for it in sorted(intervals, key=lambda i: i.start):
        end = until if it.end is None else it.end
        if end <= since or it.start >= until:
            continue
        if bars:
            last, count = bars[-1]
            last_end = until if last.end is None else last.end
            if last.user == it.user and it.start <= last_end + pixel:
                longer = None if it.end is None or last.end is None else max(last.end, it.end)
                label = last.label if last.label == it.label else None
                bars[-1] = (Interval(last.gpu, last.start, longer, last.user, label), count + 1)
                continue
        bars.append((it, 1))
    return bars


def _hours(since: float, until: float, x_of: Callable[[float], float], height: int) -> list[str]:
    """A line and a label every few hours, on the hour."""
    every = 3600 * max(1, round((until - since) / 3600 / 8))
    start = since - since % 3600 + 3600
    parts = []
    at = start
    while at < until:
        if int(at) // 3600 % (every // 3600) == 0:
            x = x_of(at)
            parts.append(line(x, TOP, x, height - AXIS))
            parts.append(text(x, height - 8, _hm(at), anchor="middle"))
        at += 3600
    return parts


def _hm(at: float) -> str:
    return time.strftime("%H:%M", time.localtime(at))
