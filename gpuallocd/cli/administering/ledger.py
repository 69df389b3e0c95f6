"""`gpuallocctl ledger backup|verify`: the ledger's backups, for admins (root, admin groups).

The daemon does the work (it owns the state directory, which only it may read): `backup`
takes one now and checks it; `verify` checks the ledger in service and every backup
(`PRAGMA quick_check`). Anyone else gets `permission_denied` (exit 5).
"""

from __future__ import annotations

import time
from typing import Any

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.errors import EXIT_ERROR, CliError
from gpuallocd.cli.output import echo_json

__all__ = ["COMMANDS"]


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _backup_line(backup: dict[str, Any]) -> str:
    size = backup["size_bytes"] / 2**20
    return f"{backup['name']}  {_when(backup['taken_at'])}  {size:.1f} MiB  {backup['check']}"


@click.group(short_help="The ledger's backups (admins): take one, or check them")
def ledger() -> None:
    """The ledger's backups (admins): take one now, or check them all."""


@ledger.command()
@click.pass_context
def backup(ctx: click.Context) -> None:
    """Back up the ledger now (SQLite's online backup, checked before it counts)."""
    with daemon_client(ctx) as client:
        answer = client.request("POST", "/v1/ledger/backups")
    if ctx.obj.json:
        echo_json(answer)
        return
    click.echo(f"backed up to {answer['directory']}/{answer['backup']['name']} (checked: ok)")


@ledger.command()
@click.pass_context
def verify(ctx: click.Context) -> None:
    """Check the ledger in service and every backup; exit 1 if any fails its check."""
    with daemon_client(ctx) as client:
        answer = client.request("GET", "/v1/ledger/backups")
    bad = [b["name"] for b in answer["backups"] if b["check"] != "ok"]
    if answer["ledger"]["check"] != "ok":
        bad.insert(0, answer["ledger"]["path"])
    if ctx.obj.json:
        echo_json(answer)
    else:
        click.echo(f"ledger {answer['ledger']['path']}: {answer['ledger']['check']}")
        click.echo(f"backups in {answer['directory']}: {len(answer['backups'])}")
        for item in answer["backups"]:
            click.echo("  " + _backup_line(item))
    if bad:
        raise CliError(f"failed its check: {', '.join(bad)}", EXIT_ERROR)


COMMANDS = (ledger,)
