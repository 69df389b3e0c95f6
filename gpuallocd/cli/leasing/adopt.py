"""`adopt`: a user's own work already running on GPUs becomes their lease; `unleased`: the
processes using GPUs without a lease, and what was done about them (docs/enforcement.md)."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from gpuallocd.cli.common import daemon_client, user_of
from gpuallocd.cli.errors import EXIT_PERMISSION, CliError
from gpuallocd.cli.output import echo_json, escape_unprintable, table
from gpuallocd.host.proc import process_owner

__all__ = ["COMMANDS"]


def _target(client: Any, text: str | None) -> dict[str, Any]:
    """`PID` or `GPU`: `pid:N` and `gpu:N` say which; a bare number is a pid where it is one
    of the caller's processes, else a GPU index; anything else a GPU's or MIG instance's UUID.
    A bare number that is another user's process and no GPU index of the node is refused
    here, naming the owner (it would else read as an unknown GPU)."""
    if text is None:
        return {}
    kind, _, value = text.partition(":")
    if kind in ("pid", "gpu") and value:
        return {kind: int(value) if value.isdigit() else value}
    if not (text.isascii() and text.isdigit()):
        return {"gpu": text}
    number, owner = int(text), process_owner(int(text))
    if owner == os.getuid():
        return {"pid": number}
    if owner is not None and number not in {gpu.index for gpu in client.status()}:
        raise CliError(
            f"process {number} belongs to {user_of(owner)}; you can adopt only your own",
            EXIT_PERMISSION,
        )
    return {"gpu": number}


@click.command(short_help="Make your processes already on GPUs into your leases")
@click.argument("target", required=False, metavar="[PID|GPU]")
@click.pass_context
def adopt(ctx: click.Context, target: str | None) -> None:
    """Turn your own processes already running on GPUs into your leases, bound to them.

    TARGET: a pid (`pid:N`, or a number that is one of your processes), a GPU (`gpu:N`,
    another number as an index, a `GPU-` or `MIG-` UUID), or nothing for all your processes
    on GPUs. Each lease ends when its process does, and counts to your limits."""
    with daemon_client(ctx) as client:
        leases = client.adopt(**_target(client, target))
    if ctx.obj.json:
        echo_json({"leases": [lease.raw for lease in leases]})
        return
    for lease in leases:
        gpus = ", ".join(str(g["index"]) for g in lease.raw["gpus"])
        click.echo(f"lease {lease.id}: GPU {gpus} for pid {lease.pid} of {lease.user}")


@click.command(short_help="Processes on GPUs without a lease, and what was done")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.pass_context
def unleased(ctx: click.Context, limit: int) -> None:
    """Processes using GPUs without a lease now, and the last actions taken on such processes
    (reported, terminated, killed, adopted), oldest first."""
    with daemon_client(ctx) as client:
        data = client.unleased(limit)
    if ctx.obj.json:
        echo_json(data)
        return
    click.echo(f"unleased_use = {data['mode']}")
    for process in data["processes"]:
        click.echo(f"now: {escape_unprintable(process['message'])}")
    rows = [
        (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["at"])),
            e["action"],
            e["pid"],
            e["user"],
            e["lease_id"],
            e["detail"],
        )
        for e in data["events"]
    ]
    click.echo(table(("TIME", "ACTION", "PID", "USER", "LEASE", "DETAIL"), rows))


COMMANDS = (adopt, unleased)
