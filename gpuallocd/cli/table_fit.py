"""A table to the terminal's width: the columns a reader can spare are dropped first, by
priority, so no row wraps; what is left of the width goes to the last column, cut there."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

from gpuallocd.cli.style import cell_text

__all__ = ["DROP_ORDER", "HOLDER_ROOM", "PIPE_WIDTH", "fit_columns", "terminal_width"]

# Spared first to last: the UUID (`-v` and `--json` give it whole), the model (the same on
# most boxes), the utilisation, the power (draw/limit), then the memory. IDX, STATE and
# HOLDER always stay.
DROP_ORDER = ("UUID", "NAME", "UTIL", "POWER", "MEMORY")
# The last column keeps at least this much of its own width before a column is dropped.
HOLDER_ROOM = 40
# Where no terminal says its width (a pipe, a file) and COLUMNS is not set.
PIPE_WIDTH = 100
NARROWEST = 20


def terminal_width() -> int:
    """COLUMNS where set, else the terminal's columns when stdout is one, else PIPE_WIDTH."""
    if os.environ.get("COLUMNS", "").isdigit():
        return max(int(os.environ["COLUMNS"]), NARROWEST)
    if not sys.stdout.isatty():
        return PIPE_WIDTH
    return max(shutil.get_terminal_size((PIPE_WIDTH, 24)).columns, NARROWEST)


def _needed(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[int]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell_text(c))) for w, c in zip(widths, row, strict=True)]
    return widths


def fit_columns(
    headers: Sequence[str], rows: Sequence[Sequence[object]], width: int
) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """`headers` and `rows` less the columns of DROP_ORDER that must go for the rest to fit
    `width` with the last column given min(its width, HOLDER_ROOM)."""
    kept = list(range(len(headers)))
    widths = _needed(headers, rows)
    for name in DROP_ORDER:
        before_last = sum(widths[i] + 2 for i in kept[:-1])
        if before_last + min(widths[kept[-1]], HOLDER_ROOM) <= width:
            break
        if name in headers:
            kept.remove(headers.index(name))
    return tuple(headers[i] for i in kept), [tuple(row[i] for i in kept) for row in rows]
