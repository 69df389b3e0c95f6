"""Tables for people: colour on a terminal (never with NO_COLOR), short UUIDs, 100 columns.

Cells are plain text or `Styled` text; widths are measured on the text, so colour never
breaks the alignment. The last column is cut (with `…`) where a row would pass the width.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

import click

from gpuallocd.cli.text import escape_unprintable

__all__ = [
    "STATE_COLOURS",
    "TABLE_WIDTH",
    "Styled",
    "cell_text",
    "colour_enabled",
    "escape_unprintable",
    "render_table",
    "short_uuid",
    "state_cell",
]

TABLE_WIDTH = 100
SHORT_UUID_HEX = 8
STATE_COLOURS = {
    "free": "green",
    "leased": "cyan",
    "reserved": "magenta",
    "in-use": "yellow",
    "draining": "yellow",
    "drained": "yellow",
    "unhealthy": "red",
    "lost": "red",
}


@dataclass(frozen=True, slots=True)
class Styled:
    """Text with a colour (click's names) and weight, shown only where colour is on."""

    text: str
    fg: str | None = None
    bold: bool = False
    dim: bool = False


def colour_enabled(stream: IO[Any] | None = None) -> bool:
    """Colour where the stream is a terminal, unless NO_COLOR is set (no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    target = stream if stream is not None else sys.stdout
    try:
        return target.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False


def short_uuid(uuid: str) -> str:
    """`GPU-8e6f1b2c` for `GPU-8e6f1b2c-...`: as many hex digits as tell GPUs apart by eye."""
    prefix, dash, rest = uuid.partition("-")
    if not dash or len(rest) <= SHORT_UUID_HEX:
        return uuid
    return f"{prefix}-{rest[:SHORT_UUID_HEX]}"


def state_cell(state: str) -> Styled:
    """A GPU or lease state in its colour; a state this version does not know stays plain."""
    return Styled(state, fg=STATE_COLOURS.get(state), bold=state in ("unhealthy", "lost"))


def cell_text(cell: object) -> str:
    """What a cell shows; anything a terminal would act on (ESC, CR, ...) escaped."""
    if cell is None:
        return "-"
    return escape_unprintable(cell.text if isinstance(cell, Styled) else str(cell))


def _paint(cell: object, padded: str, colour: bool) -> str:
    if cell is None and colour:
        return click.style(padded, dim=True)
    if not colour or not isinstance(cell, Styled):
        return padded
    return click.style(padded, fg=cell.fg, bold=cell.bold or None, dim=cell.dim or None)


def _cut(text: str, width: int) -> str:
    if width < 1:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    colour: bool = False,
    width: int | None = TABLE_WIDTH,
) -> str:
    """An aligned table; None shows as `-`; rows are cut to `width` columns (None: never)."""
    texts = [[cell_text(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in texts:
        widths = [max(w, len(t)) for w, t in zip(widths, row, strict=True)]
    if width is not None:
        room = width - sum(w + 2 for w in widths[:-1])
        widths[-1] = max(len(headers[-1]), min(widths[-1], room))
    header = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    lines = [click.style(header, bold=True) if colour else header]
    for row, cells in zip(texts, rows, strict=True):
        padded = [_cut(t, w).ljust(w) for t, w in zip(row, widths, strict=True)]
        padded[-1] = padded[-1].rstrip()
        lines.append(
            "  ".join(_paint(c, p, colour) for c, p in zip(cells, padded, strict=True)).rstrip()
        )
    return "\n".join(lines)
