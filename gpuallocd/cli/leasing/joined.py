"""`gpuallocctl run --lease ID`: a command run under a lease already granted, as its own work.

For work started apart from the lease's holder, such as an agent's job, which its client
starts beside the MCP server that holds the lease: `run` asks the daemon to count this
process among the lease's (`POST /v1/leases/ID/join`: the daemon knows the process by
SO_PEERCRED and takes its owner's only), gives the command the lease's environment, renews
the lease while the command runs, and stops the command if the lease is revoked, as `run`
does. It never frees the lease: a bound lease ends when its holder and every process that
joined it have exited, or when it is freed, revoked or expires. A lease tied to no process
(`keep`, `gpuallocctl allocate`) has nothing to join: `run` only renews it while the
command runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import click

from gpuallocd.cli.errors import EXIT_REVOKED
from gpuallocd.cli.leasing.run import print_notice, revocation, run_command

__all__ = ["run_joined"]


def run_joined(
    ctx: click.Context, command: Sequence[str], lease_id: str, options: dict[str, Any]
) -> int:
    """Run `command` as a process of lease `lease_id` (the caller's); its exit code, or
    EXIT_REVOKED where the lease was revoked under it."""
    from gpulease import Client, visible_devices_env
    from gpulease.renewer import Renewer

    from gpuallocd.cli.leasing.revoke_watch import RevokeWatch

    ttl = options.get("ttl")
    with Client(ctx.obj.socket) as client, Client(ctx.obj.socket) as renewing:
        lease = client.lease(lease_id)
        joined = bool(lease.raw.get("bound_to_process"))
        lease = client.join(lease_id) if joined else client.renew(lease_id, ttl)
        os.environ.update(visible_devices_env(lease, options.get("visible", "uuid")))
        if not ctx.obj.json:
            how = "joined" if joined else "renewed while the command runs"
            click.echo(f"gpuallocctl: lease {lease.id} ({how})", err=True)
        renewer = Renewer(renewing, lease, ttl, on_revoke="warn")
        watch = RevokeWatch(lambda: Client(ctx.obj.socket), lease.id, print_notice)

        def started() -> None:
            renewer.start()
            watch.start()

        try:
            code = run_command(command, started=started)
        finally:
            watch.command_ended.set()
            renewer.stop()
        reason = revocation(client, lease.id)
    if reason is not None:
        click.echo(
            f"gpuallocctl: lease {lease.id} was revoked ({reason}); the command was stopped",
            err=True,
        )
        return EXIT_REVOKED
    return code
