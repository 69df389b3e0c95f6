"""What every daemon-facing command shares: the client, error handling, time display."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gpulease import Client

__all__ = ["daemon_client", "format_expiry", "parse_gpu_ref"]


@contextlib.contextmanager
def daemon_client(ctx: click.Context) -> Iterator[Client]:
    """A client on the group's socket; daemon errors become one-line CLI errors."""
    from gpulease import Client, GpuallocError

    try:
        with Client(ctx.obj.socket) as client:
            yield client
    except GpuallocError as exc:
        raise click.ClickException(f"{exc.message} [{exc.code}]") from None


def format_expiry(expires_at: float | None, now: float | None = None) -> str | None:
    """`in 59m 12s` style; None where there is nothing to show."""
    if expires_at is None:
        return None
    left = int(expires_at - (time.time() if now is None else now))
    if left <= 0:
        return "due"
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"in {hours}h {minutes:02d}m"
    return f"in {minutes}m {seconds:02d}s" if minutes else f"in {seconds}s"


def parse_gpu_ref(text: str) -> str | int:
    """A GPU named on the command line: an index if it is a number, else a UUID."""
    return int(text) if text.isdigit() else text
