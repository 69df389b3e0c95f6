"""`gpuallocctl`: the admin and user command line."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from gpuallocd.cli.lazy import LazyGroup

__all__ = ["CliContext", "cli", "main"]

# Each command's module, imported when the command is used; every module defines its
# click commands and a `COMMANDS` tuple of them.
_LEASES, _PLAN, _HARDWARE = "gpuallocd.cli.leases", "gpuallocd.cli.plan", "gpuallocd.cli.hardware"
COMMAND_MODULES = {
    "status": _LEASES,
    "leases": _LEASES,
    "allocate": _LEASES,
    "renew": _LEASES,
    "free": _LEASES,
    "revoke": _LEASES,
    "queue": _LEASES,
    "history": _LEASES,
    "run": "gpuallocd.cli.run",
    "bench": "gpuallocd.cli.bench",
    "topology": _HARDWARE,
    "rescan": _HARDWARE,
    "plan": _PLAN,
    "simulate": _PLAN,
    "policy-bench": _PLAN,
}


@dataclass(frozen=True)
class CliContext:
    socket: str | None
    json: bool


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMAND_MODULES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--socket",
    envvar="GPUALLOCD_SOCKET",
    default=None,
    help="The daemon's socket (default: $GPUALLOCD_SOCKET, else /run/gpuallocd/gpuallocd.sock).",
)
@click.option("--json", "as_json", is_flag=True, help="Stable machine-readable JSON output.")
@click.pass_context
def cli(ctx: click.Context, socket: str | None, as_json: bool) -> None:
    """Lease GPUs from gpuallocd, and inspect or revoke leases."""
    ctx.obj = CliContext(socket=socket, json=as_json)


def main() -> None:
    sys.exit(cli.main(prog_name="gpuallocctl", standalone_mode=True))
