"""Advance reservations: `reserve` and `unreserve` (admins), `reservations` (everyone)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.output import echo_json, table
from gpuallocd.cli.quantities import Duration, format_duration, parse_duration

__all__ = ["COMMANDS", "parse_start", "reservation_rows"]


def parse_start(text: str) -> tuple[float | None, float | None]:
    """`(start_at, start_in_seconds)` from `now`, `+2h` / `in 2h` (from now, by the daemon's
    clock), `@UNIXTIME`, or a local date and time `2026-05-01T14:00` / `14:00` (today)."""
    cleaned = text.strip()
    if cleaned == "now":
        return None, 0.0
    if cleaned.startswith(("+", "in ")):
        try:
            return None, parse_duration(cleaned.removeprefix("+").removeprefix("in "))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--start") from None
    if cleaned.startswith("@"):
        try:
            return float(cleaned[1:]), None
        except ValueError:
            raise click.BadParameter(
                f"{text!r}: @ takes a Unix time", param_hint="--start"
            ) from None
    return _local_time(cleaned), None


def _local_time(text: str) -> float:
    try:
        if len(text) <= 5 and ":" in text:
            hour, minute = (int(part) for part in text.split(":"))
            today = datetime.datetime.now().replace(second=0, microsecond=0)
            return today.replace(hour=hour, minute=minute).timestamp()
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: give now, +2h, @UNIXTIME, 14:00 or 2026-05-01T14:00",
            param_hint="--start",
        ) from None


def _when(at: float) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(at))


def _waits(reservation: dict[str, Any]) -> str:
    waits = reservation.get("waiting_for") or []
    leases = ", ".join(
        f"GPU {','.join(map(str, w['gpus']))} of {w['user']} until {_when(w['until'])}"
        for w in waits
    )
    return f"waits for {leases}" if leases else ""


def reservation_rows(reservations: list[dict[str, Any]], now: float) -> list[tuple[Any, ...]]:
    """One row per reservation: id, state, GPUs, for whom, window, what it waits for, why."""
    return [
        (
            r["id"],
            r["state"],
            ",".join(str(i) for i in r["gpu_indices"]),
            r["for"],
            f"{_when(r['start_at'])} - {_when(r['end_at'])}",
            format_duration(r["start_at"] - now) if r["start_at"] > now else "-",
            _waits(r) or r["reason"],
        )
        for r in reservations
    ]


RESERVATION_HEADERS = ("ID", "STATE", "GPUS", "FOR", "WINDOW", "STARTS IN", "NOTE")


def _gpu_ref(text: str) -> str | int:
    return int(text) if text.isascii() and text.isdigit() else text


@click.command(short_help="Reserve GPUs for a user or a group ahead (admins)")
@click.option("-n", "--count", type=click.IntRange(min=1), help="How many GPUs (chosen).")
@click.option("--gpu", "gpus", multiple=True, help="A GPU by index or UUID (repeatable).")
@click.option("--start", "start", required=True, help="now, +2h, @UNIXTIME, 14:00 or a date.")
@click.option("--duration", type=Duration(), required=True, help="How long, e.g. 2h.")
@click.option("--user", help="The user it is for.")
@click.option("--group", help="The group whose members it is for.")
@click.option("--reason", required=True, help="Why; kept in the record.")
@click.option("--policy", help="The policy that chooses the GPUs (default: the daemon's).")
@click.pass_context
def reserve(
    ctx: click.Context,
    count: int | None,
    gpus: tuple[str, ...],
    start: str,
    duration: float,
    user: str | None,
    group: str | None,
    reason: str,
    policy: str | None,
) -> None:
    """Reserve GPUs for a user or a group from a time, for a while (admins).

    From its start the GPUs go only to its members; before it, others may lease them only
    for a TTL that ends by the start.
    """
    if (count is None) == (not gpus):
        raise click.UsageError("give --count N or --gpu G (repeatable)")
    if (user is None) == (group is None):
        raise click.UsageError("give --user U or --group G")
    start_at, start_in = parse_start(start)
    with daemon_client(ctx) as client:
        made = client.reserve(
            count=count,
            gpus=[_gpu_ref(g) for g in gpus],
            start_at=start_at,
            start_in=start_in,
            duration=duration,
            user=user,
            group=group,
            reason=reason,
            policy=policy,
        )
    if ctx.obj.json:
        echo_json(made)
        return
    click.echo(table(RESERVATION_HEADERS, reservation_rows([made], time.time())))


@click.command(short_help="Advance reservations to come and running")
@click.option("--all", "everything", is_flag=True, help="Also those that ended or were cancelled.")
@click.pass_context
def reservations(ctx: click.Context, everything: bool) -> None:
    """Advance reservations to come and running: GPUs, for whom, when, what they wait for."""
    with daemon_client(ctx) as client:
        found = client.reservations(include_ended=everything)
    if ctx.obj.json:
        echo_json({"reservations": found})
        return
    click.echo(table(RESERVATION_HEADERS, reservation_rows(found, time.time())))


@click.command(short_help="Cancel a reservation (admins)")
@click.argument("reservation_id")
@click.pass_context
def unreserve(ctx: click.Context, reservation_id: str) -> None:
    """Cancel a reservation (admins); its GPUs are everyone's again at once."""
    with daemon_client(ctx) as client:
        ended = client.unreserve(reservation_id)
    if ctx.obj.json:
        echo_json(ended)
        return
    click.echo(f"reservation {ended['id']} cancelled")


COMMANDS = (reserve, reservations, unreserve)
