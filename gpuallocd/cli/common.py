"""What every daemon-facing command shares: the client, error handling, time display."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from gpulease import Client

__all__ = ["daemon_client", "format_expiry", "lease_request_options", "memory_size"]

F = TypeVar("F", bound=Callable[..., Any])


def memory_size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A memory size option (`20G`, `512M`, bytes; binary units) as bytes."""
    from gpulease import parse_size

    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def lease_request_options(ttl_help: str, label_help: str) -> Callable[[F], F]:
    """The options of a lease request, shared by `allocate` and `run`."""
    options = (
        click.option("-n", "--count", type=click.IntRange(min=1), help="How many GPUs."),
        click.option(
            "--gpu",
            "gpus",
            multiple=True,
            help="A GPU to lease, by index or UUID, or a MIG instance by its MIG- UUID "
            "(repeatable).",
        ),
        click.option(
            "--memory",
            callback=memory_size,
            metavar="SIZE",
            help="A share of this much memory (20G, 512M) on each of -n shared GPUs.",
        ),
        click.option("--mig", help="MIG instances of this profile (1g.10gb), -n of them."),
        click.option("--policy", help="Allocation policy (default: the daemon's)."),
        click.option("--ttl", type=click.FloatRange(min=0, min_open=True), help=ttl_help),
        click.option("--label", help=label_help),
        click.option("--wait", is_flag=True, help="Queue until the GPUs are free."),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0, min_open=True),
            help="Wait at most this long.",
        ),
    )

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


@contextlib.contextmanager
def daemon_client(ctx: click.Context) -> Iterator[Client]:
    """A client on the group's socket (its errors become CLI errors in `cli.errors`)."""
    from gpulease import Client

    with Client(ctx.obj.socket) as client:
        yield client


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
