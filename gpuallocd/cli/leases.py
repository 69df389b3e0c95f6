"""Commands that talk to a running daemon: status, leases, allocate, renew, free, revoke."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

import click

from gpuallocd.cli.common import (
    daemon_client,
    format_expiry,
    lease_request_options,
)
from gpuallocd.cli.output import echo_json, format_bytes, table

if TYPE_CHECKING:
    from gpulease import Client

__all__ = ["COMMANDS"]


def _gpus_text(lease: dict[str, Any]) -> str:
    return ",".join(str(g["index"]) for g in lease["gpus"])


def _print_lease(ctx: click.Context, lease: dict[str, Any]) -> None:
    if ctx.obj.json:
        echo_json(lease)
        return
    uuids = " ".join(g["uuid"] for g in lease["gpus"])
    click.echo(f"lease {lease['id']} ({lease['state']}): GPU {_gpus_text(lease)} [{uuids}]")
    if lease["state"] == "active":
        click.echo(f"expires {format_expiry(lease['expires_at'])}")


@click.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Every GPU: index, UUID, name, memory, state, holder, expiry."""
    with daemon_client(ctx) as client:
        gpus = client.request("GET", "/v1/gpus")["gpus"]
    if ctx.obj.json:
        echo_json({"gpus": gpus})
        return
    rows = [
        (
            g["index"],
            g["uuid"],
            g["name"],
            format_bytes(g["memory_total_bytes"]),
            g["state"],
            g["holder"]["user"] if g["holder"] else None,
            g["lease_id"],
            format_expiry(g["expires_at"]),
        )
        for g in gpus
    ]
    headers = ("IDX", "UUID", "NAME", "MEMORY", "STATE", "HOLDER", "LEASE", "EXPIRES")
    click.echo(table(headers, rows))


def _owned_by(lease: dict[str, Any], user: str) -> bool:
    return user in (lease["owner"]["user"], str(lease["owner"]["uid"]))


@click.command(name="leases")
@click.option("--user", help="Only this user's leases (name or uid).")
@click.pass_context
def list_leases(ctx: click.Context, user: str | None) -> None:
    """Active leases: id, GPUs, owner, pid, label, expiry."""
    with daemon_client(ctx) as client:
        leases = client.request("GET", "/v1/leases")["leases"]
    if user is not None:
        leases = [lease for lease in leases if _owned_by(lease, user)]
    if ctx.obj.json:
        echo_json({"leases": leases})
        return
    rows = [
        (
            lease["id"],
            _gpus_text(lease),
            lease["owner"]["user"],
            lease["pid"],
            lease["label"],
            lease["policy"],
            format_expiry(lease["expires_at"]),
        )
        for lease in leases
    ]
    click.echo(table(("LEASE", "GPUS", "USER", "PID", "LABEL", "POLICY", "EXPIRES"), rows))


@click.command()
@lease_request_options(ttl_help="Lifetime in seconds.", label_help="A note shown in `leases`.")
@click.pass_context
def allocate(
    ctx: click.Context,
    count: int | None,
    gpus: tuple[str, ...],
    policy: str | None,
    ttl: float | None,
    label: str | None,
    wait: bool,
    timeout: float | None,
) -> None:
    """Lease GPUs until freed or expired: -n N, or --gpu ID ... (or both)."""
    if count is None and not gpus:
        raise click.UsageError("give -n N or at least one --gpu")
    with daemon_client(ctx) as client:
        lease = client.allocate(
            count,
            gpus=list(gpus) or None,
            policy=policy,
            ttl=ttl,
            label=label,
            wait=wait,
            timeout=timeout,
        )
    _print_lease(ctx, lease.raw)


@click.command()
@click.argument("lease_id")
@click.option("--ttl", type=click.FloatRange(min=0, min_open=True), help="New lifetime in seconds.")
@click.pass_context
def renew(ctx: click.Context, lease_id: str, ttl: float | None) -> None:
    """Extend a lease's lifetime."""
    with daemon_client(ctx) as client:
        _print_lease(ctx, client.renew(lease_id, ttl).raw)


def _free_mine(client: Client) -> list[dict[str, Any]]:
    """Free every active lease of the calling user; those that ended meanwhile are skipped."""
    from gpulease import LeaseNotActive

    freed = []
    for lease in client.leases():
        if lease.owner_uid == os.getuid():
            with contextlib.suppress(LeaseNotActive):
                freed.append(client.free(lease.id).raw)
    return freed


@click.command()
@click.argument("lease_id", required=False)
@click.option("--mine", is_flag=True, help="Free every lease of yours.")
@click.pass_context
def free(ctx: click.Context, lease_id: str | None, mine: bool) -> None:
    """Give a lease's GPUs back: LEASE_ID, or --mine for all of yours."""
    if (lease_id is None) == (not mine):
        raise click.UsageError("give a LEASE_ID or --mine (not both)")
    with daemon_client(ctx) as client:
        if lease_id is not None:
            _print_lease(ctx, client.free(lease_id).raw)
            return
        freed = _free_mine(client)
    if ctx.obj.json:
        echo_json({"leases": freed})
        return
    if not freed:
        click.echo("you hold no lease")
    for lease in freed:
        _print_lease(ctx, lease)


@click.command()
@click.argument("lease_id")
@click.option("--reason", help="Recorded in the lease's history.")
@click.pass_context
def revoke(ctx: click.Context, lease_id: str, reason: str | None) -> None:
    """Take a lease away from its holder (root only)."""
    with daemon_client(ctx) as client:
        _print_lease(ctx, client.revoke(lease_id, reason).raw)


@click.command()
@click.pass_context
def queue(ctx: click.Context) -> None:
    """Requests waiting for GPUs, in the order they will be served."""
    with daemon_client(ctx) as client:
        waiters = client.queue()
    if ctx.obj.json:
        echo_json({"waiters": waiters})
        return
    rows = [
        (
            w["position"],
            w["owner"]["user"],
            w["pid"],
            w["count"],
            ",".join(str(g) for g in w["gpus"]) or None,
            w["label"],
        )
        for w in waiters
    ]
    click.echo(table(("POS", "USER", "PID", "COUNT", "GPUS", "LABEL"), rows))


@click.command()
@click.option("--lease", "lease_id", help="Only this lease's events.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.pass_context
def history(ctx: click.Context, lease_id: str | None, limit: int) -> None:
    """The ledger's record of lease transitions, oldest first."""
    with daemon_client(ctx) as client:
        events = client.history(lease_id, limit)
    if ctx.obj.json:
        echo_json({"events": events})
        return
    rows = [
        (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["at"])),
            e["lease_id"],
            e["event"],
            e["actor_uid"],
            e["detail"],
        )
        for e in events
    ]
    click.echo(table(("TIME", "LEASE", "EVENT", "ACTOR", "DETAIL"), rows))


COMMANDS = (status, list_leases, allocate, renew, free, revoke, queue, history)
