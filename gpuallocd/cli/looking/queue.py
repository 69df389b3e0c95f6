"""`queue` (who waits, why, since when, until when) and `history` (what happened to leases)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import click

from gpuallocd.cli.common import daemon_client, user_of
from gpuallocd.cli.looking.reservation_text import (
    reservation_history_rows,
    reservation_lines,
    with_priorities,
)
from gpuallocd.cli.output import echo_json
from gpuallocd.cli.quantities import energy_text, format_duration
from gpuallocd.cli.style import Styled, colour_enabled, render_table

__all__ = ["COMMANDS", "queue_rows"]

QUEUE_HEADERS = ("POS", "USER", "PID", "WANTS", "WAITED", "START", "REASON", "LABEL")
REASON_COLOURS = {"Resources": "yellow", "Reserved": "magenta", "QuotaLimit": "red"}


def _wants(waiter: dict[str, Any]) -> str:
    named = ",".join(str(g) for g in waiter.get("gpus") or [])
    count = waiter.get("count")
    if named and (count is None or count <= len(waiter["gpus"])):
        return f"GPU {named}"
    text = f"{count} GPU" + ("" if count == 1 else "s")
    return f"{text} incl. {named}" if named else text


def _hhmm(at: float) -> str:
    return time.strftime("%H:%M", time.localtime(at))


def _reason(waiter: dict[str, Any]) -> Styled:
    """`Resources: will preempt 3f2a of alice at 14:02` (docs/preemption.md)."""
    reason = str(waiter.get("reason", "-"))
    parts = [
        f"preempting {p['lease_id']} of {p['user']} (ends by {_hhmm(p['deadline_at'])})"
        for p in waiter.get("preempting") or []
    ]
    parts += [
        f"will preempt {p['lease_id']} of {p['user']} at {_hhmm(p['at'])}"
        for p in waiter.get("will_preempt") or []
    ]
    text = f"{reason}: {'; '.join(parts)}" if parts else reason
    return Styled(text, fg=REASON_COLOURS.get(reason))


def _start(waiter: dict[str, Any], now: float) -> str | None:
    start = waiter.get("estimated_start_at")
    if start is None:
        return None
    return time.strftime("%H:%M", time.localtime(start)) + f" (~{format_duration(start - now)})"


def queue_rows(waiters: list[dict[str, Any]], now: float) -> list[tuple[object, ...]]:
    """The rows of the queue table (the label may be cut to fit)."""
    return [
        (
            w["position"],
            w["owner"]["user"],
            w["pid"],
            _wants(w) + (" (preemptible)" if w.get("preemptible") else ""),
            format_duration(w.get("waited_seconds", now - w.get("since", now))),
            _start(w, now),
            _reason(w),
            w["label"],
        )
        for w in waiters
    ]


@click.command(short_help="Requests waiting for GPUs, in the order they are served")
@click.option("-v", "--verbose", is_flag=True, help="Also say what each request waits for.")
@click.pass_context
def queue(ctx: click.Context, verbose: bool) -> None:
    """Requests waiting for GPUs, in the order they will be served (positions from 1).

    REASON is why, as squeue says it: Resources (too few of the GPUs it can use are free),
    Reserved (free ones are held for a request ahead). START is the earliest start if every
    lease ends at its expiry; renewals push it back.
    """
    with daemon_client(ctx) as client:
        answer = client.request("GET", "/v1/queue")
    waiters = answer["waiters"]
    if ctx.obj.json:
        echo_json(answer)
        return
    now = time.time()
    headers: tuple[str, ...] = QUEUE_HEADERS
    rows = queue_rows(waiters, now)
    if answer.get("order") == "fair-share":
        headers, rows = with_priorities(headers, waiters, rows)
    click.echo(render_table(headers, rows, colour=colour_enabled()))
    click.echo(reservation_lines(answer.get("reservations") or [], now), nl=False)
    if verbose:
        for waiter in waiters:
            click.echo(f"{waiter['position']}: {waiter.get('reason_detail') or '-'}")
            if waiter.get("priority"):
                click.echo(f"   priority: {waiter['priority']['why']}")


@click.command(short_help="The ledger's record of lease transitions, with who did each")
@click.option("--lease", "lease_id", help="Only this lease's events.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.pass_context
def history(ctx: click.Context, lease_id: str | None, limit: int) -> None:
    """The ledger's record of lease transitions, oldest first, with who did each: the
    latest --limit of them, reservation events included."""
    with daemon_client(ctx) as client:
        answer = client.request("GET", f"/v1/history?{urlencode(_query(lease_id, limit))}")
    events = answer["events"]
    if ctx.obj.json:
        echo_json(answer)
        return
    rows: list[tuple[object, ...]] = [
        (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["at"])),
            e["lease_id"],
            e["event"],
            _actor(e),
            e["detail"],
            _energy(e.get("energy")),
        )
        for e in events
    ]
    rows += [(*row, "") for row in reservation_history_rows(answer.get("reservation_events") or [])]
    rows.sort(key=lambda row: str(row[0]))
    rows = rows[-limit:]  # lease and reservation events together: the latest `limit`
    headers = ("TIME", "LEASE", "EVENT", "BY", "DETAIL", "KWH")
    click.echo(render_table(headers, rows, colour=colour_enabled()))


def _actor(event: dict[str, Any]) -> str:
    """BY: the user's name, or the daemon rule that acted (`idle-reclaim`), not root."""
    from gpuallocd.model.actors import actor_name

    uid = event["actor_uid"]
    return user_of(uid) if uid is None else actor_name(uid, event.get("detail"), user_of)


def _energy(energy: dict[str, Any] | None) -> str:
    """An ended lease's energy (`-` where none was read)."""
    return "-" if not energy else energy_text(energy["kwh"], energy["estimate"])


def _query(lease_id: str | None, limit: int) -> dict[str, Any]:
    return {"limit": limit} if lease_id is None else {"lease": lease_id, "limit": limit}


COMMANDS = (queue, history)
