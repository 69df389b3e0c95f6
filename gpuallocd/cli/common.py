"""What every daemon-facing command shares: the client, error handling, time display."""

from __future__ import annotations

import contextlib
import functools
import pwd
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuallocd.cli.quantities import ByteSize, Duration, Watts, format_left

if TYPE_CHECKING:
    from gpulease import Client

__all__ = [
    "MIN_TTL_SECONDS",
    "TTL",
    "check_visible",
    "daemon_client",
    "format_expiry",
    "lease_request_options",
    "user_known",
    "user_of",
]

F = TypeVar("F", bound=Callable[..., Any])
MIN_TTL_SECONDS = 10.0
TTL = Duration(MIN_TTL_SECONDS, why_minimum="a lease this short expires before it is used")


@functools.lru_cache(maxsize=256)
def user_of(uid: int | None) -> str:
    """The user name of a uid on this node; the uid itself where it has none, `?` if unknown."""
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_known(name: str) -> bool:
    """Whether this node's user database has a user named `name` (the CLI's own lookups,
    once per process: the daemon's go through host/users.py)."""
    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a NUL byte in the name
        return False
    return True


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
            type=ByteSize(),
            metavar="SIZE",
            help="A share of this much memory (20G, 512M) on each of -n shared GPUs.",
        ),
        click.option("--mig", help="MIG instances of this profile (1g.10gb), -n of them."),
        click.option("--policy", help="Allocation policy (default: the daemon's)."),
        click.option("--ttl", type=TTL, help=ttl_help),
        click.option("--label", help=label_help),
        click.option(
            "--min-free-memory",
            type=ByteSize(),
            help="Only GPUs with at least this much memory free: 20G, 512M (GiB, MiB).",
        ),
        click.option(
            "--power-limit",
            type=Watts(),
            metavar="WATTS",
            help="Cap each leased GPU's power while the lease lasts: 250W.",
        ),
        click.option("--wait", is_flag=True, help="Queue until the GPUs are free."),
        click.option(
            "--timeout",
            type=Duration(),
            help="Wait at most this long: 90s, 30m, 2h (default: as long as it takes).",
        ),
    )

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def check_visible(mig: str | None, visible: str) -> None:
    """Refuse `--visible index` with `--mig` before anything is leased: a MIG instance has
    no index, CUDA names it by its MIG- UUID only."""
    if mig is not None and visible == "index":
        raise click.UsageError(
            "--visible index cannot name MIG instances (they have no index, CUDA takes "
            "their MIG- UUIDs): leave --visible at uuid"
        )


@contextlib.contextmanager
def daemon_client(ctx: click.Context) -> Iterator[Client]:
    """A client on the group's socket (its errors become CLI errors in `cli.errors`)."""
    from gpulease import Client

    with Client(ctx.obj.socket) as client:
        yield client


def format_expiry(expires_at: float | None, now: float | None = None) -> str | None:
    """`in 59m12s` style (the tables' durations); None where there is nothing to show."""
    if expires_at is None:
        return None
    left = format_left(expires_at, time.time() if now is None else now)
    return left if left == "due" else f"in {left}"
