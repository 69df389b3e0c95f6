"""Commands on leases: leases, allocate, renew, free, revoke."""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from typing import TYPE_CHECKING, Any

import click

from gpuallocd.cli.common import (
    TTL,
    check_visible,
    daemon_client,
    format_expiry,
    lease_request_options,
    preemption_arguments,
    preemption_options,
    preemption_text,
    user_known,
)
from gpuallocd.cli.errors import EXIT_USAGE, CliError
from gpuallocd.cli.leasing.dry_run import show_preview
from gpuallocd.cli.leasing.waiting import queued
from gpuallocd.cli.output import echo_json, escape_unprintable, format_bytes
from gpuallocd.cli.quantities import format_duration, format_left
from gpuallocd.cli.style import colour_enabled, render_table
from gpuallocd.cli.table_fit import terminal_width
from gpuallocd.model.power import cap_text

if TYPE_CHECKING:
    from gpulease import Client

__all__ = ["COMMANDS", "export_lines"]


def _gpus_text(lease: dict[str, Any]) -> str:
    return ",".join(str(g["index"]) for g in lease["gpus"])


def give_back_hint(lease_id: str) -> str:
    """How to give the lease back before it expires (a detached lease is not freed by
    closing the shell it was taken in)."""
    return f"give it back when done: gpuallocctl free {lease_id}  (or all yours: free --mine)"


def unit_text(lease: dict[str, Any]) -> str:
    """What the lease holds of each of its GPUs: `GPU`, `MIG 1g.10gb`, `share 20 GiB`."""
    units = lease["gpus"]
    if not units:
        return "-"
    first = units[0]
    if first.get("kind") == "mig":
        return f"MIG {first.get('mig_profile') or '?'}"
    if first.get("kind") == "share" or first.get("memory_bytes") is not None:
        return f"share {format_bytes(first.get('memory_bytes'))}"
    return "GPU"


def _cap_cell(lease: dict[str, Any]) -> str | None:
    cap = lease.get("power_limit_watts")
    return None if cap is None else f"{cap:g} W"


def _print_lease(ctx: click.Context, lease: dict[str, Any]) -> None:
    if ctx.obj.json:
        echo_json(lease)
        return
    uuids = " ".join(g["uuid"] for g in lease["gpus"])
    click.echo(f"lease {lease['id']} ({lease['state']}): GPU {_gpus_text(lease)} [{uuids}]")
    share = lease["gpus"][0].get("memory_bytes") if lease["gpus"] else None
    if share is not None:
        click.echo(f"share {format_bytes(share)} on each GPU (GPUALLOCD_MEMORY_BYTES={share})")
    if lease["state"] == "active":
        click.echo(f"expires {format_expiry(lease['expires_at'])}")
    capped = cap_text(lease)
    if capped:
        click.echo(capped)
    terms = lease.get("preemptible")
    if terms and lease["state"] == "active":
        not_before = time.strftime(
            "%H:%M", time.localtime(lease["created_at"] + terms["min_runtime_seconds"])
        )
        click.echo(
            f"preemptible from {not_before}: warned, {terms['signal']} "
            f"{format_duration(terms['lead_seconds'])} later, ended at your checkpoint "
            f"(gpuallocctl checkpoint-done) or {format_duration(terms['grace_seconds'])} "
            "after the signal"
        )


def export_lines(environment: dict[str, str]) -> str:
    """`export NAME=VALUE` lines for a shell's `eval`, values quoted for the shell."""
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in environment.items())


def _print_export(lease: Any, visible: str) -> None:
    from gpulease import visible_devices_env

    click.echo(export_lines(visible_devices_env(lease, visible)))
    left = format_left(lease.expires_at, time.time())
    click.echo(
        f"gpuallocctl: lease {lease.id}: GPU {_gpus_text(lease.raw)}, {left} left; "
        f"give it back with: gpuallocctl free {lease.id}",
        err=True,
    )


def _owned_by(lease: dict[str, Any], user: str) -> bool:
    return user in (lease["owner"]["user"], str(lease["owner"]["uid"]))


@click.command(short_help="Lease GPUs until freed or expired")
@lease_request_options(
    ttl_help="Lifetime: 30m, 8h, 2d or seconds (default: the daemon's, 1h).",
    label_help="A note shown in `leases`.",
)
@click.option(
    "--export",
    "export",
    is_flag=True,
    help="Print `export CUDA_VISIBLE_DEVICES=... GPUALLOCD_LEASE_ID=...` lines for eval.",
)
@click.option(
    "--visible",
    type=click.Choice(["uuid", "index"]),
    default="uuid",
    show_default=True,
    help="With --export: how CUDA_VISIBLE_DEVICES names the GPUs.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what the daemon would do now (GPUs, or why not and the wait), leasing nothing.",
)
@preemption_options(requeue=False)
@click.pass_context
def allocate(
    ctx: click.Context,
    /,
    count: int | None,
    gpus: tuple[str, ...],
    memory: int | None,
    mig: str | None,
    policy: str | None,
    ttl: float | None,
    label: str | None,
    min_free_memory: int | None,
    power_limit: int | None,
    wait: bool,
    timeout: float | None,
    export: bool,
    visible: str,
    dry_run: bool,
    **preemption: Any,
) -> None:
    """Lease GPUs until freed or expired: -n N, or --gpu ID ... (or both); --memory SIZE for
    a share of a GPU, --mig PROFILE for MIG instances.

    For a notebook or a shell: eval "$(gpuallocctl allocate -n 1 --ttl 8h --export)".
    """
    if count is None and not gpus and memory is None and mig is None:
        raise click.UsageError("give -n N, --gpu, --memory or --mig")
    if export and ctx.obj.json:
        raise click.UsageError("use --export or --json, not both")
    if export and dry_run:
        raise click.UsageError("use --export or --dry-run, not both")
    if export:
        check_visible(mig, visible)
    request = {
        "gpus": list(gpus) or None,
        "policy": policy,
        "ttl": ttl,
        "label": label,
        "min_free_memory_bytes": min_free_memory,
        "wait": wait,
        "timeout": timeout,
        "memory_bytes": memory,
        "mig_profile": mig,
        "power_limit_watts": power_limit,
        **preemption_arguments(preemption),
    }
    if dry_run:
        with daemon_client(ctx) as client:
            found = client.preview(count, **request)
        show_preview(ctx, found)
        return
    with queued(ctx, wait), daemon_client(ctx) as client:
        lease = client.allocate(count, **request)
    if export:
        _print_export(lease, visible)
        click.echo(give_back_hint(lease.id), err=True)
        return
    _print_lease(ctx, lease.raw)
    if not ctx.obj.json:
        click.echo(give_back_hint(lease.id))


def _require_user(user: str) -> None:
    """A name this machine does not know is a mistake, as `limits --user` says (a uid is
    taken as it is: its user may be gone and its leases not)."""
    if not user.isdigit() and not user_known(user):
        raise CliError(f"no user {user!r} on this machine [invalid_request]", EXIT_USAGE)


@click.command(name="leases", short_help="Active leases: id, GPUs, user, time left, label")
@click.option("--user", help="Only this user's leases (name or uid).")
@click.pass_context
def list_leases(ctx: click.Context, user: str | None) -> None:
    """Active leases: id, GPUs, user, pid (of a lease bound to a process), time left, label."""
    if user is not None:
        _require_user(user)
    with daemon_client(ctx) as client:
        leases = client.request("GET", "/v1/leases")["leases"]
    if user is not None:
        leases = [lease for lease in leases if _owned_by(lease, user)]
    if ctx.obj.json:
        echo_json({"leases": leases})
        return
    now = time.time()
    rows = [
        (
            lease["id"],
            _gpus_text(lease),
            lease["owner"]["user"],
            lease["pid"] if lease.get("bound_to_process") else None,
            lease["policy"],
            format_left(lease["expires_at"], now),
            format_duration(now - lease["created_at"]),
            unit_text(lease),
            _cap_cell(lease),
            preemption_text(lease.get("preemption"), now) if lease.get("preemptible") else None,
            lease["label"],
        )
        for lease in leases
    ]
    # TIME: how long it has been held, as squeue's TIME; UNIT: what each of GPUS is;
    # CAP: the power cap set on its GPUs; PREEMPT: preemptible, or its preemption under way
    # (docs/preemption.md).
    headers = (
        "LEASE",
        "GPUS",
        "USER",
        "PID",
        "POLICY",
        "LEFT",
        "TIME",
        "UNIT",
        "CAP",
        "PREEMPT",
        "LABEL",
    )
    click.echo(render_table(headers, rows, colour=colour_enabled(), width=terminal_width()))
    for lease in leases:
        for other in lease.get("unleased_use", []):
            click.echo(f"lease {lease['id']}: {escape_unprintable(other['message'])}")


@click.command(short_help="Extend a lease's lifetime")
@click.argument("lease_id")
@click.option("--ttl", type=TTL, help="New lifetime from now: 30m, 8h, 2d or seconds.")
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


@click.command(short_help="Give a lease's GPUs back (or --mine: all of yours)")
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


@click.command(short_help="Take a lease away from its holder (root and admins)")
@click.argument("lease_id")
@click.option("--reason", help="Recorded in the lease's history.")
@click.pass_context
def revoke(ctx: click.Context, lease_id: str, reason: str | None) -> None:
    """Take a lease away from its holder (root and admins)."""
    with daemon_client(ctx) as client:
        _print_lease(ctx, client.revoke(lease_id, reason).raw)


COMMANDS = (list_leases, allocate, renew, free, revoke)
