"""Redraw a frame every few seconds until Ctrl-C, as `watch` and `nvidia-smi -l` do.

On a terminal each frame is drawn in place from the top left corner (no scrolling, no
flicker: each line is cleared to its end and what is below the frame is wiped). Elsewhere,
frames follow one another, each under a line with its time. An error (the daemon restarts)
is shown in place of the frame and the watch goes on. Ctrl-C ends it with status 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import click

from gpuallocd.cli.errors import as_cli_error

__all__ = ["watch_frames"]

HOME, CLEAR_LINE, CLEAR_BELOW, CLEAR_SCREEN = "\x1b[H", "\x1b[K", "\x1b[J", "\x1b[2J"


def _safe_frame(make_frame: Callable[[], str]) -> str:
    try:
        return make_frame()
    except Exception as exc:
        mapped = as_cli_error(exc)
        if mapped is None:
            raise
        return f"Error: {mapped.message} (retrying)"


def _draw_in_place(frame: str, header: str) -> None:
    lines = [header, *frame.splitlines()]
    click.echo(HOME + "".join(f"{line}{CLEAR_LINE}\n" for line in lines) + CLEAR_BELOW, nl=False)


def watch_frames(make_frame: Callable[[], str], interval: float, *, json_lines: bool) -> None:
    """Show `make_frame()` every `interval` seconds until interrupted."""
    in_place = not json_lines and sys.stdout.isatty()
    if in_place:
        click.echo(CLEAR_SCREEN, nl=False)
    try:
        while True:
            frame = _safe_frame(make_frame)
            stamp = time.strftime("%H:%M:%S")
            if json_lines:
                click.echo(frame)
            elif in_place:
                _draw_in_place(frame, f"every {interval:g}s, Ctrl-C to stop  {stamp}")
            else:
                click.echo(f"{stamp}\n{frame}\n")
            time.sleep(interval)
    except KeyboardInterrupt:
        if in_place:
            click.echo("")
