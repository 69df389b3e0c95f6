"""`allocate --dry-run`: what the daemon would do with the request now, said as `allocate`
and `queue` say it, from its dry run (`POST /v1/leases/preview`); nothing is leased.

The command exits as the allocate would: 0 where it would be granted or would wait, else
the exit code of the refusal (4 nothing fits now, 6 over a limit, 2 a wrong request).
"""

from __future__ import annotations

import time
from typing import Any

import click

from gpuallocd.cli.common import format_expiry
from gpuallocd.cli.errors import refusal_exit_code
from gpuallocd.cli.output import echo_json, escape_unprintable
from gpuallocd.cli.quantities import format_duration

__all__ = ["show_preview"]


def show_preview(ctx: click.Context, found: dict[str, Any]) -> None:
    """Print the preview (JSON with --json), then exit as the allocate would."""
    if ctx.obj.json:
        echo_json(found)
    else:
        for line in preview_lines(found, time.time()):
            click.echo(line)
    refusal = found["refusal"]
    if refusal is not None:
        ctx.exit(refusal_exit_code(refusal))


def preview_lines(found: dict[str, Any], now: float) -> list[str]:
    """`would lease GPU 0,1 [...] (policy simple), expires in 1h`, or why not, and the
    waiter it would be."""
    lines = []
    if found["outcome"] == "granted":
        lines += _granted(found)
    refusal = found["refusal"]
    if refusal is not None:
        message = escape_unprintable(refusal["message"])
        lines.append(f"would be refused: {message} [{refusal['code']}]")
    waiter = found["would_wait"]
    if waiter is not None:
        from gpuallocd.model.queue_text import would_queue_line

        start = waiter["estimated_start_at"]
        ahead = None if start is None else f"in ~{format_duration(start - now)}"
        prefix = "with --wait: " if found["outcome"] == "refused" else ""
        lines.append(prefix + escape_unprintable(would_queue_line(waiter, ahead)))
    lines.append("(dry run: nothing was leased)")
    return lines


def _granted(found: dict[str, Any]) -> list[str]:
    gpus = ",".join(str(unit["index"]) for unit in found["gpus"])
    uuids = " ".join(unit["uuid"] for unit in found["gpus"])
    lines = [
        f"would lease GPU {gpus} [{uuids}] (policy {found['policy']}), "
        f"expires {format_expiry(found['expires_at'])}"
    ]
    if found["retry_of"] is not None:
        lines.append(f"the lease of this request id: {found['retry_of']}")
    if found["power_limit_watts"] is not None:
        caps = ", ".join(
            f"GPU {cap['index']} at {cap['limit_mw'] / 1000:g} W"
            + (" (the card's range)" if cap["clamped"] else "")
            for cap in found["power_caps"]
        )
        lines.append(
            f"power capped at {found['power_limit_watts']:g} W" + (f": {caps}" if caps else "")
        )
    terms = found["preemptible"]
    if terms is not None:
        lines.append(
            f"preemptible after {format_duration(terms['min_runtime_seconds'])}: warned, "
            f"{terms['signal']} {format_duration(terms['lead_seconds'])} later, ended "
            f"{format_duration(terms['grace_seconds'])} after the signal"
        )
    return lines
