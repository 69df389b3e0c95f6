"""Stacked bars: one bar per group (a day, a range of waiting times), one colour per series
(a user), with a value axis and a legend."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.charts.svg import color_of, document, line, nice_step, rect, text

__all__ = ["BarGroup", "stacked_bars"]

LEFT, RIGHT, TOP, BOTTOM = 48, 12, 28, 34
LEGEND_ROW = 16


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
) -> str:
    """An SVG of `groups` as stacked bars, series in a stable order, labels thinned to fit;
    `unit` names the values in the tooltips, `counts` keeps the axis to whole numbers."""
    series = sorted({name for group in groups for name in group.values})
    legend_rows = (len(series) + 5) // 6
    plot_h = height - TOP - BOTTOM - legend_rows * LEGEND_ROW
    plot_w = width - LEFT - RIGHT
    top = max((group.total for group in groups), default=0.0)
    step = max(1.0, nice_step(top)) if counts else nice_step(top)
    scale_max = step * max(1, -(-top // step)) if top > 0 else step
    body = [text(LEFT, 16, title, weight="bold")]
    body += _axis(scale_max, step, plot_w, plot_h)
    body += _bars(groups, series, scale_max, plot_w, plot_h, unit)
    body += _legend(series, height - legend_rows * LEGEND_ROW, width)
    if not groups or top <= 0:
        body.append(text(LEFT + plot_w / 2, TOP + plot_h / 2, "nothing yet", anchor="middle"))
    return document(width, height, title, body)


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
            parts.append(rect(x, y, slot * 0.7, h, color_of(name), tip))
        if i % every == 0 or i == len(groups) - 1:
            parts.append(text(x + slot * 0.35, TOP + plot_h + 14, group.label, anchor="middle"))
    return parts


def _legend(series: list[str], y: float, width: int) -> list[str]:
    parts = []
    column = (width - LEFT) / 6
    for i, name in enumerate(series):
        x = LEFT + (i % 6) * column
        row_y = y + (i // 6) * LEGEND_ROW
        parts.append(rect(x, row_y, 10, 10, color_of(name)))
        parts.append(text(x + 14, row_y + 9, name))
    return parts
