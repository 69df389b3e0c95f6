"""Admin commands: drain and undrain GPUs, the record of admin actions, and root's `release`
of a GPU that its former holder's processes keep draining."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.output import echo_json, escape_unprintable, table
from gpuallocd.cli.style import short_uuid

__all__ = ["COMMANDS"]


def _gpu_ref(text: str) -> str | int:
    return int(text) if text.isascii() and text.isdigit() else text


def _print_gpus(ctx: click.Context, gpus: list[dict[str, Any]]) -> None:
    if ctx.obj.json:
        echo_json({"gpus": gpus})
        return
    for gpu in gpus:
        line = f"GPU {gpu['index']} ({gpu['uuid']}): {gpu['state']}"
        if gpu["state"] == "draining" and gpu["holder"]:
            line += f" until lease {gpu['lease_id']} of {gpu['holder']['user']} ends"
        click.echo(line)


@click.command(short_help="Take GPUs out of service (admins)")
@click.argument("gpus", nargs=-1, required=True)
@click.option("--reason", required=True, help="Why; shown in status and kept in the record.")
@click.pass_context
def drain(ctx: click.Context, gpus: tuple[str, ...], reason: str) -> None:
    """Take GPUs out of service (admins): no new lease; leases on them run to their end."""
    with daemon_client(ctx) as client:
        statuses = client.drain([_gpu_ref(g) for g in gpus], reason)
    _print_gpus(ctx, [s.raw for s in statuses])


@click.command(short_help="Put drained GPUs back in service (admins)")
@click.argument("gpus", nargs=-1, required=True)
@click.pass_context
def undrain(ctx: click.Context, gpus: tuple[str, ...]) -> None:
    """Put drained GPUs back in service (admins)."""
    with daemon_client(ctx) as client:
        statuses = client.undrain([_gpu_ref(g) for g in gpus])
    _print_gpus(ctx, [s.raw for s in statuses])


@click.command(
    name="admin-log",
    short_help="Admin actions (revoke, drain, undrain), with who and why",
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.pass_context
def admin_log(ctx: click.Context, limit: int) -> None:
    """Admin actions (revoke, drain, undrain) with the admin's name and reason, oldest first."""
    with daemon_client(ctx) as client:
        actions = client.admin_actions(limit)
    if ctx.obj.json:
        echo_json({"actions": actions})
        return
    rows = [
        (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["at"])),
            a["action"],
            short_uuid(a["target"]),  # a GPU's UUID short (`-v` of status gives it whole)
            a["actor"]["user"],
            a["reason"],
        )
        for a in actions
    ]
    click.echo(table(("TIME", "ACTION", "TARGET", "BY", "REASON"), rows))


@click.command(short_help="Let a draining GPU be granted again (root only)")
@click.argument("gpu")
@click.pass_context
def release(ctx: click.Context, gpu: str) -> None:
    """Let a draining GPU be granted again, although processes still run on it (root only).

    After a lease ends, a GPU on which processes of its former holder still run is
    `draining` and is not granted until they are gone. GPU is a UUID or an index.
    """
    with daemon_client(ctx) as client:
        status = client.request("POST", f"/v1/gpus/{quote(gpu, safe='')}/release")
    if ctx.obj.json:
        echo_json(status)
        return
    uuid = escape_unprintable(status["uuid"])
    click.echo(f"GPU {status['index']} ({uuid}) is {status['state']} now")


COMMANDS = (drain, undrain, admin_log, release)
