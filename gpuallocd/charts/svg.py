"""The few pieces of SVG the charts are made of, every text escaped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape

__all__ = [
    "LEGEND_COLUMNS",
    "LEGEND_ROW",
    "OTHERS",
    "OTHERS_COLOR",
    "PALETTE",
    "colors_by_rank",
    "document",
    "legend",
    "line",
    "nice_step",
    "ranked",
    "rect",
    "text",
]

# Okabe and Ito's eight colours, which stay apart for readers with the common colour-vision
# deficiencies; a user gets one by rank in the chart (the most GPU-hours first), never by a
# hash of the name, so no two users of one chart share a colour.
PALETTE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#f0e442",
    "#000000",
)
# Everyone past the palette is drawn in one grey and named "others" in a legend.
OTHERS_COLOR = "#b0b0b0"
OTHERS = "others"
FONT = 'font-family="sans-serif" font-size="11"'
LEGEND_COLUMNS, LEGEND_ROW = 6, 16


def colors_by_rank(in_order: Iterable[str]) -> dict[str, str]:
    """Each name its own colour in the order given (the first the most used); past the
    palette's last colour but one, the rest share OTHERS_COLOR."""
    names = list(dict.fromkeys(in_order))
    own = len(PALETTE) if len(names) <= len(PALETTE) else len(PALETTE) - 1
    return {name: PALETTE[i] if i < own else OTHERS_COLOR for i, name in enumerate(names)}


def ranked(totals: Mapping[str, float]) -> list[str]:
    """Names by total, largest first, ties by name: the order colours are handed out in."""
    return sorted(totals, key=lambda name: (-totals[name], name))


def document(width: int, height: int, title: str, body: list[str]) -> str:
    """A standalone SVG document (also valid inline in HTML), scaled to its container."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" class="chart" {FONT}>'
        f"<title>{escape(title)}</title>"
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>'
        + "".join(body)
        + "</svg>"
    )


def rect(x: float, y: float, w: float, h: float, fill: str, tip: str | None = None) -> str:
    inner = f"<title>{escape(tip)}</title>" if tip else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.0):.1f}" height="{max(h, 0.0):.1f}" '
        f'fill="{fill}">{inner}</rect>'
    )


def text(x: float, y: float, content: str, anchor: str = "start", weight: str = "") -> str:
    bold = ' font-weight="bold"' if weight else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{bold}>{escape(content)}</text>'


def line(x1: float, y1: float, x2: float, y2: float, stroke: str = "#cccccc") -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"/>'


def nice_step(maximum: float, ticks: int = 4) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving about `ticks` lines up to max."""
    if maximum <= 0:
        return 1.0
    raw = maximum / ticks
    power = 10.0 ** len(str(int(raw))) / 10.0 if raw >= 1 else 10.0 ** -_decimals(raw)
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


def _decimals(value: float) -> int:
    """How many places after the point the first significant digit of 0 < value < 1 is."""
    places = 0
    while value < 1:
        value *= 10
        places += 1
    return places


def legend(
    names: list[str], color: Mapping[str, str], left: float, y: float, width: int
) -> list[str]:
    """A swatch and a name for each of `names`, LEGEND_COLUMNS to a row from `y` down."""
    parts = []
    column = (width - left) / LEGEND_COLUMNS
    for i, name in enumerate(names):
        x = left + (i % LEGEND_COLUMNS) * column
        row_y = y + (i // LEGEND_COLUMNS) * LEGEND_ROW
        parts.append(rect(x, row_y, 10, 10, color[name]))
        parts.append(text(x + 14, row_y + 9, name))
    return parts
