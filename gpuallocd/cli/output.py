"""Printing for the CLI: stable JSON for machines, aligned tables for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from gpuallocd.cli.style import render_table
from gpuallocd.cli.text import escape_unprintable

__all__ = ["echo_json", "escape_unprintable", "format_bytes", "table"]


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned text table, never cut, without colour (see `style.render_table`)."""
    return render_table(headers, rows, colour=False, width=None)


def format_bytes(value: int | None) -> str | None:
    if value is None:
        return None
    gib = value / 2**30
    return f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB"
