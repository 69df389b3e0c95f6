"""Stacked bars: one bar per group (a day, a range of waiting times), one colour per series
(a user), with a value axis and a legend."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from gpuallocd.charts.svg import (
    LEGEND_COLUMNS,
    LEGEND_ROW,
    OTHERS,
    OTHERS_COLOR,
    colors_by_rank,
    document,
    legend,
    line,
    nice_step,
    ranked,
    rect,
    text,
)

__all__ = ["BarGroup", "stacked_bars"]

LEFT, RIGHT, TOP, BOTTOM = 62, 12, 28, 34


@dataclass(frozen=True, slots=True)
class BarGroup:
    """One bar: its label under the axis and each series' value in it."""

    label: str
    values: Mapping[str, float]

    @property
    def total(self) -> float:
        return sum(self.values.values())


def stacked_bars(
    groups: Sequence[BarGroup],
    *,
    title: str,
    unit: str,
    counts: bool = False,
    width: int = 640,
    height: int = 240,
    colors: Mapping[str, str] | None = None,
) -> str:
    """An SVG of `groups` as stacked bars, the largest series at the bottom, labels thinned
    to fit; `unit` names the values on the axis and in the tooltips, `counts` keeps the
    axis to whole numbers. `colors` (name to colour, from `colors_by_rank`) keeps a user's
    colour the same across the charts of one page; by default the colours go by rank in
    this chart. Series past the palette are summed as "others"."""
    groups, series, color = _coloured(groups, colors)
    legend_rows = (len(series) + LEGEND_COLUMNS - 1) // LEGEND_COLUMNS
    plot_h = height - TOP - BOTTOM - legend_rows * LEGEND_ROW
    plot_w = width - LEFT - RIGHT
    top = max((group.total for group in groups), default=0.0)
    step = max(1.0, nice_step(top)) if counts else nice_step(top)
    scale_max = step * max(1, -(-top // step)) if top > 0 else step
    body = [text(LEFT, 16, title, weight="bold")]
    body += _axis(scale_max, step, plot_w, plot_h)
    body.append(_unit_label(unit, TOP + plot_h / 2))
    body += _bars(groups, series, color, scale_max, plot_w, plot_h, unit)
    body += legend(series, color, LEFT, height - legend_rows * LEGEND_ROW, width)
    if not groups or top <= 0:
        body.append(text(LEFT + plot_w / 2, TOP + plot_h / 2, "nothing yet", anchor="middle"))
    return document(width, height, title, body)


def _coloured(
    groups: Sequence[BarGroup], colors: Mapping[str, str] | None
) -> tuple[Sequence[BarGroup], list[str], dict[str, str]]:
    """The groups with the series past the palette summed as OTHERS, the series largest
    first, and each one's colour."""
    totals: dict[str, float] = {}
    for group in groups:
        for name, value in group.values.items():
            totals[name] = totals.get(name, 0.0) + value
    order = ranked(totals)
    given = dict(colors) if colors is not None else colors_by_rank(order)
    color = {name: given.get(name, OTHERS_COLOR) for name in order}
    if not any(c == OTHERS_COLOR for c in color.values()):
        return groups, order, color
    merged = [BarGroup(group.label, _fold(group.values, color)) for group in groups]
    series = [name for name in order if color[name] != OTHERS_COLOR] + [OTHERS]
    color = {name: color[name] for name in series[:-1]} | {OTHERS: OTHERS_COLOR}
    return merged, series, color


def _fold(values: Mapping[str, float], color: Mapping[str, str]) -> dict[str, float]:
    kept = {name: v for name, v in values.items() if color[name] != OTHERS_COLOR}
    rest = sum(v for name, v in values.items() if color[name] == OTHERS_COLOR)
    return kept | ({OTHERS: rest} if rest else {})


def _unit_label(unit: str, middle: float) -> str:
    """The unit written up the value axis."""
    return (
        f'<text x="12" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {middle:.1f})">{escape(unit)}</text>'
    )


def _axis(scale_max: float, step: float, plot_w: float, plot_h: float) -> list[str]:
    parts = []
    places = max(0, -math.floor(math.log10(step)))
    value = 0.0
    while value <= scale_max + step / 1000:
        y = TOP + plot_h - plot_h * value / scale_max
        parts.append(line(LEFT, y, LEFT + plot_w, y))
        parts.append(text(LEFT - 4, y + 4, f"{value:.{places}f}", anchor="end"))
        value += step
    return parts


def _bars(
    groups: Sequence[BarGroup],
    series: list[str],
    color: Mapping[str, str],
    scale_max: float,
    plot_w: float,
    plot_h: float,
    unit: str,
) -> list[str]:
    parts: list[str] = []
    if not groups:
        return parts
    slot = plot_w / len(groups)
    every = max(1, -(-len(groups) * 44 // int(plot_w)))  # a label per ~44 px at most
    for i, group in enumerate(groups):
        x = LEFT + i * slot + slot * 0.15
        y = TOP + plot_h
        for name in series:
            value = group.values.get(name, 0.0)
            if value <= 0:
                continue
            h = plot_h * value / scale_max
            y -= h
            tip = f"{group.label}: {name} {value:.2f} {unit}"
            parts.append(rect(x, y, slot * 0.7, h, color[name], tip))
        if i % every == 0 or i == len(groups) - 1:
            parts.append(text(x + slot * 0.35, TOP + plot_h + 14, group.label, anchor="middle"))
    return parts
