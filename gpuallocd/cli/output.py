"""Printing for the CLI: stable JSON for machines, aligned tables for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["echo_json", "escape_unprintable", "format_bytes", "table"]


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def escape_unprintable(text: str) -> str:
    """`text` with every character a terminal would act on (ESC, BEL, CR, bidi overrides...)
    written as a Python escape, so a cell can never move the cursor or forge a row."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned text table; None prints as '-'; unprintable characters are escaped."""
    cells = [[("-" if c is None else escape_unprintable(str(c))) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def format_bytes(value: int | None) -> str | None:
    if value is None:
        return None
    gib = value / 2**30
    return f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB"
