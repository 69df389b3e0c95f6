"""Commands of preemption (docs/preemption.md): `preempt` (admins) and `checkpoint-done` (the
job of a preemptible lease, from a shell)."""

from __future__ import annotations

import os
import time

import click
from gpulease.lease_id import LEASE_ID_VARIABLE

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.output import echo_json, escape_unprintable

__all__ = ["COMMANDS"]


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


@click.command(short_help="Preempt a preemptible lease (root and admins)")
@click.argument("lease_id")
@click.option("--reason", help="Recorded in the admin log and the lease's history.")
@click.pass_context
def preempt(ctx: click.Context, lease_id: str, reason: str | None) -> None:
    """Preempt a preemptible lease (root and admins): warned now, its signal after its lead,
    ended at its checkpoint or its deadline. Refused before its minimum runtime."""
    with daemon_client(ctx) as client:
        answer = client.preempt(lease_id, reason)
    if ctx.obj.json:
        echo_json(answer)
        return
    record = answer["preemption"]
    click.echo(escape_unprintable(record["explanation"]))
    click.echo(
        f"lease {lease_id}: {record['signal']} at {_clock(record['signal_at'])}, "
        f"deadline {_clock(record['deadline_at'])} (or at its checkpoint)"
    )


@click.command(name="checkpoint-done", short_help="Tell the daemon your job saved its checkpoint")
@click.argument("path", required=False)
@click.option(
    "--lease",
    "lease_id",
    help="The lease (default: GPUALLOCD_LEASE_ID, as `run` and `gpu_lease` set it).",
)
@click.pass_context
def checkpoint_done(ctx: click.Context, path: str | None, lease_id: str | None) -> None:
    """Tell the daemon your job saved its checkpoint at PATH (recorded, never opened; made
    absolute here). During a preemption it ends the lease now; otherwise it records progress.
    Only the lease's owner may."""
    lease_id = lease_id or os.environ.get(LEASE_ID_VARIABLE, "").strip() or None
    if lease_id is None:
        raise click.UsageError("no lease: give --lease ID (or run this under `gpuallocctl run`)")
    where = None if path is None else os.path.abspath(path)
    with daemon_client(ctx) as client:
        answer = client.checkpoint_done(lease_id, where)
    if ctx.obj.json:
        echo_json(answer)
        return
    click.echo(f"lease {lease_id}: {escape_unprintable(answer['detail'])}")


COMMANDS = (preempt, checkpoint_done)
