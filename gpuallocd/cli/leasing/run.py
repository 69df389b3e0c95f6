"""`gpuallocctl run` and `shell`: lease GPUs for one command (or a shell), and give them
back when it ends.

Their options, read by click, here; what they do once read, in `runner.py` (which the plain
forms of `run` also reach without click: `quick_run.py`).

`run --lease ID` runs the command under a lease already granted, such as an agent's, whose
holder (the MCP server) did not start the command (`run_joined`): `run` joins the lease
(`POST /v1/leases/ID/join`: the daemon counts this process, known by SO_PEERCRED, among the
lease's and takes its owner's only), gives the command the lease's environment, renews the
lease while it runs and stops it on a revoke, but never frees the lease: a bound lease ends
when its holder and every process that joined it have exited. A lease tied to no process has
nothing to join, and is only renewed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import click

from gpuallocd.cli.common import (
    check_visible,
    lease_request_options,
    preemption_arguments,
    preemption_options,
)
from gpuallocd.cli.exit_codes import EXIT_REVOKED
from gpuallocd.cli.leasing import runner
from gpuallocd.cli.quick_exit import Finished

__all__ = ["COMMANDS", "run_joined", "run_leased"]


_visible_option = click.option(
    "--visible",
    type=click.Choice(["uuid", "index"]),
    default="uuid",
    show_default=True,
    help="How CUDA_VISIBLE_DEVICES names the GPUs.",
)

_lease_option = click.option(
    "--lease",
    "lease_id",
    metavar="ID",
    help="Run under this lease of yours, already granted (an agent's, say), instead of "
    "taking one: the command joins it and renews it while it runs; it is not freed after.",
)
# what --lease leaves to the lease it names
_REQUEST_OPTIONS = ("count", "gpus", "memory", "mig", "policy", "min_free_memory", "power_limit")

_nested_option = click.option(
    "--nested",
    type=click.Choice(["reuse", "new"]),
    default="reuse",
    show_default=True,
    help="Inside a lease (GPUALLOCD_LEASE_ID, as under another run): use it, or take a new one.",
)


def _queue_display(ctx: click.Context, wait: bool) -> runner.QueueDisplay:
    """With --wait, the waiting line and Ctrl-C's leaving of the queue (`waiting.py`, loaded
    only then); without, nothing."""
    if not wait:
        return contextlib.nullcontext

    def display() -> AbstractContextManager[None]:
        from gpuallocd.cli.leasing.waiting import queued

        return queued(ctx, wait)

    return display


def run_leased(
    ctx: click.Context,
    command: Sequence[str],
    request: dict[str, Any],
    granted_to: Any = None,
) -> int:
    """Lease as `request` says (gpu_lease's arguments), run `command` under it, free it;
    `granted_to(lease_id)` is told of the grant (`run --requeue`'s supervisor).

    While queued, the waiting line shows on stderr and Ctrl-C leaves the queue (exit 130).
    """
    check_visible(request.get("mig"), request.get("visible", "uuid"))
    display = _queue_display(ctx, bool(request.get("wait")))
    return runner.run_leased(
        ctx.obj.socket, ctx.obj.json, command, request, display, granted_to=granted_to
    )


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
        watch = RevokeWatch(lambda: Client(ctx.obj.socket), lease.id, runner.print_notice)

        def started() -> None:
            renewer.start()
            watch.start()

        try:
            code = runner.run_command(command, started=started)
        finally:
            watch.command_ended.set()
            renewer.stop()
        revoked = runner.is_revoked(client, lease.id)
    if revoked:
        reason = runner.revocation_reason(ctx.obj.socket, lease.id)
        runner.say(f"gpuallocctl: lease {lease.id} was revoked ({reason}); the command was stopped")
        return EXIT_REVOKED
    return code


@click.command(
    context_settings={"allow_interspersed_args": False},
    short_help="Lease GPUs, run COMMAND on them, free them when it exits",
)
@lease_request_options(
    ttl_help="Lease lifetime between renewals: 10m, 1h or seconds.",
    label_help="A note shown in `leases` (default: the command).",
)
@_visible_option
@_nested_option
@preemption_options(requeue=True)
@_lease_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    /,
    command: tuple[str, ...],
    label: str | None,
    lease_id: str | None,
    **request: Any,
) -> None:
    """Lease GPUs, run COMMAND with CUDA_VISIBLE_DEVICES set, free them when it exits.

    Exits with the command's exit code; 7 if an admin revoked the lease (the command is
    stopped: SIGTERM, then SIGKILL); 8 if it was preempted (without --requeue).
    Example: gpuallocctl run -n 2 -- python train.py.
    With --lease ID, under a lease already granted: gpuallocctl run --lease ID -- CMD
    """
    if lease_id is not None:
        asked = [name for name in _REQUEST_OPTIONS if request.get(name) not in (None, ())]
        asked += [name for name in ("preemptible", "requeue") if request.get(name)]
        if asked or label is not None or request.get("wait") or request.get("timeout"):
            raise click.UsageError("--lease runs under that lease: it takes no request options")
        raise Finished(run_joined(ctx, command, lease_id, request))
    requeue = bool(request.pop("requeue"))
    terms = preemption_arguments(request, requeue=requeue)
    arguments = {**terms, **runner.lease_request(command, label, request)}
    if not requeue:
        raise Finished(run_leased(ctx, command, arguments))
    from gpulease import Client

    from gpuallocd.cli.leasing.preempted import run_requeued

    def attempt(request: dict[str, Any], granted_to: Any) -> int:
        return run_leased(ctx, command, request, granted_to)

    raise Finished(run_requeued(lambda: Client(ctx.obj.socket), attempt, arguments))


@click.command(name="shell", short_help="Open your shell under a lease; exit it to free the lease")
@lease_request_options(
    ttl_help="Lease lifetime between renewals: 10m, 1h or seconds.",
    label_help="A note shown in `leases` (default: shell).",
)
@_visible_option
@_nested_option
@click.pass_context
def shell(ctx: click.Context, /, label: str | None, **request: Any) -> None:
    """Open your shell ($SHELL) under a lease, as salloc does; exit the shell to free it.

    Example: gpuallocctl shell -n 2 --wait
    """
    login_shell = os.environ.get("SHELL") or "/bin/sh"
    request = runner.lease_request([login_shell], label or "shell", request)
    raise Finished(run_leased(ctx, [login_shell], request))


COMMANDS = (run, shell)
